//! One client connection: bounded request lines, idle and write timeouts,
//! and a reply writer that gives up on a client that does not read.

use super::Handler;
use oxidepm_proto::{ErrorBody, ErrorCode, Request, Response};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// Limits of one socket.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request line, in bytes (without the newline).
    pub max_line: usize,
    /// Close a connection that sends nothing for this long.
    pub idle: Option<Duration>,
    /// Abandon a reply the client does not read within this time.
    pub write_timeout: Option<Duration>,
    /// Close a new connection when this many are open.
    pub max_conns: Option<usize>,
}

/// Where a request's answer goes.
pub struct Sink {
    w: OwnedWriteHalf,
    write_timeout: Option<Duration>,
    closed: Arc<AtomicBool>,
    buf: Vec<u8>,
}

impl Sink {
    /// Writes one response line.
    pub async fn send(&mut self, r: &Response) -> std::io::Result<()> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, r).map_err(std::io::Error::other)?;
        self.buf.push(b'\n');
        let write = self.w.write_all(&self.buf);
        match self.write_timeout {
            Some(t) => tokio::time::timeout(t, write).await.map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client did not read its reply in time",
                )
            })?,
            None => write.await,
        }
    }

    /// Whether the client has closed its side (for long streamed replies).
    pub fn client_gone(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

enum Incoming {
    Line(Vec<u8>),
    TooLarge,
}

/// Reads lines of at most `max` bytes; a longer line ends the reader.
async fn read_lines(
    r: OwnedReadHalf,
    limits: Limits,
    tx: mpsc::Sender<Incoming>,
    closed: Arc<AtomicBool>,
) {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut line = Vec::new();
    loop {
        let chunk = async {
            let buf = r.fill_buf().await?;
            let n = buf.len();
            match memchr(b'\n', buf) {
                Some(i) => {
                    line.extend_from_slice(&buf[..i]);
                    r.consume(i + 1);
                    Ok::<_, std::io::Error>(Some(true))
                }
                None if n == 0 => Ok(None),
                None => {
                    line.extend_from_slice(buf);
                    r.consume(n);
                    Ok(Some(false))
                }
            }
        };
        let got = match limits.idle {
            Some(t) => match tokio::time::timeout(t, chunk).await {
                Ok(x) => x,
                Err(_) => break,
            },
            None => chunk.await,
        };
        match got {
            Ok(Some(complete)) => {
                if line.len() > limits.max_line {
                    let _ = tx.send(Incoming::TooLarge).await;
                    break;
                }
                if complete {
                    let l = std::mem::take(&mut line);
                    if tx.send(Incoming::Line(l)).await.is_err() {
                        break;
                    }
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    closed.store(true, Ordering::Relaxed);
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Serves one connection, accepted at `accepted` (clock ticks since boot),
/// until the client closes it or breaks a limit.
pub async fn serve<H: Handler>(stream: UnixStream, accepted: u64, limits: Limits, handler: &H) {
    let peer = handler.identify(&stream, accepted);
    let (r, w) = stream.into_split();
    let closed = Arc::new(AtomicBool::new(false));
    // A small queue: a client that pipelines requests without reading the
    // replies fills it, then the reply writer times out and drops it.
    let (tx, mut rx) = mpsc::channel(8);
    let reader = tokio::spawn(read_lines(r, limits, tx, closed.clone()));
    let mut sink = Sink {
        w,
        write_timeout: limits.write_timeout,
        closed,
        buf: Vec::with_capacity(4096),
    };
    while let Some(incoming) = rx.recv().await {
        let line = match incoming {
            Incoming::Line(l) => l,
            Incoming::TooLarge => {
                let e = ErrorBody::new(
                    ErrorCode::TooLarge,
                    format!(
                        "request line longer than {} bytes; the connection is closed",
                        limits.max_line
                    ),
                );
                let _ = sink.send(&Response::err(0, e)).await;
                break;
            }
        };
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let req: Request = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                let id = serde_json::from_slice::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
                    .unwrap_or(0);
                let e = ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!("malformed request: {e}; send one JSON object per line with an \"op\""),
                );
                if sink.send(&Response::err(id, e)).await.is_err() {
                    break;
                }
                continue;
            }
        };
        if handler.handle(&peer, req, &mut sink).await.is_err() {
            break;
        }
    }
    reader.abort();
}
