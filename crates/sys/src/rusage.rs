//! CPU time used, as getrusage(2) counts it.

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use std::time::Duration;

/// User and system CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel.
    pub system: Duration,
}

impl CpuTime {
    /// User + system.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// This process (all its threads); zero if the kernel refuses.
pub fn own() -> CpuTime {
    of(UsageWho::RUSAGE_SELF)
}

/// This process's children that were waited for; zero if the kernel
/// refuses.
pub fn children() -> CpuTime {
    of(UsageWho::RUSAGE_CHILDREN)
}

fn of(who: UsageWho) -> CpuTime {
    let d = |t: TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    getrusage(who)
        .map(|u| CpuTime {
            user: d(u.user_time()),
            system: d(u.system_time()),
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_work() {
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(super::own().total() > std::time::Duration::ZERO);
    }
}
