//! The monotonic clock, as raw nanoseconds comparable across processes
//! (`Instant` is opaque, so it cannot be sent to another process), and the
//! boot clock in the unit of process start times.

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_BOOTTIME` in clock ticks (USER_HZ), the clock and the unit of
/// a process's start time in `/proc/<pid>/stat` (field 22): a process that
/// started before this call has a start time no greater than its result.
pub fn boot_ticks() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    // The kernel truncates the same way (nsec_to_clock_t).
    ns / (1_000_000_000 / crate::procfs::ticks_per_second().max(1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn boot_ticks_bound_start_times() {
        let me = crate::procfs::stat(std::process::id()).unwrap();
        let a = super::boot_ticks();
        assert!(me.start_ticks <= a);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let c = crate::procfs::stat(child.id()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(c.start_ticks >= a, "{} < {a}", c.start_ticks);
    }

    #[test]
    fn goes_forward() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::monotonic_ns() >= a + 2_000_000);
    }
}
