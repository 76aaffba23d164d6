//! Resource subscriptions: `resources/subscribe` to an app's log or the
//! event stream is fed by the daemon's own streams (a log follow, the
//! event bus), never by polling; updates are told at most once a second
//! per resource, however fast the app writes.

use super::daemon::{Daemon, Leases};
use super::resources::{app_of, EVENTS};
use oxidepm_proto::{Op, Streamed};
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::{Peer, RoleServer};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The most resources one session follows at once (each holds a thread
/// and one or two daemon connections).
pub const MAX: usize = 16;

/// The subscriptions of one session, by URI.
#[derive(Clone, Default)]
pub struct Subscriptions {
    live: Arc<Mutex<HashMap<String, Live>>>,
}

/// A subscription's stop flag, the ends of its streams' connections and
/// their leases, given back as it ends.
struct Live {
    stop: Arc<AtomicBool>,
    closers: Vec<UnixStream>,
    _leases: Leases,
}

/// The connections a subscription to `uri` holds: its app's events and
/// log follow, or the events.
pub fn streams(uri: &str) -> u32 {
    if uri == EVENTS {
        1
    } else {
        2
    }
}

impl Subscriptions {
    /// Follows `uri` for `peer`; an error says why not.
    pub fn add(
        &self,
        daemon: Arc<Daemon>,
        peer: Peer<RoleServer>,
        uri: &str,
        leases: Leases,
    ) -> Result<(), String> {
        let app = if uri == EVENTS {
            None
        } else {
            Some(
                app_of(uri)
                    .ok_or_else(|| {
                        format!("no resource {uri:?} to subscribe to: resources/list names them")
                    })?
                    .to_string(),
            )
        };
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.contains_key(uri) {
            return Ok(());
        }
        if live.len() >= MAX {
            return Err(format!(
                "already {MAX} subscriptions in this session: unsubscribe from one first"
            ));
        }
        // Checked now, so that a resource the caller may not read is
        // refused at subscribe rather than never updated.
        if let Some(app) = &app {
            daemon
                .call("subscribe", Op::logs_tail(app.clone(), 0))
                .map_err(|f| format!("{}: {}", f.code, f.message))?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let ops = match &app {
            None => vec![Op::Subscribe {
                target: None,
                kinds: vec![],
            }],
            Some(app) => vec![
                Op::Subscribe {
                    target: Some(app.clone()),
                    kinds: vec![],
                },
                Op::logs_follow(app.clone()),
            ],
        };
        // Opened now, so that a daemon that refuses them refuses the
        // subscription rather than leave it silent.
        let mut streams = Vec::new();
        let mut closers = Vec::new();
        for op in ops {
            let mut c = daemon
                .client("subscribe")
                .map_err(|f| format!("{}: {}", f.code, f.message))?;
            let closer = c
                .wait_for_ever()
                .and_then(|()| c.closer())
                .map_err(|e| format!("E_UNAVAILABLE: the connection to the daemon: {e}"))?;
            closers.push(closer);
            streams.push((op, c));
        }
        live.insert(
            uri.to_string(),
            Live {
                stop: stop.clone(),
                closers,
                _leases: leases,
            },
        );
        for (op, mut c) in streams {
            let (tx, stop) = (tx.clone(), stop.clone());
            // The event stream opens with an acknowledgment, which is no
            // change; a log follow's every item is a new line.
            let events = matches!(op, Op::Subscribe { .. });
            // A thread of its own: a follow may be silent for hours, and
            // must not hold a turn of the tool calls' blocking pool.
            std::thread::spawn(move || {
                let _ = c.call_stream(op, |item| {
                    let change = !events
                        || !matches!(
                            serde_json::from_value::<Streamed>(item),
                            Ok(Streamed::Subscribed(_))
                        );
                    // A full channel is an update already on its way.
                    if change {
                        let _ = tx.try_send(());
                    }
                    !stop.load(Ordering::Relaxed) && !tx.is_closed()
                });
            });
        }
        let uri = uri.to_string();
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let p = ResourceUpdatedNotificationParam::new(uri.clone());
                if peer.notify_resource_updated(p).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        Ok(())
    }

    /// Stops following `uri`.
    pub fn remove(&self, uri: &str) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sub) = live.remove(uri) {
            sub.stop.store(true, Ordering::Relaxed);
            // The streams end now, not at their next item: their
            // connections and leases are free for what comes next.
            for c in sub.closers {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}
