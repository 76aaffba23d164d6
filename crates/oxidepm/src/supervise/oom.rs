//! Telling the kernel's OOM kills from other deaths by SIGKILL.
//!
//! A process the OOM killer takes dies of SIGKILL like any other, and its
//! parent is told nothing more. The kernel counts its kills, though
//! (`oom_kill` in `/proc/vmstat`, memory cgroups' kills included), so a
//! SIGKILL the daemon did not send, seen while that count has kills no
//! exit has claimed yet, was the OOM killer's: the exit is recorded as
//! such and the daemon's log says what it saw. A kill of some other
//! process on the host could be taken for an app's within
//! [`CLAIM_WINDOW`], which is why the wording says "out of memory" and
//! not more.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long kills the kernel counted stay claimable by an app's SIGKILL.
pub const CLAIM_WINDOW: Duration = Duration::from_secs(10);

/// The OOM kills counted and not yet claimed by an exit.
#[derive(Debug, Default)]
pub struct Kills {
    /// The kernel's count when last read.
    last: Option<u64>,
    /// Kills counted and not claimed.
    pending: u64,
    /// When the count last rose.
    rose_at: Option<Instant>,
}

impl Kills {
    /// Takes the kernel's count `count` read at `now`, for an exit by
    /// SIGKILL that the daemon did not send (`unsent_sigkill`) or any
    /// other exit; true when that SIGKILL is taken for an OOM kill.
    pub fn on_exit(&mut self, count: Option<u64>, now: Instant, unsent_sigkill: bool) -> bool {
        if let Some(count) = count {
            if let Some(last) = self.last {
                if count > last {
                    self.pending += count - last;
                    self.rose_at = Some(now);
                }
            }
            self.last = Some(count);
        }
        if self
            .rose_at
            .is_none_or(|at| now.saturating_duration_since(at) > CLAIM_WINDOW)
        {
            self.pending = 0;
        }
        if unsent_sigkill && self.pending > 0 {
            self.pending -= 1;
            return true;
        }
        false
    }
}

static KILLS: Mutex<Kills> = Mutex::new(Kills {
    last: None,
    pending: 0,
    rose_at: None,
});

/// Reads the kernel's count now, so kills before the daemon's first exit
/// are not taken for its apps'.
pub fn baseline() {
    let mut k = KILLS.lock().unwrap_or_else(|p| p.into_inner());
    k.on_exit(kernel_count(), Instant::now(), false);
}

/// Whether an exit (by a SIGKILL the daemon did not send, when
/// `unsent_sigkill`) was the OOM killer's; every exit should be told, so
/// the count stays current.
pub fn killed_by_oom(unsent_sigkill: bool) -> bool {
    let mut k = KILLS.lock().unwrap_or_else(|p| p.into_inner());
    k.on_exit(kernel_count(), Instant::now(), unsent_sigkill)
}

/// `oom_kill` of `/proc/vmstat` (Linux 4.13 and later).
fn kernel_count() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counted_kill_is_claimed_once_and_only_by_an_unsent_sigkill() {
        let t0 = Instant::now();
        let mut k = Kills::default();
        assert!(
            !k.on_exit(Some(5), t0, true),
            "kills before the first read are not ours"
        );
        // Two OOM kills: two SIGKILLs are theirs, a third is not.
        assert!(
            !k.on_exit(Some(7), t0, false),
            "an exit by code claims none"
        );
        assert!(k.on_exit(Some(7), t0, true));
        assert!(k.on_exit(Some(7), t0, true));
        assert!(!k.on_exit(Some(7), t0, true));
    }

    #[test]
    fn old_kills_are_not_claimed() {
        let t0 = Instant::now();
        let mut k = Kills::default();
        k.on_exit(Some(1), t0, false);
        k.on_exit(Some(2), t0, false);
        let later = t0 + CLAIM_WINDOW + Duration::from_secs(1);
        assert!(!k.on_exit(Some(2), later, true));
    }

    #[test]
    fn no_count_claims_nothing() {
        let mut k = Kills::default();
        assert!(!k.on_exit(None, Instant::now(), true));
    }
}
