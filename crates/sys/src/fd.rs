//! Descriptors a process inherited across exec at numbers agreed with its
//! parent (a log shim's inputs, systemd's listening sockets).
//!
//! Nothing in the process opened them, so nothing owns them until they are
//! taken; each number is handed out at most once, so two owners never close
//! the same descriptor.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The numbers already handed out by [`claim`].
static TAKEN: Mutex<BTreeSet<RawFd>> = Mutex::new(BTreeSet::new());

/// Owns inherited descriptor `fd`, unless it was already handed out.
///
/// Sound only for numbers that the process inherited and that nothing in
/// it opened or owns: the callers are the protocols that say so.
pub(crate) fn claim(fd: RawFd) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    if !taken.insert(fd) {
        return None;
    }
    // SAFETY: the callers pass only descriptors inherited across exec under
    // a protocol that gives them to this process (see each caller), and
    // `TAKEN` makes this the only owner ever created for the number.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes inherited descriptor `fd`: fails when it is not open or was
/// already taken.
///
/// Meant for a process started with `fd` open for it, before anything in
/// it opens files (which could be given that number once it is closed).
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table; an unknown number
    // gives EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io::Error::last_os_error());
    }
    claim(fd).ok_or_else(|| io::Error::other("already taken"))
}

/// Marks `fd` close-on-exec, so that no child inherits it.
pub fn set_cloexec(fd: impl AsFd) -> rustix::io::Result<()> {
    let flags = rustix::io::fcntl_getfd(&fd)?;
    rustix::io::fcntl_setfd(&fd, flags | rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn takes_each_descriptor_once() {
        let raw = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        let fd = take_inherited(raw).unwrap();
        assert!(take_inherited(raw).is_err());
        set_cloexec(&fd).unwrap();
        assert!(rustix::io::fcntl_getfd(&fd)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC));
        assert_eq!(fd.as_raw_fd(), raw);
        assert!(take_inherited(-1).is_err());
    }
}
