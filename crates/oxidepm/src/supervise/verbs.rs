//! The daily verbs: `signal`, `reset` and `reload`, with the waiting a
//! reload involves (the locked steps are in `supervisor/verbs.rs`).
//!
//! A reload of an app with a health check runs two processes of the app
//! for a while: the old one is taken out of the app's slot (it keeps
//! serving; its exit is recorded as its own run's), a new one is spawned in
//! the slot (its own run, cgroup leaf, session and log writer on the same
//! log files), and once the new one passes the health check the old one is
//! stopped. The app must allow two copies at once, as pm2's reload needs:
//! a port shared with SO_REUSEPORT, or none. If the new one exits or is not
//! healthy within the check's own timing, it is stopped and the old one
//! keeps the slot.

use super::supervisor::{lock, Members, Shared};
use super::{control, spawn, Error};
use crate::supervise::app::OldRun;
use nix::sys::signal::Signal;
use oxidepm_proto::{
    Actor, AppAction, EventKind, HealthSpec, HealthState, ReloadHow, Reloaded, ResetDone,
    SignalName, Signalled, Status,
};
use std::time::Duration;

/// The longest a reload waits for a new process to be healthy, whatever
/// its health check's timing says.
pub const MAX_RELOAD_WAIT: Duration = Duration::from_secs(600);

/// How often a reload looks at the new process's health.
const RELOAD_POLL: Duration = Duration::from_millis(20);

