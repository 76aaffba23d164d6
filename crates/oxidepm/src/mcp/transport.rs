//! The stdio transport, bounded: one JSON-RPC message per line, at most
//! [`MAX_MESSAGE`] bytes in and out. A line that is not JSON is answered
//! `-32700`, one that is JSON but not a message (or too long) `-32600`,
//! and the connection goes on: a client's bad line never ends a session.
//! A line being read is kept in `self`, so a `receive` cancelled by the
//! service loop's `select!` resumes it instead of losing it.
//!
//! What the client makes the server hold is bounded here too: answers not
//! yet read ([`MAX_UNREAD`] bytes: past it no request is read, so a client
//! that stops reading is stopped by its own full pipe) and requests not
//! yet answered ([`MAX_IN_FLIGHT`]: past it a request is answered busy at
//! once, while notifications such as a cancel still get through).

use super::bounds::{MAX_IN_FLIGHT, MAX_MESSAGE, MAX_UNREAD};
use rmcp::model::JsonRpcMessage;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, Notify};

/// What is owed to the client: answer bytes not written yet, and requests
/// not answered yet.
#[derive(Default)]
struct Owed {
    unread: AtomicUsize,
    written: Notify,
    /// The ids (as JSON) of requests not answered nor cancelled yet.
    in_flight: std::sync::Mutex<HashSet<String>>,
}

impl Owed {
    /// Waits until the answers not yet written are under the bound.
    async fn room(&self) {
        loop {
            let written = self.written.notified();
            if self.unread.load(Ordering::Acquire) <= MAX_UNREAD {
                return;
            }
            written.await;
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The longest request id taken, as JSON: ids are kept while their
/// request runs.
const MAX_ID: usize = 256;

/// The server's end of a stdio MCP connection.
pub struct Bounded<R, W> {
    reader: BufReader<R>,
    writer: Arc<Mutex<Option<W>>>,
    owed: Arc<Owed>,
    line: Vec<u8>,
    /// The line being read is over the bound: its bytes are dropped up to
    /// its newline, then it is answered.
    skipping: bool,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Bounded<R, W> {
    /// A transport reading `reader` and writing `writer`.
    pub fn new(reader: R, writer: W) -> Self {
        Bounded {
            reader: BufReader::with_capacity(64 << 10, reader),
            writer: Arc::new(Mutex::new(Some(writer))),
            owed: Arc::default(),
            line: Vec::new(),
            skipping: false,
        }
    }
}

impl<R, W: AsyncWrite + Unpin + Send + 'static> Bounded<R, W> {
    /// Answers a line with an error (`id` null when it had none). The
    /// write is a task of its own, counted like any answer: `receive` is
    /// cancelled whenever the service loop has something else to do, and
    /// an answer it was writing would be lost.
    fn answer_error(&self, id: Value, code: i64, message: String) {
        let line = json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": code, "message": message },
        });
        let bytes = line.to_string().into_bytes();
        tokio::spawn(owe(self.writer.clone(), self.owed.clone(), bytes));
    }

    /// Counts a request in, or says why it is not taken.
    fn take(&self, id: &str) -> Result<(), (i64, String)> {
        if id.len() > MAX_ID {
            return Err((
                -32600,
                format!(
                    "invalid request: an id of {} bytes; use one of at most {MAX_ID}",
                    id.len()
                ),
            ));
        }
        let mut pending = self.owed.pending();
        if pending.contains(id) {
            // Two open requests with one id could not be told apart, and
            // would count once against the bound.
            return Err((
                -32600,
                format!("invalid request: id {id} is already used by a request not yet answered"),
            ));
        }
        if pending.len() >= MAX_IN_FLIGHT {
            return Err((
                -32000,
                format!(
                    "server busy: {MAX_IN_FLIGHT} requests are already waiting for an answer; \
                     ask again once some are answered"
                ),
            ));
        }
        pending.insert(id.to_string());
        Ok(())
    }
}

/// What reading a line gave.
enum Line {
    Whole,
    TooLong,
    End,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Bounded<R, W> {
    /// Reads up to the next newline into `self.line`, never holding more
    /// than [`MAX_MESSAGE`] bytes of it.
    async fn read_line(&mut self) -> Line {
        loop {
            let buf = match self.reader.fill_buf().await {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Line::End,
            };
            if buf.is_empty() {
                return Line::End;
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if !self.skipping {
                if self.line.len() + take > MAX_MESSAGE + 1 {
                    self.skipping = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(&buf[..take]);
                }
            }
            self.reader.consume(take);
            if done {
                if std::mem::take(&mut self.skipping) {
                    return Line::TooLong;
                }
                return Line::Whole;
            }
        }
    }
}

/// Counts `bytes` as owed to the client until they are written.
fn owe<W: AsyncWrite + Unpin + Send + 'static>(
    writer: Arc<Mutex<Option<W>>>,
    owed: Arc<Owed>,
    bytes: Vec<u8>,
) -> impl std::future::Future<Output = std::io::Result<()>> + Send + 'static {
    let n = bytes.len();
    owed.unread.fetch_add(n, Ordering::AcqRel);
    async move {
        let r = write_line(&writer, bytes).await;
        owed.unread.fetch_sub(n, Ordering::AcqRel);
        owed.written.notify_waiters();
        r
    }
}

/// Writes `bytes` and a newline, and flushes.
async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<Option<W>>,
    mut bytes: Vec<u8>,
) -> std::io::Result<()> {
    let mut w = writer.lock().await;
    let w = w
        .as_mut()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotConnected, "closed"))?;
    bytes.push(b'\n');
    w.write_all(&bytes).await?;
    w.flush().await
}

