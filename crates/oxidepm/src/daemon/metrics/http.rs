//! The smallest HTTP/1.x server that answers `GET /metrics`. Bound to TCP
//! it is reachable from the network, so everything a client can make it
//! hold is bounded: [`MAX_CONNECTIONS`] at once, a request head of at most
//! [`MAX_HEAD`] bytes read within [`HEAD_TIME`], one request per
//! connection, and the answer written within [`WRITE_TIME`] (a client that
//! does not read). When all connections are taken, a newcomer closes the
//! oldest: clients that hold connections open (slowloris) cannot keep a
//! scraper out, since a scrape is over in a few milliseconds.

use super::text::CONTENT_TYPE;
use super::Listen;
use crate::daemon::Daemon;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// Connections served at once; a scraper needs one.
pub const MAX_CONNECTIONS: usize = 16;
/// Largest request head read; a scraper's is a few hundred bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its request head.
pub const HEAD_TIME: Duration = Duration::from_secs(5);
/// Time a client has to read the answer.
pub const WRITE_TIME: Duration = Duration::from_secs(10);

/// The listening socket, bound at start so a bad address stops the daemon
/// with a clear error rather than failing later.
pub enum Listener {
    /// TCP.
    Tcp(tokio::net::TcpListener),
    /// A unix socket.
    Unix(tokio::net::UnixListener),
}

/// Binds `at`. A unix socket's stale file is replaced; it is made 0600.
pub fn bind(at: &Listen) -> std::io::Result<Listener> {
    match at {
        Listen::Tcp(addr) => {
            let std = std::net::TcpListener::bind(addr)?;
            std.set_nonblocking(true)?;
            Ok(Listener::Tcp(tokio::net::TcpListener::from_std(std)?))
        }
        // As the daemon's own sockets: 0600 from birth, and a file that
        // is not a socket is never removed to make room.
        Listen::Unix(path) => crate::server::bind(path).map(Listener::Unix),
    }
}

/// The open connections, oldest first, each with what closes it.
#[derive(Default)]
struct Open {
    conns: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

impl Open {
    /// Registers connection `id`, closing the oldest when all are taken.
    fn admit(&self, id: u64) -> Arc<Notify> {
        let mut c = self
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if c.len() >= MAX_CONNECTIONS {
            if let Some((_, oldest)) = c.pop_front() {
                oldest.notify_one();
            }
        }
        let close = Arc::new(Notify::new());
        c.push_back((id, close.clone()));
        close
    }

    /// Forgets connection `id` (done, or closed by a newcomer).
    fn leave(&self, id: u64) {
        let mut c = self
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.retain(|(i, _)| *i != id);
    }
}

/// Serves scrapes until the daemon exits.
pub async fn run(listener: Listener, daemon: Arc<Daemon>) {
    let open = Arc::new(Open::default());
    let mut next_id = 0u64;
    loop {
        let accepted: std::io::Result<Box<dyn Conn>> = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Box<dyn Conn>
            }),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Box::new(s) as Box<dyn Conn>),
        };
        let conn = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors or similar: back off rather than spin.
                log::warn!("metrics: cannot accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let close = open.admit(id);
        let (daemon, open) = (daemon.clone(), open.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = serve(conn, &daemon) => {}
                _ = close.notified() => {}
            }
            open.leave(id);
        });
    }
}

/// A connection of either kind.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics,
    NotFound,
    NotAllowed,
    Bad,
}

async fn serve(mut conn: Box<dyn Conn>, daemon: &Daemon) {
    let head = match tokio::time::timeout(HEAD_TIME, read_head(&mut conn)).await {
        Ok(Some(h)) => h,
        // Too slow, too long, or gone: nothing is owed.
        _ => return,
    };
    let (status, body, ctype) = match parse(&head) {
        Ask::Metrics => ("200 OK", super::scrape::current(daemon).await, CONTENT_TYPE),
        Ask::NotFound => (
            "404 Not Found",
            "only /metrics is served\n".into(),
            "text/plain",
        ),
        Ask::NotAllowed => (
            "405 Method Not Allowed",
            "only GET is served\n".into(),
            "text/plain",
        ),
        Ask::Bad => (
            "400 Bad Request",
            "not an HTTP/1 request\n".into(),
            "text/plain",
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    let _ = tokio::time::timeout(WRITE_TIME, async {
        conn.write_all(&out).await?;
        conn.shutdown().await
    })
    .await;
}

/// Reads up to the blank line that ends a request head; `None` when the
/// client goes away or sends more than [`MAX_HEAD`] bytes without one.
async fn read_head(conn: &mut Box<dyn Conn>) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = conn.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Some(head);
        }
        if head.len() > MAX_HEAD {
            return None;
        }
    }
}

fn parse(head: &[u8]) -> Ask {
    let line_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Ask::Bad;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ask::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Ask::Bad;
    }
    if method != "GET" {
        return Ask::NotAllowed;
    }
    let path = target.split('?').next().unwrap_or("");
    if path == "/metrics" {
        Ask::Metrics
    } else {
        Ask::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ask::Metrics
        );
        assert_eq!(parse(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Ask::Metrics);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Ask::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Ask::NotAllowed);
        assert_eq!(parse(b"\xff\xfe garbage\r\n\r\n"), Ask::Bad);
        assert_eq!(parse(b"GET /metrics SPDY/3\r\n\r\n"), Ask::Bad);
    }
}
