//! One connected upstream stream, whatever carries it: a unix socket (the
//! private Redis), TCP, or TLS over TCP (a shared server or a cluster
//! node). The relay takes the unix and TCP ones apart into fd-level halves
//! (`relay_socket`); TLS is relayed through tokio's split halves.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

/// A connected upstream stream.
#[derive(Debug)]
pub enum Link {
    /// A unix socket.
    Unix(UnixStream),
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP (boxed: its state is large).
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Link {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Link::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Link {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Link::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Link::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Unix(s) => Pin::new(s).poll_flush(cx),
            Link::Tcp(s) => Pin::new(s).poll_flush(cx),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Link::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Link::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Link::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
