//! What a program the CLI runs to read a config file (node, for an
//! ecosystem.config.js) leaves behind: a process it started in its own
//! group, or one that left the group with `setsid` (`detached: true`, a
//! daemon that forks twice). While the program runs the CLI is a child
//! subreaper, so such a process is re-parented to the CLI when its parent
//! dies instead of to init, and can be found and ended afterwards.

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Rounds of ending re-parented processes; each round ends the children
/// the previous one left, so a tree deeper than this (a fork loop) is given
/// up on rather than chased forever.
const MAX_ROUNDS: usize = 64;

/// The CLI as subreaper, and the children it had before, which are none of
/// the program's.
pub struct Leftovers {
    before: Vec<u32>,
    reaping: bool,
}

impl Leftovers {
    /// Starts watching: call before the program is spawned.
    pub fn watch() -> Leftovers {
        let reaping = nix::sys::prctl::set_child_subreaper(true).is_ok();
        Leftovers {
            before: children(),
            reaping,
        }
    }

    /// Kills every child the CLI got since [`Self::watch`] (the program,
    /// if still unreaped, and what was re-parented), with their groups,
    /// and reaps them; their own children are re-parented in turn and
    /// ended in the next round.
    pub fn end(self) {
        if !self.reaping {
            return;
        }
        for _ in 0..MAX_ROUNDS {
            let new: Vec<u32> = children()
                .into_iter()
                .filter(|p| !self.before.contains(p))
                .collect();
            if new.is_empty() {
                break;
            }
            for &pid in &new {
                let Ok(p) = i32::try_from(pid).map(Pid::from_raw) else {
                    continue;
                };
                // Its group first: a session leader's group holds what it
                // started; the group is ours to signal while it is unreaped.
                let _ = killpg(p, Signal::SIGKILL);
                let _ = kill(p, Signal::SIGKILL);
            }
            for &pid in &new {
                if let Ok(p) = i32::try_from(pid).map(Pid::from_raw) {
                    let _ = waitpid(p, Some(WaitPidFlag::__WALL));
                }
            }
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if self.reaping {
            let _ = nix::sys::prctl::set_child_subreaper(false);
        }
    }
}

/// The CLI's own children, zombies included.
fn children() -> Vec<u32> {
    let me = std::process::id();
    oxidepm_sys::procfs::all()
        .into_iter()
        .filter(|p| p.ppid == me)
        .map(|p| p.pid)
        .collect()
}
