//! One client connection: bounded request lines, idle and write timeouts,
//! and a reply writer that gives up on a client that does not read.
//!
//! An idle connection holds no buffer: bytes are read only once the socket
//! is readable, into a buffer that is handed on with the request it holds.

use super::slots::{Activity, Caps};
use super::Handler;
use oxidepm_proto::{ErrorBody, ErrorCode, Request, Response};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// Limits of one socket.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request line, in bytes (without the newline).
    pub max_line: usize,
    /// Close a connection that sends no request for this long (blank
    /// lines and parts of a line do not count; the time spent answering
    /// does not either).
    pub idle: Option<Duration>,
    /// Abandon a reply the client does not read within this time.
    pub write_timeout: Option<Duration>,
    /// How many connections may be open, by whom.
    pub caps: Caps,
}

/// Where a request's answer goes.
pub struct Sink {
    w: OwnedWriteHalf,
    write_timeout: Option<Duration>,
    closed: Arc<AtomicBool>,
    buf: Vec<u8>,
}

/// A reply buffer larger than this is not kept between replies.
const KEEP_REPLY_BUF: usize = 64 * 1024;

impl Sink {
    /// Writes one response line.
    pub async fn send(&mut self, r: &Response) -> std::io::Result<()> {
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, r).map_err(std::io::Error::other)?;
        self.buf.push(b'\n');
        let write = self.w.write_all(&self.buf);
        let written = match self.write_timeout {
            Some(t) => tokio::time::timeout(t, write).await.map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client did not read its reply in time",
                )
            })?,
            None => write.await,
        };
        if self.buf.capacity() > KEEP_REPLY_BUF {
            self.buf = Vec::new();
        }
        written
    }

    /// Writes response lines already encoded (each ending in a newline),
    /// under the same write timeout: for long streamed answers encoded
    /// off the runtime thread.
    pub async fn send_encoded(&mut self, lines: &[u8]) -> std::io::Result<()> {
        let write = self.w.write_all(lines);
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

/// How much is read at once.
const CHUNK: usize = 16 * 1024;

/// Reads request lines of at most `max_line` bytes; a longer line, the end
/// of the stream or the idle deadline ends the reader. Blank lines are
/// dropped here and are not activity.
async fn read_lines(
    r: OwnedReadHalf,
    limits: Limits,
    tx: mpsc::Sender<Incoming>,
    closed: Arc<AtomicBool>,
    activity: Arc<Activity>,
) {
    let mut buf: Vec<u8> = Vec::new();
    // Bytes of `buf` already searched for a newline.
    let mut scanned = 0;
    'read: loop {
        while let Some(i) = memchr(b'\n', &buf[scanned..]).map(|i| i + scanned) {
            // The line keeps the buffer; what follows it gets a new one,
            // empty (no allocation) when nothing follows.
            let rest = buf.split_off(i + 1);
            let mut line = std::mem::replace(&mut buf, rest);
            line.truncate(i);
            scanned = 0;
            if line.len() > limits.max_line {
                let _ = tx.send(Incoming::TooLarge).await;
                break 'read;
            }
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            activity.touch();
            if tx.send(Incoming::Line(line)).await.is_err() {
                break 'read;
            }
        }
        scanned = buf.len();
        if buf.len() > limits.max_line {
            let _ = tx.send(Incoming::TooLarge).await;
            break;
        }
        if !readable(&r, limits.idle, &activity).await {
            break;
        }
        buf.reserve(CHUNK);
        match r.try_read_buf(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    closed.store(true, Ordering::Relaxed);
}

/// Waits until `r` can be read; false when the connection has been idle for
/// `idle` (time spent answering a request does not count) or failed.
async fn readable(r: &OwnedReadHalf, idle: Option<Duration>, activity: &Activity) -> bool {
    let Some(idle) = idle else {
        return r.readable().await.is_ok();
    };
    loop {
        let left = match activity.idle_for() {
            Some(d) if d >= idle => return false,
            Some(d) => idle - d,
            None => idle,
        };
        if let Ok(ready) = tokio::time::timeout(left, r.readable()).await {
            return ready.is_ok();
        }
    }
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Serves one connection until the client closes it, breaks a limit, or
/// its slot is given to another peer.
pub async fn serve<H: Handler>(
    stream: UnixStream,
    peer: H::Peer,
    limits: Limits,
    handler: &H,
    activity: Arc<Activity>,
) {
    let (r, w) = stream.into_split();
    let closed = Arc::new(AtomicBool::new(false));
    // A small queue: a client that pipelines requests without reading the
    // replies fills it, then the reply writer times out and drops it.
    let (tx, mut rx) = mpsc::channel(8);
    let reader = tokio::spawn(read_lines(r, limits, tx, closed.clone(), activity.clone()));
    let mut sink = Sink {
        w,
        write_timeout: limits.write_timeout,
        closed,
        buf: Vec::new(),
    };
    loop {
        // Eviction first: a slot given away must not serve one more
        // request outside the count.
        let incoming = tokio::select! {
            biased;
            _ = activity.evicted() => break,
            i = rx.recv() => match i {
                Some(i) => i,
                None => break,
            },
        };
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
        drop(line);
        activity.set_busy(true);
        let answered = handler.handle(&peer, req, &mut sink).await;
        activity.set_busy(false);
        activity.touch();
        if answered.is_err() {
            break;
        }
    }
    reader.abort();
}

#[cfg(test)]
mod tests {
    //! The idle and write timeouts on tokio's paused clock: minutes of
    //! waiting pass in no time, and each deadline is met exactly.

    use super::*;
    use crate::server::slots::{Holder, PeerKey, Slots};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    use tokio::time::Instant;

    /// Answers every request with a pong of `reply_bytes` bytes.
    struct Pong {
        reply_bytes: usize,
    }

    impl Handler for Pong {
        type Peer = ();

        fn identify(&self, _: &UnixStream, _: u64) {}

        fn holder(&self, _: &()) -> Holder {
            Holder {
                key: PeerKey("test".into()),
                person: true,
            }
        }

        async fn handle(&self, _: &(), req: Request, sink: &mut Sink) -> std::io::Result<()> {
            let pad = "x".repeat(self.reply_bytes);
            sink.send(&Response::ok(req.id, serde_json::json!({ "pong": pad })))
                .await
        }
    }

    static SMALL: Pong = Pong { reply_bytes: 0 };
    static LARGE: Pong = Pong {
        reply_bytes: 256 * 1024,
    };

    const IDLE: Duration = Duration::from_secs(60);
    const WRITE: Duration = Duration::from_secs(10);

    /// Serves one end of a socket pair; the task gives how long it served.
    fn served(handler: &'static Pong) -> (UnixStream, tokio::task::JoinHandle<Duration>) {
        let (server, client) = UnixStream::pair().unwrap();
        let caps = Caps {
            max_conns: 4,
            per_peer: 4,
            reserved: 0,
        };
        let limits = Limits {
            max_line: 1024,
            idle: Some(IDLE),
            write_timeout: Some(WRITE),
            caps,
        };
        let slot = Slots::new(caps)
            .admit(Holder {
                key: PeerKey("test".into()),
                person: true,
            })
            .unwrap()
            .slot;
        let task = tokio::spawn(async move {
            let start = Instant::now();
            serve(server, (), limits, handler, slot.activity.clone()).await;
            start.elapsed()
        });
        (client, task)
    }

    async fn ping(r: &mut BufReader<tokio::net::unix::OwnedReadHalf>, w: &mut OwnedWriteHalf) {
        w.write_all(b"{\"id\":7,\"op\":\"ping\"}\n").await.unwrap();
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        assert!(line.contains("\"id\":7"), "{line}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_time_from_its_last_request() {
        let (client, task) = served(&SMALL);
        let (r, mut w) = client.into_split();
        let mut r = BufReader::new(r);
        tokio::time::sleep(Duration::from_secs(30)).await;
        ping(&mut r, &mut w).await;
        // Blank lines and a part of a line are not activity.
        tokio::time::sleep(Duration::from_secs(40)).await;
        w.write_all(b"\n\n{\"id\":").await.unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        let served = task.await.unwrap();
        // Closed 60 s after the request at 30 s, not 60 s after the blank
        // lines at 70 s, nor 60 s after the connection opened.
        assert!(served >= Duration::from_secs(90), "{served:?}");
        assert!(served < Duration::from_secs(91), "{served:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_keeps_asking_is_never_idle() {
        let (client, task) = served(&SMALL);
        let (r, mut w) = client.into_split();
        let mut r = BufReader::new(r);
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            ping(&mut r, &mut w).await;
        }
        assert!(!task.is_finished(), "closed while asking every 50 s");
        drop(w);
        drop(r);
        let served = task.await.unwrap();
        assert!(served >= Duration::from_secs(500), "{served:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_its_replies_is_dropped_after_the_write_timeout() {
        let (client, task) = served(&LARGE);
        let (r, mut w) = client.into_split();
        // Requests whose replies (256 KiB each) fill the socket, never read.
        for i in 0..4 {
            w.write_all(format!("{{\"id\":{i},\"op\":\"ping\"}}\n").as_bytes())
                .await
                .unwrap();
        }
        let served = task.await.unwrap();
        assert!(served >= WRITE, "{served:?}");
        assert!(served < WRITE + Duration::from_secs(1), "{served:?}");
        drop(r);
    }
}
