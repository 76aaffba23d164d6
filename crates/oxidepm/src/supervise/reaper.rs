//! Reaping children and watching adopted processes.
//!
//! The daemon is a child subreaper, and this module is the only place that
//! waits for children: one `waitpid(-1)` loop on SIGCHLD reaps apps, log
//! shims and orphans the subreaper inherited. Apps that outlived an earlier
//! daemon are not our children; their exit is seen through a pidfd.

use super::policy::Exit;
use super::procfs;
use super::supervisor::{lock, SeenExit, Shared};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use oxidepm_proto::{Actor, Status};
use oxidepm_sys::pidfd;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;
use tokio::signal::unix::{signal, SignalKind};

pub use oxidepm_sys::subreaper::become_subreaper;

/// Exits handled per lock hold: a storm of exits is worked through in
/// pieces, and a request waiting for the lock gets it in between.
const BATCH: usize = 16;

/// Reaps every child on SIGCHLD, forever: each wakeup collects every exit
/// there is (cheap: waitpid, no fork, no write), then handles them at most
/// `BATCH` at a time, yielding between batches.
pub async fn run(shared: Shared) {
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot watch SIGCHLD: {e}; exits will not be noticed");
            return;
        }
    };
    let mut seen = VecDeque::new();
    loop {
        collect(&shared, &mut seen);
        if seen.is_empty() {
            if sigchld.recv().await.is_none() {
                return;
            }
            continue;
        }
        {
            let mut s = lock(&shared);
            for e in seen.drain(..seen.len().min(BATCH)) {
                s.handle_seen_exit(e);
            }
        }
        tokio::task::yield_now().await;
    }
}

/// Reaps every child that has exited, noting when: an app's exit goes to
/// `seen` for handling, a probe's to its waiter. The pid of each is
/// unmapped while the lock is held, before anything can be forked again.
fn collect(shared: &Shared, seen: &mut VecDeque<SeenExit>) {
    let mut s = lock(shared);
    loop {
        let (pid, exit) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (
                pid,
                Exit {
                    code: Some(code),
                    signal: None,
                },
            ),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (
                pid,
                Exit {
                    code: None,
                    signal: Some(sig as i32),
                },
            ),
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => continue,
        };
        let pid = pid.as_raw() as u32;
        match s.seen_exit(pid, exit, Instant::now()) {
            Some(e) => seen.push_back(e),
            None => {
                s.probe_exited(pid, exit);
            }
        }
    }
}

/// Brings back every stored app after a daemon start: a process that
/// outlived the previous daemon (same pid, same start time, same boot) is
/// adopted and supervised again; an app whose process died meanwhile is
/// handled by its restart policy as a crash; with `resurrect`, apps that
/// were running at the last clean stop are started again.
///
/// Returns the apps to start (they are started in dependency order by the
/// caller).
pub fn recover(shared: &Shared, resurrect: bool) -> Vec<u64> {
    let mut to_start = Vec::new();
    let boot = procfs::boot_id();
    let ids: Vec<u64> = lock(shared).apps().map(|a| a.id).collect();
    for id in ids {
        let mut s = lock(shared);
        let Some(app) = s.app(id) else { continue };
        let rt = app.rt.clone();
        let was_running = matches!(
            rt.status,
            Status::Online | Status::Stopping | Status::Starting
        );
        if was_running {
            if let (Some(pid), Some(start)) = (rt.pid, rt.pid_start) {
                let same_boot = rt.boot_id.as_deref() == Some(boot.as_str());
                if same_boot && procfs::is_same_process(pid, start) {
                    // Open the pidfd first and check the start time again
                    // after, so a pid reused in between is never adopted.
                    if let Ok(fd) = pidfd::open(pid) {
                        if procfs::is_same_process(pid, start) {
                            s.adopted(id);
                            let stopping = rt.status == Status::Stopping;
                            drop(s);
                            watch_adopted(shared.clone(), id, pid, fd);
                            if stopping {
                                let shared = shared.clone();
                                tokio::spawn(async move {
                                    let actor = Actor::system("adopt");
                                    super::control::stop(&shared, &[id], &actor, false).await;
                                });
                            }
                            continue;
                        }
                    }
                }
            }
            // Gone while no daemon ran (or the pid now names another
            // process): a crash, unless it was being stopped.
            let app = s.app_mut(id).expect("present");
            if rt.status == Status::Stopping || !rt.desired_running {
                app.rt.status = Status::Stopped;
                app.rt.pid = None;
                s.persist(id);
                continue;
            }
            match rt.pid {
                Some(pid) => {
                    // Route through the normal exit path with an unknown
                    // status, so the policy and events are the same.
                    app.rt.status = Status::Online;
                    s.handle_exit_unowned(id, pid);
                }
                None => {
                    // It was waiting (restart delay, dependencies).
                    app.rt.status = Status::Stopped;
                    to_start.push(id);
                }
            }
        } else if resurrect && rt.desired_running && rt.status == Status::Stopped {
            to_start.push(id);
        }
    }
    to_start
}

/// Watches an adopted process through its pidfd and reports its exit.
pub fn watch_adopted(shared: Shared, id: u64, pid: u32, fd: OwnedFd) {
    tokio::spawn(async move {
        // A pidfd becomes readable when the process exits.
        if let Err(e) = pidfd::exited(fd).await {
            log::warn!("cannot watch adopted pid {pid} ({e}); polling instead");
            while procfs::stat(pid).is_some_and(|s| s.state != b'Z') {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        lock(&shared).handle_exit_unowned(id, pid);
    });
}
