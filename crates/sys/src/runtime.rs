//! The tokio runtime of a lanes process (the proxy, the bridge).

/// One thread when `threads` is at most 1 (the cheapest for I/O-bound
/// work: no cross-thread wake-ups), else `threads` workers.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}
