//! The descriptors the daemon holds per app — a pidfd for each adopted
//! process, a pidfd and copies of the pipes for each log writer — come out
//! of one budget: the soft RLIMIT_NOFILE less [`FD_RESERVE`]. What does not
//! fit degrades (an adopted app is watched by polling, a writer is not
//! replaced if it dies) instead of taking the descriptors the daemon needs
//! to read /proc, open cgroups, write state.db and answer a person.

use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors kept free of per-app holdings, for the sockets, the state,
/// pipes of new apps and a person's request.
pub const FD_RESERVE: u64 = 256;

/// Descriptors held under the budget now.
static HELD: AtomicU64 = AtomicU64::new(0);

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Share(u64);

impl Drop for Share {
    fn drop(&mut self) {
        HELD.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// Takes `n` descriptors from the budget, if they fit.
pub fn take(n: u64) -> Option<Share> {
    let soft = oxidepm_sys::fdlimit::get().soft.unwrap_or(u64::MAX);
    let room = soft.saturating_sub(FD_RESERVE);
    HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
        (held + n <= room).then_some(held + n)
    })
    .ok()
    .map(|_| Share(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_given_back() {
        let before = HELD.load(Ordering::Relaxed);
        let a = take(3).expect("room for 3");
        assert!(HELD.load(Ordering::Relaxed) >= before + 3);
        drop(a);
        assert!(
            take(u64::MAX / 2).is_none(),
            "more than the limit never fits"
        );
    }
}
