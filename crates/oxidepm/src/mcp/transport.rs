//! The stdio transport, bounded: one JSON-RPC message per line, at most
//! [`MAX_MESSAGE`] bytes in and out. A line that is not JSON is answered
//! `-32700`, one that is JSON but not a message (or too long) `-32600`,
//! and the connection goes on: a client's bad line never ends a session.
//! A line being read is kept in `self`, so a `receive` cancelled by the
//! service loop's `select!` resumes it instead of losing it.

use super::bounds::MAX_MESSAGE;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The server's end of a stdio MCP connection.
pub struct Bounded<R, W> {
    reader: BufReader<R>,
    writer: Arc<Mutex<Option<W>>>,
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
            line: Vec::new(),
            skipping: false,
        }
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

/// Writes one error answer (`id` null when the line had none).
async fn answer_error<W: AsyncWrite + Unpin>(
    writer: &Mutex<Option<W>>,
    id: Value,
    code: i64,
    message: String,
) -> bool {
    let line = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    write_line(writer, line.to_string().into_bytes())
        .await
        .is_ok()
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
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            if bytes.len() > MAX_MESSAGE {
                // Tool results are bounded well below this; anything else
                // this large is answered as an error rather than sent.
                let id = serde_json::to_value(&item)
                    .ok()
                    .map_or(Value::Null, |v| id_of(&v));
                bytes = json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {
                        "code": -32603,
                        "message": format!("the answer is over {MAX_MESSAGE} bytes; ask for less (fewer lines, one app)"),
                    },
                })
                .to_string()
                .into_bytes();
            }
            write_line(&writer, bytes).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let got = self.read_line().await;
            let line = std::mem::take(&mut self.line);
            match got {
                Line::End => return None,
                Line::TooLong => {
                    let m =
                        format!("message over {MAX_MESSAGE} bytes: dropped; send smaller messages");
                    if !answer_error(&self.writer, Value::Null, -32600, m).await {
                        return None;
                    }
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
                    if !answer_error(&self.writer, Value::Null, -32700, m).await {
                        return None;
                    }
                    continue;
                }
            };
            let id = id_of(&value);
            match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
                Ok(msg) => return Some(msg),
                Err(e) => {
                    let m = format!("invalid request: not a JSON-RPC 2.0 MCP message ({e})");
                    if !answer_error(&self.writer, id, -32600, m).await {
                        return None;
                    }
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
