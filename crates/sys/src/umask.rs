//! A umask for the length of a scope, so that a file (a socket above all)
//! is created with its final mode instead of being chmod-ed after the fact.
//!
//! The umask belongs to the whole process: callers that bind from several
//! threads serialise around the guard themselves.

use rustix::fs::Mode;

/// Restores the previous umask when dropped.
#[derive(Debug)]
#[must_use = "the umask is restored when the guard is dropped"]
pub struct Guard {
    old: Mode,
}

impl Guard {
    /// Sets the umask to `mask` (permission bits only) until the guard is
    /// dropped.
    pub fn set(mask: u32) -> Guard {
        Guard {
            old: rustix::process::umask(Mode::from_bits_truncate(mask & 0o777)),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        rustix::process::umask(self.old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_with_the_mode_then_restores() {
        let dir = tempfile::tempdir().unwrap();
        let before = rustix::process::umask(Mode::from_bits_truncate(0o022));
        {
            let _g = Guard::set(0o177);
            std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        }
        let mode = std::fs::metadata(dir.path().join("s"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            rustix::process::umask(before),
            Mode::from_bits_truncate(0o022)
        );
    }
}
