//! Advisory whole-file locks (flock(2)): the kernel drops one when the last
//! descriptor of its open file closes, so a process killed with SIGKILL never
//! leaves a stale lock behind.

use std::os::fd::AsFd;

/// Takes an exclusive lock on `file` without waiting; fails (EWOULDBLOCK)
/// when another open file holds one.
pub fn try_lock_exclusive(file: impl AsFd) -> std::io::Result<()> {
    Ok(rustix::fs::flock(
        file,
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let a = std::fs::File::open(f.path()).unwrap();
        let b = std::fs::File::open(f.path()).unwrap();
        try_lock_exclusive(&a).unwrap();
        assert!(try_lock_exclusive(&b).is_err());
        drop(a);
        try_lock_exclusive(&b).unwrap();
    }
}
