//! A blocking client of the daemon's protocol, used by the CLI.

use oxidepm_proto::{ErrorBody, Op, Request, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be used.
    #[error("connection to the daemon failed: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon closed the connection before its final answer.
    #[error("connection to the daemon failed: the daemon closed the connection")]
    Closed,
    /// The daemon answered with an error.
    #[error("{0}")]
    Daemon(ErrorBody),
    /// The daemon's answer (or, never in practice, the request) is not the
    /// protocol's JSON.
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(#[source] serde_json::Error),
}

/// One connection to the daemon.
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    claim: Option<String>,
}

impl Client {
    /// Connects to the socket at `path`, sending `claim` with every request.
    pub fn connect(path: &Path, claim: Option<String>) -> std::io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        let reader = BufReader::with_capacity(64 * 1024, stream.try_clone()?);
        Ok(Client {
            writer: stream,
            reader,
            next_id: 1,
            claim,
        })
    }

    /// Sends `op` and returns the final result.
    pub fn call(&mut self, op: Op) -> Result<Value, ClientError> {
        self.call_stream(op, |_| true)
    }

    /// Sends `op` and decodes the final result as the answer type of `op`
    /// (see `oxidepm_proto::Reply`).
    pub fn call_as<T: DeserializeOwned>(&mut self, op: Op) -> Result<T, ClientError> {
        decode(self.call(op)?)
    }

    /// Like [`Client::call_stream`], with items and the final result
    /// decoded; `None` when `on_item` stopped the reading early.
    pub fn call_stream_as<I: DeserializeOwned, T: DeserializeOwned>(
        &mut self,
        op: Op,
        mut on_item: impl FnMut(I) -> bool,
    ) -> Result<Option<T>, ClientError> {
        let mut bad_item = None;
        let mut stopped = false;
        let last = self.call_stream(op, |item| match decode(item) {
            Ok(item) => {
                stopped = !on_item(item);
                !stopped
            }
            Err(e) => {
                bad_item = Some(e);
                false
            }
        })?;
        match bad_item {
            Some(e) => Err(e),
            None if stopped => Ok(None),
            None => decode(last).map(Some),
        }
    }

    /// Sends `op`, passing each streamed item to `on_item` (which returns
    /// false to stop reading), and returns the final result.
    pub fn call_stream(
        &mut self,
        op: Op,
        mut on_item: impl FnMut(Value) -> bool,
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = Request {
            id,
            claim: self.claim.clone(),
            op,
        };
        let mut line = serde_json::to_vec(&req).map_err(ClientError::Protocol)?;
        line.push(b'\n');
        self.writer.write_all(&line)?;
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            let n = self.reader.read_until(b'\n', &mut buf)?;
            if n == 0 {
                return Err(ClientError::Closed);
            }
            let resp: Response = serde_json::from_slice(&buf).map_err(ClientError::Protocol)?;
            if resp.id != id && resp.id != 0 {
                continue;
            }
            if let Some(item) = resp.stream {
                if !on_item(item) {
                    return Ok(Value::Null);
                }
                continue;
            }
            if let Some(e) = resp.error {
                return Err(ClientError::Daemon(e));
            }
            return Ok(resp.result.unwrap_or(Value::Null));
        }
    }
}

/// Reads an answer (or a streamed item) as `T`.
fn decode<T: DeserializeOwned>(v: Value) -> Result<T, ClientError> {
    serde_json::from_value(v).map_err(ClientError::Protocol)
}
