//! The outbox reader's own connection to the lanes' Redis: RESP2 over the
//! unix socket, TCP or TLS, read piece by piece so that no reply is ever
//! held whole.
//!
//! redis-rs reads a reply completely before it hands it over; an outbox
//! read of 64 entries of 32 MiB each would be 2 GiB in the bridge's memory
//! before anyone could look at a size. Here each bulk string's length is
//! known from its header before its bytes are read, so the caller decides
//! to keep it or to skip it (skipped bytes pass through a fixed buffer).
//! Replies the caller does not read piece by piece ([`Wire::small`]) are
//! refused past a small bound.

use crate::conn::RedisTarget;
use oxidepm_lanes::redis_url::{HostPort, Topology};
use redis::ConnectionAddr;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

/// The read half of any of the connections.
type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
/// The write half.
type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

/// Longest header line (`*<n>`, `$<n>`, `:<n>`) or simple string / error.
const MAX_LINE: u64 = 64 * 1024;
/// Nesting accepted in a reply that is skipped or read whole.
const MAX_DEPTH: usize = 8;
/// Largest reply [`Wire::small`] takes.
pub const SMALL_REPLY: usize = 1 << 20;

/// Why a command over the reader's connection failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("connection to Redis lost: {0}")]
    Io(#[from] io::Error),
    /// Redis answered something that is not RESP2 of the expected shape;
    /// the connection cannot be trusted to be in step any more.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
    /// Redis answered with an error (`-ERR …`); the connection is fine.
    #[error("Redis: {0}")]
    Server(String),
}

impl WireError {
    /// Whether the connection must be dropped (it is out of step).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, WireError::Server(_))
    }

    /// Whether Redis said the group or stream is missing (`NOGROUP`).
    pub fn is_nogroup(&self) -> bool {
        matches!(self, WireError::Server(m) if m.starts_with("NOGROUP"))
    }

    /// The node a cluster sent the command to (`MOVED <slot> <host:port>`,
    /// or `ASK …` while a slot migrates): the connection is fine, but the
    /// keys are served elsewhere.
    pub fn redirect(&self) -> Option<HostPort> {
        let WireError::Server(m) = self else {
            return None;
        };
        let mut parts = m.split(' ');
        let (Some("MOVED" | "ASK"), Some(_slot), Some(addr)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let (host, port) = addr.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some(HostPort {
            host: host.to_string(),
            port: port.parse().ok()?,
        })
    }
}