/// Why a verb was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// The signal is not one this system has.
    #[error("unknown signal {signal:?}; use a name such as SIGUSR1, USR1 or HUP, or a number from 1 to 31")]
    UnknownSignal {
        /// The signal as given.
        signal: String,
    },
    /// Some of the apps have no process to act on.
    #[error("{} not running, so nothing was done; start {} first", list(.apps), if .apps.len() == 1 { "it" } else { "them" })]
    NotRunning {
        /// Each app with its status.
        apps: Vec<(String, Status)>,
    },
    /// The signal could not be sent.
    #[error("cannot send {signal} to {app} (pid {pid}): {source}")]
    SignalFailed {
        /// The app.
        app: String,
        /// Its main process.
        pid: u32,
        /// The signal.
        signal: &'static str,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The app was deleted meanwhile.
    #[error("no app with id {id} (deleted meanwhile)")]
    Gone {
        /// Its id.
        id: u64,
    },
    /// A reload of the app is under way.
    #[error("{app} is being reloaded already; wait for that reload to end")]
    ReloadBusy {
        /// The app.
        app: String,
    },
    /// The new process did not get healthy: the old one keeps running.
    #[error("reload of {app} failed: {why}; the old process (pid {old_pid}) keeps running and the new one was stopped{done}")]
    ReloadFailed {
        /// The app.
        app: String,
        /// What happened to the new process.
        why: String,
        /// The process kept.
        old_pid: u32,
        /// The apps reloaded before this one, as a sentence end.
        done: String,
    },
    /// A request stopped, restarted or deleted the app during the reload.
    #[error("reload of {app} interrupted: {why}")]
    ReloadInterrupted {
        /// The app.
        app: String,
        /// What happened.
        why: String,
    },
    /// Starting the new process (or the app) failed.
    #[error(transparent)]
    Supervise(#[from] Error),
}

fn list(apps: &[(String, Status)]) -> String {
    let each: Vec<String> = apps
        .iter()
        .map(|(n, s)| format!("{n} ({})", s.as_str()))
        .collect();
    format!(
        "{} {}",
        each.join(", "),
        if apps.len() == 1 { "is" } else { "are" }
    )
}

/// Reads a signal as a request gives it: `SIGUSR1`, `USR1`, `usr1` or a
/// number.
pub fn parse_signal(s: &SignalName) -> Result<Signal, VerbError> {
    let found = match s {
        SignalName::Name(n) => spawn::parse_signal(n.trim()),
        SignalName::Number(n) => i32::try_from(*n)
            .ok()
            .and_then(|n| Signal::try_from(n).ok()),
    };
    found.ok_or_else(|| VerbError::UnknownSignal {
        signal: s.to_string(),
    })
}

/// Sends `sig` to the main process of every app of `ids`; refused whole
/// (nothing sent) when one of them is not running.
pub fn signal(
    shared: &Shared,
    ids: &[u64],
    sig: Signal,
    actor: &Actor,
) -> Result<Vec<Signalled>, VerbError> {
    let s = lock(shared);
    let idle: Vec<(String, Status)> = ids
        .iter()
        .filter_map(|id| s.app(*id))
        .filter(|a| a.rt.status != Status::Online || a.rt.pid.is_none())
        .map(|a| (a.spec.name.clone(), a.rt.status))
        .collect();
    if !idle.is_empty() {
        return Err(VerbError::NotRunning { apps: idle });
    }
    let mut out = Vec::new();
    for &id in ids {
        let pid = s.signal_main(id, sig, actor)?;
        let name = s.names(&[id]).pop().unwrap_or_default();
        out.push(Signalled {
            id,
            name,
            pid,
            signal: sig.as_str().to_string(),
        });
    }
    Ok(out)
}

/// Zeroes the restart counters of `ids` and turns `errored` into `stopped`.
pub fn reset(shared: &Shared, ids: &[u64], actor: &Actor) -> Vec<ResetDone> {
    let mut s = lock(shared);
    ids.iter().filter_map(|&id| s.reset(id, actor)).collect()
}

/// How long a reload waits for a new process with check `h` to be
/// healthy: its start period, then `retries + 1` checks with their
/// timeouts, and a second to spare; at most [`MAX_RELOAD_WAIT`].
pub fn reload_wait(h: &HealthSpec) -> Duration {
    let per_check = h.interval_ms.max(10).saturating_add(h.timeout_ms);
    let ms = h
        .start_period_ms
        .saturating_add(per_check.saturating_mul(u64::from(h.retries.max(1)) + 1))
        .saturating_add(1000);
    Duration::from_millis(ms).min(MAX_RELOAD_WAIT)
}

/// Reloads the apps `ids` one after the other (so a group of instances
/// never has all of them new and unproven at once); stops at the first
/// that fails, saying which were reloaded before it.
pub async fn reload(
    shared: &Shared,
    ids: &[u64],
    actor: &Actor,
) -> Result<Vec<Reloaded>, VerbError> {
    let mut out: Vec<Reloaded> = Vec::new();
    for &id in ids {
        match reload_one(shared, id, actor).await {
            Ok(r) => out.push(r),
            Err(VerbError::ReloadFailed {
                app, why, old_pid, ..
            }) => {
                let done = if out.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = out.iter().map(|r| r.name.as_str()).collect();
                    format!("; reloaded before it: {}", names.join(", "))
                };
                return Err(VerbError::ReloadFailed {
                    app,
                    why,
                    old_pid,
                    done,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

async fn reload_one(shared: &Shared, id: u64, actor: &Actor) -> Result<Reloaded, VerbError> {
    let (name, health, old_pid, online) = {
        let s = lock(shared);
        let a = s.app(id).ok_or(VerbError::Gone { id })?;
        (
            a.spec.name.clone(),
            a.spec.health.clone(),
            a.rt.pid,
            a.rt.status == Status::Online && a.rt.pid.is_some(),
        )
    };
    let answer = |how, pid| Reloaded {
        how,
        id,
        name: name.clone(),
        old_pid,
        pid,
    };
    let pid_of = |done: Vec<AppAction>| done.iter().find(|a| a.id == id).and_then(|a| a.pid);
    if !online {
        let done = control::start(shared, &[id], actor).await?;
        return Ok(answer(ReloadHow::Started, pid_of(done)));
    }
    let Some(health) = health else {
        let done = control::restart(shared, &[id], actor).await?;
        return Ok(answer(ReloadHow::Restarted, pid_of(done)));
    };
    let (old, new_pid) = {
        let mut s = lock(shared);
        let old = s.reload_aside(id, actor)?;
        if let Some(a) = s.app_mut(id) {
            a.count_restart(actor);
        }
        match s.spawn_now(id, actor, EventKind::Restarted) {
            Ok(pid) => (old, pid),
            Err(e) => {
                // The old process keeps the slot; a retry the failure may
                // have queued is stale once it is back.
                let why = format!("the new process could not be started: {e}");
                let _ = s.reload_undo(id, &old, actor, &why);
                return Err(VerbError::ReloadFailed {
                    app: name,
                    why,
                    old_pid: old.pid,
                    done: String::new(),
                });
            }
        }
    };
    match wait_healthy(shared, id, new_pid, reload_wait(&health)).await {
        Ok(()) => {
            let m = lock(shared).reload_done(id, &old, actor);
            retire(shared, id, &old, m).await;
            Ok(answer(ReloadHow::Reloaded, Some(new_pid)))
        }
        Err(NotHealthy::Interrupted(why)) => Err(VerbError::ReloadInterrupted { app: name, why }),
        Err(NotHealthy::Failed(why)) => {
            let undone = lock(shared).reload_undo(id, &old, actor, &why);
            if let Some((new, m)) = undone {
                retire(shared, id, &new, Some(m)).await;
            }
            Err(VerbError::ReloadFailed {
                app: name,
                why,
                old_pid: old.pid,
                done: String::new(),
            })
        }
    }
}

/// Why a reload's new process is not healthy.
enum NotHealthy {
    /// It exited, or was not healthy in time: the old process is kept.
    Failed(String),
    /// The app was stopped, restarted or deleted meanwhile: that request
    /// decided what runs.
    Interrupted(String),
}

/// Waits until the new process `pid` of app `id` is healthy.
async fn wait_healthy(
    shared: &Shared,
    id: u64,
    pid: u32,
    within: Duration,
) -> Result<(), NotHealthy> {
    let until = tokio::time::Instant::now() + within;
    loop {
        {
            let mut s = lock(shared);
            let Some(a) = s.app_mut(id) else {
                return Err(NotHealthy::Interrupted("the app was deleted".into()));
            };
            if a.rt.pid != Some(pid) || a.rt.status != Status::Online {
                if a.reloading {
                    a.reloading = false;
                    return Err(NotHealthy::Interrupted(format!(
                        "the app was {} meanwhile (`oxidepm status` shows what runs)",
                        a.rt.status.as_str()
                    )));
                }
                return Err(NotHealthy::Failed(
                    "the new process exited before it was healthy".into(),
                ));
            }
            if a.health == Some(HealthState::Healthy) {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= until {
            return Err(NotHealthy::Failed(format!(
                "the new process (pid {pid}) was not healthy within {:.1} s (the health check's start period, retries and timeouts)",
                within.as_secs_f64()
            )));
        }
        tokio::time::sleep(RELOAD_POLL).await;
    }
}

/// Waits until a retired run's processes are gone (SIGKILL after the
/// app's kill timeout), then forgets the run.
async fn retire(shared: &Shared, id: u64, run: &OldRun, members: Option<Members>) {
    let Some(m) = members else { return };
    let t = lock(shared).app(id).map_or(Duration::from_secs(5), |a| {
        Duration::from_millis(a.spec.kill_timeout_ms)
    });
    if !m.emptied(t).await {
        m.kill_and_wait().await;
    }
    // The reaper records the run's exit status when it sees the exit;
    // give it a moment before the run's end is recorded without one.
    for _ in 0..25 {
        let seen = lock(shared)
            .app(id)
            .is_none_or(|a| !a.retiring.iter().any(|r| r.pid == run.pid));
        if seen {
            break;
        }
        tokio::time::sleep(RELOAD_POLL).await;
    }
    lock(shared).retired_gone(id, run);
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_proto::HealthProbe;

    #[test]
    fn signals_by_name_or_number() {
        let name = |s: &str| parse_signal(&SignalName::Name(s.into())).map_err(|e| e.to_string());
        for s in ["SIGUSR1", "USR1", "usr1", " sigusr1 ", "10"] {
            assert_eq!(name(s), Ok(Signal::SIGUSR1), "{s}");
        }
        assert_eq!(
            parse_signal(&SignalName::Number(9)).unwrap(),
            Signal::SIGKILL
        );
        for bad in ["SIGFOO", "", "0", "99", "-1"] {
            let e = name(bad).unwrap_err();
            assert!(e.contains("unknown signal"), "{bad}: {e}");
        }
        assert!(parse_signal(&SignalName::Number(u32::MAX)).is_err());
    }

    #[test]
    fn a_reload_waits_as_long_as_the_check_takes_and_no_longer() {
        let mut h = HealthSpec {
            probe: HealthProbe::Tcp("127.0.0.1:1".into()),
            expect_status: None,
            interval_ms: 100,
            timeout_ms: 1000,
            retries: 3,
            start_period_ms: 2000,
        };
        // The start period, 4 checks of 1.1 s, a second to spare.
        assert_eq!(reload_wait(&h), Duration::from_millis(2000 + 4400 + 1000));
        h.interval_ms = u64::MAX;
        assert_eq!(reload_wait(&h), MAX_RELOAD_WAIT);
    }
}
