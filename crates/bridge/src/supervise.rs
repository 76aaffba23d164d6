//! Each source's inbound side under a supervision of its own, so that one
//! source's failure never stops another source or the outbox delivery.
//!
//! A source's inbound loop runs in a task of its own. When it ends other
//! than by the bridge stopping — an error (a gateway that refused the bot
//! token), its loop returning, or a panic — the source is stopped and
//! reported: logged, and written to `bridge:status`
//! ([`source_status`](oxidepm_lanes::source_status): `failed`, the reason
//! with what to do, and when), for `oxidepm lanes` and `/metrics`. It is
//! not started again on its own: what failed for good fails again, and a
//! source that stays down says so where a loop would hide it. A reload
//! (SIGHUP, which the daemon sends after it rewrote the bridge's files)
//! starts every failed source again, once the sources have taken up the
//! new configuration (a new token). Its outbound side (deliveries) is
//! not stopped: it does not depend on the inbound loop.

use crate::conn::Con;
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use crate::source::Source;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::{AbortHandle, JoinHandle};

/// The inbound sides of the bridge's sources.
pub struct Supervisor {
    con: Con,
    publisher: Publisher,
    shutdown: Shutdown,
    running: Mutex<Vec<JoinHandle<()>>>,
    /// Sources stopped by a failure, to start again at a reload.
    failed: Arc<Mutex<Vec<Arc<dyn Source>>>>,
}

/// Aborts a task when dropped: a supervising task aborted at shutdown
/// takes the source's task with it.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Supervisor {
    /// A supervisor whose sources publish with `publisher` and write their
    /// state with `con`.
    pub fn new(con: Con, publisher: Publisher, shutdown: Shutdown) -> Supervisor {
        Supervisor {
            con,
            publisher,
            shutdown,
            running: Mutex::new(Vec::new()),
            failed: Arc::default(),
        }
    }

    /// Says that no source runs yet (what an earlier run wrote is gone).
    pub async fn clear(&self) {
        if let Err(e) = crate::stats::clear_sources(&mut self.con.clone()).await {
            log::warn!("cannot clear the sources' state in bridge:status: {e}");
        }
    }

    /// Starts `source`'s inbound side.
    pub fn start(&self, source: Arc<dyn Source>) {
        let t = tokio::spawn(watch(
            source,
            self.publisher.clone(),
            self.shutdown.clone(),
            self.con.clone(),
            self.failed.clone(),
        ));
        let mut running = lock(&self.running);
        running.retain(|t| !t.is_finished());
        running.push(t);
    }

    /// Starts every source stopped by a failure again; returns their names.
    pub fn restart_failed(&self) -> Vec<String> {
        let again: Vec<Arc<dyn Source>> = std::mem::take(&mut *lock(&self.failed));
        let names = again.iter().map(|s| s.name().to_string()).collect();
        for s in again {
            log::info!("source {}: started again", s.name());
            self.start(s);
        }
        names
    }

    /// Waits for every inbound side to stop (the shutdown is set), each
    /// within `grace`, then aborts what is left.
    pub async fn stop(&self, grace: Duration) {
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.running));
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(grace, t).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// Runs one source's inbound side and reports how it ended.
async fn watch(
    source: Arc<dyn Source>,
    publisher: Publisher,
    shutdown: Shutdown,
    mut con: Con,
    failed: Arc<Mutex<Vec<Arc<dyn Source>>>>,
) {
    let name = source.name().to_string();
    if let Err(e) = crate::stats::record_source(&mut con, &name, None).await {
        log::warn!("source {name}: cannot record that it runs in bridge:status: {e}");
    }
    let s = source.clone();
    let sd = shutdown.clone();
    let task = tokio::spawn(async move { s.inbound(publisher, sd).await });
    let _abort = AbortOnDrop(task.abort_handle());
    let why = match task.await {
        Ok(Ok(())) if shutdown.is_set() => return,
        Ok(Ok(())) => "its inbound loop ended on its own; reload the bridge (SIGHUP, or \
                       `oxidepm reload-daemon-config`) to start it again"
            .to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(e) if e.is_panic() => format!(
            "it panicked ({}); this is a bug: report it with the bridge's log; reload the bridge \
             (SIGHUP, or `oxidepm reload-daemon-config`) to start it again",
            panic_message(e.into_panic())
        ),
        // Aborted: the bridge is stopping.
        Err(_) => return,
    };
    log::error!("source {name} stopped: {why} (the other sources and the outbox delivery go on)");
    if let Err(e) = crate::stats::record_source(&mut con, &name, Some(&why)).await {
        log::warn!("source {name}: cannot record its failure in bridge:status: {e}");
    }
    lock(&failed).push(source);
}

/// The text a panic was raised with, if it has one.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}
