//! A minimal blocking Redis client (RESP2 over a unix socket), enough for
//! the `bridge` scenario: commands, pipelines, and the replies they get.

use crate::sandbox::Result;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+…`
    Simple(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…` (None: nil)
    Bulk(Option<Vec<u8>>),
    /// `*…` (None: nil)
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an `Int` reply.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The text of a bulk or simple reply.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The elements of an array reply (nil: none).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            _ => &[],
        }
    }
}

/// One connection.
pub struct Resp {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

/// Appends one command as an array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

impl Resp {
    /// Connects and authenticates as `user`.
    pub fn connect(socket: &Path, user: &str, password: &str) -> Result<Resp> {
        let w = UnixStream::connect(socket)
            .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
        w.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let r = BufReader::new(w.try_clone().map_err(|e| e.to_string())?);
        let mut c = Resp { r, w };
        match c.cmd(&["AUTH", user, password])? {
            Reply::Simple(_) => Ok(c),
            other => Err(format!("AUTH {user}: {other:?}")),
        }
    }

    /// Sends one command without reading its reply.
    pub fn send(&mut self, args: &[&str]) -> Result<()> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.w.write_all(&out).map_err(|e| format!("redis: {e}"))
    }

    /// One command and its reply (an error reply is an error).
    pub fn cmd(&mut self, args: &[&str]) -> Result<Reply> {
        self.send(args)?;
        match self.read()? {
            Reply::Error(e) => Err(format!("redis {}: {e}", args.join(" "))),
            r => Ok(r),
        }
    }

    /// Many commands in one write, then their replies; an error reply is an
    /// error.
    pub fn pipeline(&mut self, cmds: &[Vec<String>]) -> Result<Vec<Reply>> {
        let mut out = Vec::new();
        for c in cmds {
            let args: Vec<&str> = c.iter().map(String::as_str).collect();
            encode(&mut out, &args);
        }
        self.w.write_all(&out).map_err(|e| format!("redis: {e}"))?;
        let mut replies = Vec::with_capacity(cmds.len());
        for _ in cmds {
            match self.read()? {
                Reply::Error(e) => return Err(format!("redis pipeline: {e}")),
                r => replies.push(r),
            }
        }
        Ok(replies)
    }

    /// Reads one reply.
    pub fn read(&mut self) -> Result<Reply> {
        let mut line = String::new();
        let n = self
            .r
            .read_line(&mut line)
            .map_err(|e| format!("redis: {e}"))?;
        if n < 3 || !line.ends_with("\r\n") {
            return Err(format!("redis: malformed or closed ({line:?})"));
        }
        let (kind, rest) = line.split_at(1);
        let rest = rest.trim_end();
        let num = || {
            rest.parse::<i64>()
                .map_err(|_| format!("redis: bad {line:?}"))
        };
        Ok(match kind {
            "+" => Reply::Simple(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(num()?),
            "$" => match num()? {
                n if n < 0 => Reply::Bulk(None),
                n => {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r
                        .read_exact(&mut b)
                        .map_err(|e| format!("redis: {e}"))?;
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
            },
            "*" => match num()? {
                n if n < 0 => Reply::Array(None),
                n => {
                    let mut v = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        v.push(self.read()?);
                    }
                    Reply::Array(Some(v))
                }
            },
            _ => return Err(format!("redis: unexpected reply {line:?}")),
        })
    }
}