/// The header of one reply element.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// `+…`
    Simple(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$<len>`; `None` for nil. The bytes follow.
    Bulk(Option<usize>),
    /// `*<len>`; `None` for nil. The elements follow.
    Array(Option<usize>),
}

/// A whole (small) reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Small {
    /// A simple string.
    Simple(String),
    /// An integer.
    Int(i64),
    /// A bulk string; `None` for nil.
    Bulk(Option<Vec<u8>>),
    /// An array; `None` for nil.
    Array(Option<Vec<Small>>),
}

impl Small {
    /// The text of a simple or bulk string.
    pub fn text(&self) -> Option<String> {
        match self {
            Small::Simple(s) => Some(s.clone()),
            Small::Bulk(Some(b)) => String::from_utf8(b.clone()).ok(),
            _ => None,
        }
    }

    /// The elements of an array (nil and others: none).
    pub fn items(&self) -> &[Small] {
        match self {
            Small::Array(Some(v)) => v,
            _ => &[],
        }
    }
}

/// One connection, authenticated as the bridge.
pub struct Wire {
    r: BufReader<ReadHalf>,
    w: WriteHalf,
}

/// A connection failure as an I/O error.
fn io_err(e: impl std::fmt::Display) -> WireError {
    WireError::Io(io::Error::other(e.to_string()))
}

/// The TLS client configuration of `target`, by the lanes' one rule.
fn tls_config(target: &RedisTarget) -> Result<Arc<rustls::ClientConfig>, WireError> {
    oxidepm_lanes_net::tls::client_config(&target.tls).map_err(io_err)
}

impl Wire {
    /// Connects to `target` and authenticates: to its one server, or on a
    /// cluster to `node` (else its first seed that answers).
    pub async fn connect(target: &RedisTarget, node: Option<&HostPort>) -> Result<Wire, WireError> {
        let (r, w): (ReadHalf, WriteHalf) = match &target.url.topology {
            Topology::Cluster { seeds } => match node {
                Some(n) => Self::tcp(target, n).await?,
                None => {
                    let mut last = None;
                    let mut got = None;
                    for s in seeds {
                        match Self::tcp(target, s).await {
                            Ok(c) => {
                                got = Some(c);
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    match got {
                        Some(c) => c,
                        None => {
                            return Err(last.unwrap_or_else(|| io_err("a cluster without seeds")))
                        }
                    }
                }
            },
            _ => match target.single_addr().await.map_err(io_err)? {
                ConnectionAddr::Unix(p) => {
                    let (r, w) = UnixStream::connect(p).await?.into_split();
                    (Box::new(r), Box::new(w))
                }
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Self::tcp(target, &HostPort { host, port }).await?
                }
            },
        };
        let mut wire = Wire {
            r: BufReader::with_capacity(64 * 1024, r),
            w,
        };
        wire.send(&[
            b"AUTH".as_slice(),
            target.user.as_bytes(),
            target.password.expose().as_bytes(),
        ])
        .await?;
        match wire.small().await? {
            Small::Simple(ok) if ok == "OK" => Ok(wire),
            other => Err(WireError::Protocol(format!("AUTH answered {other:?}"))),
        }
    }

    /// A TCP connection to `hp`, in TLS when the URL says so.
    async fn tcp(target: &RedisTarget, hp: &HostPort) -> Result<(ReadHalf, WriteHalf), WireError> {
        let s = TcpStream::connect((hp.host.as_str(), hp.port)).await?;
        let _ = s.set_nodelay(true);
        if !target.url.tls {
            let (r, w) = s.into_split();
            return Ok((Box::new(r), Box::new(w)));
        }
        let tls = oxidepm_lanes_net::tls::handshake(&tls_config(target)?, &hp.host, s).await?;
        let (r, w) = tokio::io::split(tls);
        Ok((Box::new(r), Box::new(w)))
    }

    /// Sends one command (an array of bulk strings).
    pub async fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<(), WireError> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            let a = a.as_ref();
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).await?;
        Ok(())
    }

    /// Reads the header of the next element. An error reply is returned
    /// as a header; [`Wire::expect`] turns it into [`WireError::Server`].
    pub async fn header(&mut self) -> Result<Header, WireError> {
        let mut line = Vec::with_capacity(32);
        let n = (&mut self.r)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        if !line.ends_with(b"\r\n") {
            return Err(WireError::Protocol("a reply line without CRLF".into()));
        }
        line.truncate(line.len() - 2);
        let (kind, rest) = line
            .split_first()
            .ok_or_else(|| WireError::Protocol("an empty reply line".into()))?;
        let text = String::from_utf8_lossy(rest).into_owned();
        let len = |t: &str| -> Result<Option<usize>, WireError> {
            if t == "-1" {
                return Ok(None);
            }
            t.parse()
                .map(Some)
                .map_err(|_| WireError::Protocol(format!("a length {t:?}")))
        };
        Ok(match kind {
            b'+' => Header::Simple(text),
            b'-' => Header::Error(text),
            b':' => Header::Int(
                text.parse()
                    .map_err(|_| WireError::Protocol(format!("an integer {text:?}")))?,
            ),
            b'$' => Header::Bulk(len(&text)?),
            b'*' => Header::Array(len(&text)?),
            other => {
                return Err(WireError::Protocol(format!(
                    "a reply of type {:?}",
                    char::from(*other)
                )))
            }
        })
    }

    /// Reads a header, turning an error reply into [`WireError::Server`].
    pub async fn expect(&mut self) -> Result<Header, WireError> {
        match self.header().await? {
            Header::Error(e) => Err(WireError::Server(e)),
            h => Ok(h),
        }
    }

    /// Reads the `len` bytes of a bulk string (and its CRLF).
    pub async fn bulk(&mut self, len: usize) -> Result<Vec<u8>, WireError> {
        let mut b = vec![0; len];
        self.r.read_exact(&mut b).await?;
        self.crlf().await?;
        Ok(b)
    }

    /// Skips the `len` bytes of a bulk string (and its CRLF) without
    /// keeping them.
    pub async fn skip_bulk(&mut self, len: usize) -> Result<(), WireError> {
        let mut left = len;
        while left > 0 {
            let buf = self.r.fill_buf().await?;
            if buf.is_empty() {
                return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            let n = buf.len().min(left);
            self.r.consume(n);
            left -= n;
        }
        self.crlf().await
    }

    async fn crlf(&mut self) -> Result<(), WireError> {
        let mut end = [0u8; 2];
        self.r.read_exact(&mut end).await?;
        if &end != b"\r\n" {
            return Err(WireError::Protocol("a bulk string without CRLF".into()));
        }
        Ok(())
    }

    /// Skips the rest of an element whose header was `h`, whatever its
    /// size, keeping nothing.
    pub async fn skip(&mut self, h: Header) -> Result<(), WireError> {
        let mut todo: Vec<(usize, usize)> = Vec::new();
        let mut next = Some(h);
        loop {
            match next.take() {
                Some(Header::Bulk(Some(len))) => self.skip_bulk(len).await?,
                Some(Header::Array(Some(n))) if n > 0 => {
                    if todo.len() >= MAX_DEPTH {
                        return Err(WireError::Protocol("a reply nested too deep".into()));
                    }
                    todo.push((n, 0));
                }
                _ => {}
            }
            // The next element of the innermost array not done yet.
            while let Some((n, done)) = todo.last_mut() {
                if *done < *n {
                    *done += 1;
                    break;
                }
                todo.pop();
            }
            if todo.is_empty() {
                return Ok(());
            }
            next = Some(self.header().await?);
        }
    }

    /// Reads a whole reply of at most [`SMALL_REPLY`] bytes; an error reply
    /// is [`WireError::Server`].
    pub async fn small(&mut self) -> Result<Small, WireError> {
        let mut budget = SMALL_REPLY;
        let h = self.expect().await?;
        self.small_value(h, &mut budget, 0).await
    }

    async fn small_value(
        &mut self,
        h: Header,
        budget: &mut usize,
        depth: usize,
    ) -> Result<Small, WireError> {
        Ok(match h {
            Header::Simple(s) => Small::Simple(s),
            Header::Error(e) => Small::Simple(format!("-{e}")),
            Header::Int(i) => Small::Int(i),
            Header::Bulk(None) => Small::Bulk(None),
            Header::Bulk(Some(len)) => {
                *budget = budget.checked_sub(len).ok_or_else(|| {
                    WireError::Protocol(format!("a reply larger than {SMALL_REPLY} bytes"))
                })?;
                Small::Bulk(Some(self.bulk(len).await?))
            }
            Header::Array(None) => Small::Array(None),
            Header::Array(Some(n)) => {
                if depth >= MAX_DEPTH {
                    return Err(WireError::Protocol("a reply nested too deep".into()));
                }
                // Every element costs at least its header's bytes.
                *budget = budget.checked_sub(n.saturating_mul(4)).ok_or_else(|| {
                    WireError::Protocol(format!("a reply larger than {SMALL_REPLY} bytes"))
                })?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let h = self.header().await?;
                    v.push(Box::pin(self.small_value(h, budget, depth + 1)).await?);
                }
                Small::Array(Some(v))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A `Wire` reading `bytes` (its writes go nowhere).
    async fn wire_over(bytes: Vec<u8>) -> (Wire, UnixStream) {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&bytes).await.unwrap();
        b.shutdown().await.unwrap();
        let (r, w) = a.into_split();
        (
            Wire {
                r: BufReader::with_capacity(16, Box::new(r)),
                w: Box::new(w),
            },
            b,
        )
    }

    #[tokio::test]
    async fn skips_what_it_is_told_to_and_reads_the_rest() {
        let big = "x".repeat(1000);
        let reply = format!(
            "*3\r\n${}\r\n{big}\r\n*2\r\n:1\r\n$-1\r\n+OK\r\n:7\r\n",
            big.len()
        );
        let (mut w, _peer) = wire_over(reply.into_bytes()).await;
        assert_eq!(w.expect().await.unwrap(), Header::Array(Some(3)));
        let h = w.header().await.unwrap();
        assert_eq!(h, Header::Bulk(Some(1000)));
        w.skip(h).await.unwrap();
        let h = w.header().await.unwrap();
        w.skip(h).await.unwrap();
        assert_eq!(w.small().await.unwrap(), Small::Simple("OK".into()));
        assert_eq!(w.small().await.unwrap(), Small::Int(7));
    }

    #[tokio::test]
    async fn errors_and_garbage_are_errors_not_panics() {
        let (mut w, _peer) = wire_over(b"-NOGROUP no such key\r\n".to_vec()).await;
        let e = w.small().await.unwrap_err();
        assert!(e.is_nogroup() && !e.is_fatal(), "{e}");
        for bad in [
            &b"?what\r\n"[..],
            b"$abc\r\n",
            b"$3\r\nabcd\r\n",
            b"*1\r\n",
            b"",
        ] {
            let (mut w, _peer) = wire_over(bad.to_vec()).await;
            let e = w.small().await.unwrap_err();
            assert!(e.is_fatal(), "{bad:?}: {e}");
        }
        let moved = WireError::Server("MOVED 3999 127.0.0.1:6381".into());
        assert_eq!(
            moved.redirect(),
            Some(HostPort {
                host: "127.0.0.1".into(),
                port: 6381
            })
        );
        assert_eq!(WireError::Server("MOVED nonsense".into()).redirect(), None);
        let huge = format!("${}\r\n", SMALL_REPLY + 1);
        let (mut w, _peer) = wire_over(huge.into_bytes()).await;
        assert!(w.small().await.is_err());
    }
}
