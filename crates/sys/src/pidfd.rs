//! Process descriptors (pidfds, Linux 5.3+): a handle that names one process
//! for as long as it is held, so a pid reused after an exit is never
//! mistaken for the process it used to name.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Opens a pidfd for `pid`.
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| io::Error::from(rustix::io::Errno::INVAL))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Whether the process of `pidfd` still runs (a zombie counts as running
/// until it is reaped).
pub fn is_alive(pidfd: impl AsFd) -> bool {
    // rustix's `Signal` cannot be 0, the "only check" signal, hence libc.
    // SAFETY: pidfd_send_signal takes a descriptor that `AsFd` keeps open
    // for this call, a signal number, a null siginfo (allowed: the kernel
    // then fills one in itself) and zero flags; it touches no memory of
    // ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

/// Sends signal `sig` to the process of `pidfd` (never to a process that
/// reused its pid).
pub fn signal(pidfd: impl AsFd, sig: i32) -> io::Result<()> {
    let sig = rustix::process::Signal::from_named_raw(sig)
        .ok_or_else(|| io::Error::from(rustix::io::Errno::INVAL))?;
    Ok(rustix::process::pidfd_send_signal(pidfd, sig)?)
}

/// A duplicate of descriptor `target` of the process of `pidfd`
/// (pidfd_getfd(2), Linux 5.6+), close-on-exec. Needs ptrace access to
/// that process: the same user and, under Yama's `ptrace_scope` 1, an
/// ancestor of it or CAP_SYS_PTRACE.
pub fn get_fd(pidfd: impl AsFd, target: i32) -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_getfd(
        pidfd,
        target,
        rustix::process::PidfdGetfdFlags::empty(),
    )?)
}

/// Waits until the process of `pidfd` exits (its pidfd becomes readable).
/// Fails at once when the descriptor cannot be watched by the runtime;
/// must be called within a tokio runtime.
pub async fn exited(pidfd: OwnedFd) -> io::Result<()> {
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    // SAFETY: the AsyncFd takes the OwnedFd by value, so the descriptor
    // stays open, and `as_raw_fd` keeps returning it, until the AsyncFd is
    // dropped (and deregistered) at the end of this function.
    let afd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    // An error of the reactor ends the wait as an exit would: the caller
    // cannot wait any better than this.
    let _ = afd.readable().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn follows_a_child() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let fd = open(child.id()).unwrap();
        assert!(is_alive(&fd));
        signal(&fd, libc::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(!is_alive(&fd));
        assert!(open(0).is_err());
    }

    #[test]
    fn takes_a_copy_of_a_childs_descriptor() {
        use std::io::{Read, Write};
        use std::process::Stdio;
        // The child holds the read end of a pipe as its stdin; the copy
        // taken from it reads what is written, as the child would.
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let fd = open(child.id()).unwrap();
        let mut writer = child.stdin.take().unwrap();
        let copy = get_fd(&fd, 0).unwrap();
        writer.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        std::fs::File::from(copy).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        assert!(get_fd(&fd, 999).is_err());
        signal(&fd, libc::SIGKILL).unwrap();
        child.wait().unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn sees_the_exit() {
        let mut child = Command::new("sleep").arg("0.1").spawn().unwrap();
        let fd = open(child.id()).unwrap();
        exited(fd).await.unwrap();
        child.wait().unwrap();
    }
}
