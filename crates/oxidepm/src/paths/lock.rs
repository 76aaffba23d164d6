//! The lock that makes one daemon per home.

use crate::paths::Home;
use std::fs::File;
use std::io::{Read, Seek, Write};

/// Held for the daemon's life; dropping it releases the home.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another daemon holds it.
    #[error("another oxidepmd{} is running on this home", held_by(.pid))]
    Held {
        /// Its pid, as it wrote it.
        pid: Option<u32>,
    },
    /// The lock file cannot be opened.
    #[error("cannot open the lock file: {0}")]
    Io(#[source] std::io::Error),
}

fn held_by(pid: &Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

impl DaemonLock {
    /// Takes the home's lock without waiting. The lock is an flock on
    /// `daemon.lock`: the kernel drops it when the daemon dies, so a daemon
    /// killed with SIGKILL never leaves a stale lock behind.
    pub fn acquire(home: &Home) -> Result<DaemonLock, LockError> {
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link: the file is truncated and written below.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(home.lock_file())
            .map_err(LockError::Io)?;
        if oxidepm_sys::flock::try_lock_exclusive(&file).is_err() {
            let mut s = String::new();
            let _ = file.read_to_string(&mut s);
            return Err(LockError::Held {
                pid: s.trim().parse().ok(),
            });
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = writeln!(file, "{}", std::process::id());
        Ok(DaemonLock { _file: file })
    }
}
