//! A blocking client of the daemon's protocol, used by the CLI.
//!
//! Every wait has a deadline, so that a daemon that accepts but never
//! answers cannot hang a command: connecting, writing the request, and
//! each wait for a line of the answer. A request may take long (a `stop`
//! waits for the app's kill timeout), so when an answer is late the client
//! asks the daemon for a `ping` on a second connection: a daemon that
//! answers it is working, and is waited for; one that does not is stuck.

use oxidepm_proto::{ErrorBody, Op, Request, Response, Via};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be used.
    #[error("connection to the daemon failed: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon accepted the connection but answered neither the request
    /// nor a `ping` in time.
    #[error(
        "the daemon at {} accepted the connection but did not answer within {}; is it stuck? \
         See {}; to restart it, stop its process{} and run any oxidepm command \
         (set OXIDEPM_TIMEOUT to a number of seconds to wait longer, 0 for ever)",
        socket.display(),
        secs(*.waited),
        socket.with_file_name("daemon.log").display(),
        lock_pid(socket)
    )]
    NoAnswer {
        /// The socket.
        socket: PathBuf,
        /// How long the client waited.
        waited: Duration,
    },
    /// The daemon closed the connection before its final answer.
    #[error("connection to the daemon failed: the daemon closed the connection")]
    Closed,
    /// The connection ended in the middle of an answer's line.
    #[error("the daemon ended its answer part-way: a reader that takes nothing for 30 s is dropped (a `logs --follow` piped into a program that stopped reading, say), or the daemon stopped; run the command again")]
    Cut,
    /// The daemon answered with an error.
    #[error("{0}")]
    Daemon(ErrorBody),
    /// The daemon's answer (or, never in practice, the request) is not the
    /// protocol's JSON.
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(#[source] serde_json::Error),
}

/// `2.5 s`, `10 s`.
fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// ` (pid N, in daemon.lock)` when the lock beside the socket names one.
fn lock_pid(socket: &Path) -> String {
    std::fs::read_to_string(socket.with_file_name("daemon.lock"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .map(|p| format!(" (pid {p})"))
        .unwrap_or_default()
}

/// One connection to the daemon.
pub struct Client {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    claim: Option<String>,
    /// The front end named in every request's audit row (`mcp:status`).
    via: Option<Via>,
    deadline: Option<Duration>,
    /// Ask the daemon for a `ping` when an answer is late (not when this
    /// connection is that question).
    ask_if_late: bool,
    /// The degraded-state warning of the last final line, if it had one.
    warning: Option<String>,
}

/// Connects to `path`, waiting at most `deadline` for the daemon to take
/// the connection (a daemon that does not accept fills its backlog, and a
/// plain connect would then wait for ever).
// The CLI's client, in a process of its own (never the daemon's runtime).
#[allow(clippy::disallowed_methods)]
pub fn connect_within(path: &Path, deadline: Option<Duration>) -> std::io::Result<UnixStream> {
    use nix::errno::Errno;
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let Some(limit) = deadline else {
        return UnixStream::connect(path);
    };
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    let addr = UnixAddr::new(path)?;
    let until = Instant::now() + limit;
    loop {
        match socket::connect(fd.as_raw_fd(), &addr) {
            Ok(()) => break,
            Err(Errno::EINTR) => {}
            // A unix socket's backlog is full: the daemon is not accepting.
            Err(Errno::EAGAIN) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(Errno::EAGAIN) => {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "the daemon did not take the connection within {}",
                        secs(limit)
                    ),
                ))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Whether the daemon at `path` answers a `ping` within `deadline`.
fn answers_ping(path: &Path, deadline: Duration) -> bool {
    let Ok(mut c) = Client::connect(path, None, Some(deadline)) else {
        return false;
    };
    c.ask_if_late = false;
    c.call(Op::Ping).is_ok()
}

impl Client {
    /// Connects to the socket at `path`, sending `claim` with every request;
    /// no wait on the daemon lasts longer than `deadline` unless the daemon
    /// shows it is working (`None`: wait for ever).
    pub fn connect(
        path: &Path,
        claim: Option<String>,
        deadline: Option<Duration>,
    ) -> std::io::Result<Client> {
        let stream = connect_within(path, deadline)?;
        stream.set_read_timeout(deadline)?;
        stream.set_write_timeout(deadline)?;
        let reader = BufReader::with_capacity(64 * 1024, stream.try_clone()?);
        Ok(Client {
            path: path.to_path_buf(),
            writer: stream,
            reader,
            next_id: 1,
            claim,
            via: None,
            deadline,
            ask_if_late: true,
            warning: None,
        })
    }

    /// Names the front end the next requests come through, for their
    /// audit rows (`None`: the CLI itself).
    pub fn set_via(&mut self, via: Option<Via>) {
        self.via = via;
    }

    /// The uid of the process at the other end, as the kernel recorded it
    /// at connect.
    pub fn peer_uid(&self) -> Option<u32> {
        oxidepm_sys::peer::credentials(&self.writer).map(|c| c.uid)
    }

    /// Whether another request may go on this connection: nothing of an
    /// earlier answer is left unread and the daemon has not closed it (an
    /// idle connection the daemon timed out or gave to another peer).
    pub fn reusable(&self) -> bool {
        self.reader.buffer().is_empty()
            && !oxidepm_sys::poll::readable(&self.writer, Duration::ZERO).unwrap_or(true)
    }

    /// A handle that ends this connection from another thread (a stream
    /// read for ever then sees its end).
    pub fn closer(&self) -> std::io::Result<UnixStream> {
        self.writer.try_clone()
    }

    /// Waits for ever from now on: for `logs --follow`, whose answer may
    /// rightly be silent for hours.
    pub fn wait_for_ever(&mut self) -> std::io::Result<()> {
        self.deadline = None;
        self.writer.set_read_timeout(None)?;
        self.writer.set_write_timeout(None)
    }

    /// The error of a wait that timed out, unless the daemon still answers
    /// a `ping` (then `None`: wait again).
    fn late(&self, e: std::io::Error) -> Option<ClientError> {
        if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            return Some(ClientError::Io(e));
        }
        let waited = self.deadline.unwrap_or_default();
        if self.ask_if_late && answers_ping(&self.path, waited) {
            return None;
        }
        Some(ClientError::NoAnswer {
            socket: self.path.clone(),
            waited,
        })
    }

    /// The degraded-state warning the daemon gave with its last answer
    /// (`ping` and `status` carry one while state.db is not sound).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
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
            via: self.via.clone(),
            op,
        };
        let mut line = serde_json::to_vec(&req).map_err(ClientError::Protocol)?;
        line.push(b'\n');
        let mut written = 0;
        while written < line.len() {
            match self.writer.write(&line[written..]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // The daemon refused the request before it was all sent
                // (too long a line): its answer says why.
                Err(e)
                    if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) =>
                {
                    return Err(self.refusal_before_close().unwrap_or(ClientError::Io(e)));
                }
                Err(e) => {
                    if let Some(e) = self.late(e) {
                        return Err(e);
                    }
                }
            }
        }
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            // A late answer that the daemon is still working on keeps what
            // was read of its line, and is waited for again.
            let n = loop {
                match self.reader.read_until(b'\n', &mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        if let Some(e) = self.late(e) {
                            return Err(e);
                        }
                    }
                }
            };
            if n == 0 && buf.is_empty() {
                return Err(ClientError::Closed);
            }
            if buf.last() != Some(&b'\n') {
                return Err(ClientError::Cut);
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
            self.warning = resp.warning;
            if let Some(e) = resp.error {
                return Err(ClientError::Daemon(e));
            }
            return Ok(resp.result.unwrap_or(Value::Null));
        }
    }
}

