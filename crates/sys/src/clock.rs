//! The monotonic clock, as raw nanoseconds comparable across processes
//! (`Instant` is opaque, so it cannot be sent to another process).

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn goes_forward() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::monotonic_ns() >= a + 2_000_000);
    }
}
