//! Reaping children and watching adopted processes.
//!
//! The daemon is a child subreaper, and this module is the only place that
//! waits for children: one `waitpid(-1)` loop on SIGCHLD reaps apps, log
//! shims and orphans the subreaper inherited. Apps that outlived an earlier
//! daemon are not our children; their exit is seen by `recovery`.

use super::policy::Exit;
use super::supervisor::{lock, SeenExit, Shared};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::VecDeque;
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
            Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::code(code)),
            Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, Exit::signal(sig as i32)),
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