/// `item` as one line's bytes; an answer over [`MAX_MESSAGE`] is replaced
/// by an error saying so (tool results are bounded well below it).
fn encode(item: &TxJsonRpcMessage<RoleServer>) -> Vec<u8> {
    let bytes = serde_json::to_vec(item).unwrap_or_default();
    if bytes.len() <= MAX_MESSAGE && !bytes.is_empty() {
        return bytes;
    }
    let id = serde_json::to_value(item)
        .ok()
        .map_or(Value::Null, |v| id_of(&v));
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": format!("the answer is over {MAX_MESSAGE} bytes; ask for less (fewer lines, one app)"),
        },
    })
    .to_string()
    .into_bytes()
}

/// The id of a JSON-RPC message that is JSON but not a valid message, when
/// it has a usable one.
fn id_of(v: &Value) -> Value {
    match v.get("id") {
        Some(id @ Value::String(s)) if s.len() <= 256 => id.clone(),
        Some(id @ Value::Number(n)) if n.is_i64() => id.clone(),
        _ => Value::Null,
    }
}

impl<R, W> Transport<RoleServer> for Bounded<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        let owed = self.owed.clone();
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered.and_then(|id| serde_json::to_string(id).ok()) {
            owed.pending().remove(&id);
        }
        // Serialized now, so that what waits for the client is counted.
        owe(writer, owed, encode(&item))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.line.is_empty() && !self.skipping {
                self.owed.room().await;
            }
            let got = self.read_line().await;
            let line = std::mem::take(&mut self.line);
            match got {
                Line::End => return None,
                Line::TooLong => {
                    let m =
                        format!("message over {MAX_MESSAGE} bytes: dropped; send smaller messages");
                    self.answer_error(Value::Null, -32600, m);
                    continue;
                }
                Line::Whole => {}
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = match serde_json::from_slice(text) {
                Ok(v) => v,
                Err(e) => {
                    let m =
                        format!("parse error: not JSON ({e}); send one JSON-RPC message per line");
                    self.answer_error(Value::Null, -32700, m);
                    continue;
                }
            };
            let id = id_of(&value);
            let value_id = value.get("id").map(Value::to_string).unwrap_or_default();
            let cancelled = (value["method"] == "notifications/cancelled")
                .then(|| value["params"]["requestId"].to_string());
            match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
                Ok(msg @ JsonRpcMessage::Request(_)) => match self.take(&value_id) {
                    Ok(()) => return Some(msg),
                    Err((code, m)) => {
                        self.answer_error(id, code, m);
                    }
                },
                Ok(msg) => {
                    // A cancelled request is never answered: its id is let go.
                    if let Some(cancelled) = cancelled {
                        self.owed.pending().remove(&cancelled);
                    }
                    return Some(msg);
                }
                Err(e) => {
                    let m = format!("invalid request: not a JSON-RPC 2.0 MCP message ({e})");
                    self.answer_error(id, -32600, m);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut w = self.writer.lock().await;
        if let Some(mut w) = w.take() {
            w.shutdown().await?;
        }
        Ok(())
    }
}
