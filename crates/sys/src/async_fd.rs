//! Descriptors the runtime watches for the readiness asked for, and
//! reading into a buffer's spare room without zeroing it first.
//!
//! The lane proxy relays sockets: it watches them for readability only
//! (see `oxidepm_lane_proxy`'s `relay_socket`), and reads them into
//! buffers of up to 64 KiB, where zeroing the room before every read would
//! cost more than the read itself.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::io::{Interest, ReadBuf};

/// Registers `stream` with the current runtime for `interest` only. Must be
/// called within a tokio runtime.
pub fn watch_stream(
    stream: Arc<UnixStream>,
    interest: Interest,
) -> io::Result<AsyncFd<Arc<UnixStream>>> {
    // SAFETY: the AsyncFd owns a reference to the stream, so its descriptor
    // stays open and the same (a UnixStream never changes its descriptor)
    // for as long as the AsyncFd lives.
    Ok(unsafe { AsyncFd::register_with_interest(stream, interest) }?)
}

/// Registers `fd` with the current runtime for `interest` only. Must be
/// called within a tokio runtime.
pub fn watch_fd(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns the descriptor, which stays open and the
    // same until the AsyncFd is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

/// Reads once from `fd` into the unfilled part of `buf`, and counts the
/// bytes read as filled. Returns how many (0 at end of stream).
pub fn read_buf(fd: impl AsFd, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    // SAFETY: the slice is only written by read(2), through rustix, which
    // never de-initializes memory; nothing reads it before that.
    let room = unsafe { buf.unfilled_mut() };
    let (filled, _) = rustix::io::read(fd, room)?;
    let n = filled.len();
    // SAFETY: read(2) initialized exactly the first `n` bytes of the
    // unfilled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::mem::MaybeUninit;
    use std::os::unix::net::UnixStream;

    #[test]
    fn reads_what_was_sent_into_uninitialized_room() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"hello").unwrap();
        let mut room = [MaybeUninit::<u8>::uninit(); 16];
        let mut buf = ReadBuf::uninit(&mut room);
        assert_eq!(read_buf(&b, &mut buf).unwrap(), 5);
        assert_eq!(buf.filled(), b"hello");
        drop(a);
        assert_eq!(read_buf(&b, &mut buf).unwrap(), 0);
        assert_eq!(buf.filled(), b"hello");
    }
}
