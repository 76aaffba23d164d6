//! Readiness of descriptors (poll(2)), for code that waits without an
//! async runtime.

use rustix::event::{PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// poll's timeout, to the millisecond as poll(2) counts it.
fn timeout(t: Duration) -> Timespec {
    let ms = t.as_millis().min(i32::MAX as u128) as i64;
    Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    }
}

/// Whether the peer of `fd` hung up, without waiting.
pub fn hung_up(fd: impl AsFd) -> bool {
    let mut fds = [PollFd::new(&fd, PollFlags::empty())];
    rustix::event::poll(&mut fds, Some(&timeout(Duration::ZERO))).is_ok_and(|n| n > 0)
        && fds[0].revents().contains(PollFlags::HUP)
}

/// Waits at most `within` for `fd` to be readable (or closed, or in
/// error); false on timeout. An interrupting signal is an error
/// (`ErrorKind::Interrupted`).
pub fn readable(fd: impl AsFd, within: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    Ok(rustix::event::poll(&mut fds, Some(&timeout(within)))? > 0)
}

/// Waits at most `within` for any of `fds` to be readable (or closed, or
/// in error); says which are, all false on timeout. `None` entries are not
/// watched. An interrupting signal is an error (`ErrorKind::Interrupted`).
pub fn readable_any(fds: &[Option<BorrowedFd<'_>>], within: Duration) -> io::Result<Vec<bool>> {
    let mut watched: Vec<PollFd<'_>> = fds
        .iter()
        .flatten()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    rustix::event::poll(&mut watched, Some(&timeout(within)))?;
    let mut ready = watched.iter().map(|p| !p.revents().is_empty());
    Ok(fds
        .iter()
        .map(|fd| fd.is_some() && ready.next().unwrap_or(false))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn sees_data_and_hangups() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (c, _d) = UnixStream::pair().unwrap();
        assert!(!readable(&a, Duration::from_millis(1)).unwrap());
        assert!(!hung_up(&a));
        b.write_all(b"x").unwrap();
        assert!(readable(&a, Duration::from_secs(5)).unwrap());
        let got = readable_any(
            &[Some(c.as_fd()), None, Some(a.as_fd())],
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(got, vec![false, false, true]);
        drop(b);
        assert!(hung_up(&a));
    }
}
