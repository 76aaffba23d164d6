//! Who is on the other end of a unix socket, as the kernel recorded it at
//! connect (never as the peer says).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `SO_PEERPIDFD` (Linux 6.5+): a pidfd of the peer, pinned at connect.
const SO_PEERPIDFD: libc::c_int = 77;

/// The peer's credentials (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// Its pid; `None` when the kernel cannot name it (a peer in another
    /// pid namespace, or one that is gone).
    pub pid: Option<u32>,
    /// Its uid.
    pub uid: u32,
}

/// The credentials of the peer of `sock`; `None` when it has none (not a
/// connected unix socket).
pub fn credentials(sock: impl AsFd) -> Option<Credentials> {
    let c = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    Some(Credentials {
        pid: (c.pid() > 0).then_some(c.pid() as u32),
        uid: c.uid(),
    })
}

/// A pidfd of the peer of `sock`, where the kernel offers one.
pub fn pidfd(sock: impl AsFd) -> Option<OwnedFd> {
    let mut pidfd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is kept open by `AsFd` for this call, and
    // getsockopt writes at most `len` bytes (one int) into `pidfd`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            &mut pidfd as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    // SAFETY: on success the kernel installed a new descriptor for us that
    // nothing else in this process knows of.
    (r == 0 && pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn names_the_peer() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = credentials(&a).unwrap();
        assert_eq!(c.pid, Some(std::process::id()));
        assert_eq!(c.uid, nix::unistd::getuid().as_raw());
        // Older kernels have no SO_PEERPIDFD; where there is one, it is us.
        if let Some(fd) = pidfd(&a) {
            assert!(crate::pidfd::is_alive(&fd));
        }
        let f = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(credentials(&f), None);
        assert!(pidfd(&f).is_none());
    }
}
