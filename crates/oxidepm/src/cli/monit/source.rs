//! Where monit's data comes from: read requests polled on a thread of its
//! own, so a slow daemon never freezes the screen.
//!
//! The screen only sees [`Source`]; today it is [`Polling`] (status,
//! events, lanes, logs every tick). An event stream can replace it later
//! without the screen changing.

use crate::cli::connect;
use crate::client::{Client, ClientError};
use oxidepm_proto::{AppAction, AppInfo, EventRecord, LanesReport, LogLine, LogsDone, Op, Stopped};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Events asked for each tick: enough to find each app's last actor.
const EVENTS: usize = 50;
/// Ticks between two asks for the lanes after they could not be read
/// (no lanes configured): once is enough to know, not every second.
const LANES_RETRY_TICKS: u32 = 10;

/// What the screen wants read, besides the apps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// The app whose log tail is shown, and how many lines.
    pub logs: Option<(String, usize)>,
}

/// A request that changes something, made under the caller's tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Restart the app.
    Restart(String),
    /// Stop the app.
    Stop(String),
}

/// Everything read in one tick; a part that failed says why.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The apps, or why they could not be read.
    pub apps: Result<Vec<AppInfo>, String>,
    /// The most recent events, oldest first.
    pub events: Vec<EventRecord>,
    /// The lanes; `None` when they were not asked for this tick.
    pub lanes: Option<Result<LanesReport, String>>,
    /// The log tail of `Want::logs`, with its app.
    pub logs: Option<(String, Result<Vec<LogLine>, String>)>,
    /// When it was read.
    pub at: Instant,
}

/// What the feed tells the screen.
#[derive(Debug)]
pub enum Update {
    /// A tick's reads.
    Snapshot(Box<Snapshot>),
    /// An action's result: what was done, or the daemon's refusal.
    Done(Result<String, String>),
}

/// A source of monit's data.
pub trait Source: Send {
    /// Reads everything the screen shows.
    fn snapshot(&mut self, want: &Want) -> Snapshot;
    /// Makes a change; `Err` carries the refusal as the daemon gave it.
    fn act(&mut self, action: &Action) -> Result<String, String>;
}

/// Read requests on one connection, reopened when it breaks.
#[derive(Default)]
pub struct Polling {
    client: Option<Client>,
    lanes_wait: u32,
}

/// An error as a person reads it: the daemon's code and message.
fn said(e: &ClientError) -> String {
    match e {
        ClientError::Daemon(b) => format!("{}: {}", b.code, b.message),
        other => other.to_string(),
    }
}

impl Polling {
    /// Runs `f` on the connection, opening one first if needed; a broken
    /// connection is dropped, to be opened again next time.
    fn with<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, ClientError>,
    ) -> Result<T, String> {
        if self.client.is_none() {
            // Never start a daemon from monit: watching must not change the host.
            self.client = Some(connect::client(false).map_err(|e| e.to_string())?);
        }
        let Some(client) = self.client.as_mut() else {
            return Err("no connection".into());
        };
        let r = f(client);
        if let Err(e) = &r {
            if !matches!(e, ClientError::Daemon(_)) {
                self.client = None;
            }
        }
        r.map_err(|e| said(&e))
    }
}

impl Source for Polling {
    fn snapshot(&mut self, want: &Want) -> Snapshot {
        let apps = self.with(|c| c.call_as::<Vec<AppInfo>>(Op::Status));
        let mut events = self
            .with(|c| {
                c.call_as::<Vec<EventRecord>>(Op::Events {
                    target: None,
                    limit: EVENTS,
                    since: None,
                })
            })
            .unwrap_or_default();
        events.sort_by_key(|e| e.seq);
        let lanes = if self.lanes_wait == 0 {
            let r = self.with(|c| c.call_as::<LanesReport>(Op::Lanes));
            self.lanes_wait = if r.is_ok() { 0 } else { LANES_RETRY_TICKS };
            Some(r)
        } else {
            self.lanes_wait -= 1;
            None
        };
        let logs = want.logs.as_ref().map(|(app, lines)| {
            let r = self.with(|c| {
                let mut got = Vec::new();
                let op = Op::logs_tail(app.clone(), *lines);
                let _: Option<LogsDone> = c.call_stream_as(op, |l: LogLine| {
                    got.push(l);
                    true
                })?;
                Ok(got)
            });
            (app.clone(), r)
        });
        Snapshot {
            apps,
            events,
            lanes,
            logs,
            at: Instant::now(),
        }
    }

    fn act(&mut self, action: &Action) -> Result<String, String> {
        match action {
            Action::Restart(app) => self
                .with(|c| {
                    c.call_as::<Vec<AppAction>>(Op::Restart {
                        target: app.clone(),
                    })
                })
                .map(|_| format!("restarted {app}")),
            Action::Stop(app) => self
                .with(|c| {
                    c.call_as::<Vec<Stopped>>(Op::Stop {
                        target: app.clone(),
                    })
                })
                .map(|_| format!("stopped {app}")),
        }
    }
}

/// What the screen asks of the feed.
#[derive(Debug)]
pub enum Ask {
    /// Read something else from now on (and now).
    Want(Want),
    /// Make a change, then read again.
    Act(Action),
}

/// The feed's two ends, as the screen holds them.
pub struct Feed {
    /// Asks to the feed's thread.
    pub ask: Sender<Ask>,
    /// Updates from it.
    pub updates: Receiver<Update>,
}

/// Starts `source` on a thread that reads every `interval`, and at once
/// after each ask. The thread ends when the screen drops its [`Feed`].
pub fn spawn(mut source: impl Source + 'static, interval: Duration, want: Want) -> Feed {
    let (ask_tx, ask_rx) = mpsc::channel::<Ask>();
    let (up_tx, up_rx) = mpsc::channel::<Update>();
    std::thread::spawn(move || {
        let mut want = want;
        loop {
            if up_tx
                .send(Update::Snapshot(Box::new(source.snapshot(&want))))
                .is_err()
            {
                return;
            }
            match ask_rx.recv_timeout(interval) {
                Ok(Ask::Want(w)) => want = w,
                Ok(Ask::Act(a)) => {
                    if up_tx.send(Update::Done(source.act(&a))).is_err() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    });
    Feed {
        ask: ask_tx,
        updates: up_rx,
    }
}