impl Client {
    /// The error the daemon answered before it closed the connection, if
    /// it did.
    fn refusal_before_close(&mut self) -> Option<ClientError> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).ok()?;
        let resp: Response = serde_json::from_slice(&line).ok()?;
        resp.error.map(ClientError::Daemon)
    }
}

/// Reads an answer (or a streamed item) as `T`.
fn decode<T: DeserializeOwned>(v: Value) -> Result<T, ClientError> {
    serde_json::from_value(v).map_err(ClientError::Protocol)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A peer that answers with `answer` and hangs up.
    fn peer(answer: &'static [u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 512];
            let _ = s.read(&mut b);
            let _ = s.write_all(answer);
        });
        (dir, path)
    }

    #[test]
    fn a_request_refused_before_it_is_all_sent_gets_the_daemon_s_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = vec![0u8; 64 << 10];
            let _ = s.read(&mut b);
            let e = br#"{"id":0,"ok":false,"error":{"code":"E_TOO_LARGE","message":"request line longer than 16777216 bytes; the connection is closed"}}"#;
            let _ = s.write_all(e);
            let _ = s.write_all(b"\n");
            // Closed with the rest unread: the client's write fails.
            let _ = s.shutdown(std::net::Shutdown::Both);
        });
        let mut c = Client::connect(&path, None, Some(Duration::from_secs(5))).unwrap();
        let spec = oxidepm_proto::AppSpec::new("huge", "x".repeat(32 << 20), vec![]);
        let e = c
            .call(Op::Define {
                apps: vec![spec],
                update: true,
            })
            .unwrap_err();
        assert!(e.to_string().contains("longer than 16777216"), "{e}");
    }

    #[test]
    fn an_answer_cut_part_way_says_so() {
        let (_d, path) = peer(b"{\"id\":1,\"stream\":{\"app\":\"a\",\"stream\":\"out\",\"line\":\"x\"}}\n{\"id\":1,\"str");
        let mut c = Client::connect(&path, None, Some(Duration::from_secs(5))).unwrap();
        let mut items = 0;
        let e = c.call_stream(Op::Ping, |_| {
            items += 1;
            true
        });
        assert_eq!(items, 1);
        let e = e.unwrap_err();
        assert!(matches!(e, ClientError::Cut), "{e}");
        assert!(e.to_string().contains("run the command again"), "{e}");
        // Nothing at all is a close, as before.
        let (_d, path) = peer(b"");
        let mut c = Client::connect(&path, None, Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(c.call(Op::Ping), Err(ClientError::Closed)));
    }
}
