//! Reaping children and watching adopted processes.
//!
//! The daemon is a child subreaper, and this module is the only place that
//! waits for children: one `waitpid(-1)` loop on SIGCHLD reaps apps, log
//! shims and orphans the subreaper inherited. Apps that outlived an earlier
//! daemon are not our children; their exit is seen by `recovery`.

use super::policy::Exit;
use super::supervisor::{lock, Shared};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};

pub use oxidepm_sys::subreaper::become_subreaper;

/// Reaps every child on SIGCHLD, forever.
pub async fn run(shared: Shared) {
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            log::error!("cannot watch SIGCHLD: {e}; exits will not be noticed");
            return;
        }
    };
    loop {
        reap_all(&shared);
        if sigchld.recv().await.is_none() {
            return;
        }
    }
}

/// Reaps whatever has exited, dispatching app exits to the supervisor.
pub fn reap_all(shared: &Shared) {
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
        if let Some(id) = s.app_of_child(pid) {
            s.handle_exit(id, pid, exit);
        } else {
            s.probe_exited(pid, exit);
        }
    }
}
