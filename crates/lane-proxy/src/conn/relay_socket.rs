//! The two halves of a relayed socket (the client's unix socket, and the
//! upstream one: unix, or TCP to a shared server), watched for
//! readability only.
//!
//! Tokio registers a socket for reading and writing, edge-triggered. Then
//! every time the peer reads what the proxy wrote, the kernel reports the
//! socket writable, and a proxy asleep in `epoll_wait` wakes for nothing:
//! about one wasted wake-up per relayed batch, in each direction. The
//! proxy's writes almost always go through at once (the socket buffer has
//! room); only when one would block is the socket's writability watched,
//! on a duplicate of its descriptor registered for that alone, and dropped
//! once the write went through.
//!
//! A TCP socket's read half watches a duplicate of its descriptor (the
//! runtime registers only unix streams and owned descriptors), the same
//! socket: reading one reads the other.
//!
//! Both halves behave as tokio's `OwnedReadHalf` / `OwnedWriteHalf` do for
//! the pumps: dropping the write half shuts the socket down for writing.

use oxidepm_sys::async_fd::{read_buf, watch_fd, watch_stream};
use std::io::{self, Write};
use std::net::Shutdown;
use std::net::TcpStream as StdTcp;
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream as StdStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A connected socket the write half writes to and shuts down itself.
pub trait Socket: AsFd + Send + Sync + 'static {
    /// One write(2), never waiting.
    fn write_now(&self, buf: &[u8]) -> io::Result<usize>;
    /// Shuts the socket down for writing.
    fn shutdown_write(&self) -> io::Result<()>;
}

impl Socket for StdStream {
    fn write_now(&self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Socket for StdTcp {
    fn write_now(&self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

/// Splits a TCP `stream` into halves that the runtime watches for reading
/// only.
pub fn split_tcp(
    stream: TcpStream,
) -> io::Result<(OwnedReadHalf<OwnedFd>, OwnedWriteHalf<StdTcp>)> {
    // Non-blocking still: tokio hands its sockets over that way.
    let stream = stream.into_std()?;
    let read = watch_fd(stream.as_fd().try_clone_to_owned()?, Interest::READABLE)?;
    Ok((
        OwnedReadHalf { fd: read },
        OwnedWriteHalf {
            stream: Arc::new(stream),
            blocked: None,
        },
    ))
}

/// Splits `stream` into halves that the runtime watches for reading only.
pub fn split(stream: UnixStream) -> io::Result<(OwnedReadHalf, OwnedWriteHalf)> {
    let stream = Arc::new(stream.into_std()?);
    let read = watch_stream(stream.clone(), Interest::READABLE)?;
    Ok((
        OwnedReadHalf { fd: read },
        OwnedWriteHalf {
            stream,
            blocked: None,
        },
    ))
}

/// The reading half.
#[derive(Debug)]
pub struct OwnedReadHalf<R: AsRawFd = Arc<StdStream>> {
    fd: AsyncFd<R>,
}

impl<R: AsRawFd> OwnedReadHalf<R> {
    /// Waits until there is something to read (or the peer is gone).
    pub async fn readable(&self) -> io::Result<()> {
        // Dropping the guard keeps the readiness for the read that follows.
        self.fd.readable().await.map(drop)
    }
}

impl AsRef<StdStream> for OwnedReadHalf {
    fn as_ref(&self) -> &StdStream {
        self.fd.get_ref()
    }
}

impl<R: AsRawFd + AsFd> AsyncRead for OwnedReadHalf<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let room = buf.remaining();
            match guard.try_io(|fd| read_buf(fd.get_ref().as_fd(), buf)) {
                Ok(Ok(n)) => {
                    // Edge-triggered: a read that did not fill the room
                    // emptied the socket, so the next read would only say
                    // EAGAIN; wait for the next edge instead.
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Not readable after all: readiness cleared, wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

/// The writing half.
#[derive(Debug)]
pub struct OwnedWriteHalf<S: Socket = StdStream> {
    stream: Arc<S>,
    /// A duplicate descriptor watched for writability while a write waits.
    blocked: Option<AsyncFd<OwnedFd>>,
}

impl<S: Socket> AsyncWrite for OwnedWriteHalf<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.stream.write_now(buf) {
                Ok(n) => {
                    self.blocked = None;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            let watch = match self.blocked.take() {
                Some(w) => w,
                // Registering reports the socket writable at once if it
                // became so since the write: no edge is missed.
                None => watch_fd(
                    self.stream.as_fd().try_clone_to_owned()?,
                    Interest::WRITABLE,
                )?,
            };
            let watch = self.blocked.insert(watch);
            let mut guard = ready!(watch.poll_write_ready(cx))?;
            // Cleared before the write is tried again, so that an edge
            // after a failed try wakes us.
            guard.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream.shutdown_write())
    }
}

impl<S: Socket> Drop for OwnedWriteHalf<S> {
    fn drop(&mut self) {
        let _ = self.stream.shutdown_write();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn relays_both_ways_and_waits_for_room() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut ar, mut aw) = split(a).unwrap();
        let (mut br, bw) = split(b).unwrap();
        aw.write_all(b"ping").await.unwrap();
        br.readable().await.unwrap();
        let mut got = Vec::with_capacity(16);
        br.read_buf(&mut got).await.unwrap();
        assert_eq!(got, b"ping");
        // More than the socket buffers hold: the writer waits for the
        // reader, and every byte arrives in order.
        let big: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        let expect = big.clone();
        let writer = tokio::spawn(async move {
            aw.write_all(&big).await.unwrap();
            drop(aw);
        });
        let mut all = Vec::new();
        loop {
            all.reserve(64 << 10);
            if br.read_buf(&mut all).await.unwrap() == 0 {
                break;
            }
        }
        writer.await.unwrap();
        assert_eq!(all, expect);
        // Dropping a write half shuts its direction down.
        drop(bw);
        let mut rest = Vec::with_capacity(8);
        assert_eq!(ar.read_buf(&mut rest).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn relays_a_tcp_socket_too() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut ar, mut aw) = split_tcp(a.unwrap()).unwrap();
        let (mut b, _) = b.unwrap();
        aw.write_all(b"PING\r\n").await.unwrap();
        let mut got = [0u8; 6];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"PING\r\n");
        b.write_all(b"+PONG\r\n").await.unwrap();
        ar.readable().await.unwrap();
        let mut back = Vec::with_capacity(16);
        ar.read_buf(&mut back).await.unwrap();
        assert_eq!(back, b"+PONG\r\n");
        drop(aw);
        let mut rest = Vec::new();
        assert_eq!(b.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
