//! A plain blocking RESP client, for the scenario's checks and clean-up
//! (not for load).

use crate::sandbox::Result;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A RESP reply, as far as this benchmark needs it (errors are shown with `{:?}`).
#[derive(Debug)]
#[allow(dead_code)]
pub enum Reply {
    /// `+…`
    Status(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…`; `None` for the null bulk.
    Bulk(Option<String>),
    /// `*…` (its elements read and dropped).
    Array,
}

/// A plain RESP connection (for checks and clean-up, not for load).
pub struct Conn {
    /// The write side (also the socket itself).
    pub w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Conn {
    /// Connects to `path`.
    pub fn open(path: &Path) -> Result<Conn> {
        let s = UnixStream::connect(path)
            .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
        Ok(Conn { w: s, r })
    }

    /// Sends `args` as one command and reads its reply.
    pub fn cmd(&mut self, args: &[&str]) -> Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.w
            .write_all(&out)
            .map_err(|e| format!("RESP write: {e}"))?;
        self.reply()
    }

    fn reply(&mut self) -> Result<Reply> {
        let mut line = String::new();
        self.r
            .read_line(&mut line)
            .map_err(|e| format!("RESP read: {e}"))?;
        let line = line.trim_end();
        let (t, rest) = line.split_at(line.len().min(1));
        match t {
            "+" => Ok(Reply::Status(rest.into())),
            "-" => Ok(Reply::Error(rest.into())),
            ":" => rest
                .parse()
                .map(Reply::Int)
                .map_err(|_| format!("bad RESP integer {line:?}")),
            "$" => {
                let n: i64 = rest.parse().map_err(|_| format!("bad RESP {line:?}"))?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut b = vec![0u8; n as usize + 2];
                std::io::Read::read_exact(&mut self.r, &mut b)
                    .map_err(|e| format!("RESP read: {e}"))?;
                b.truncate(n as usize);
                Ok(Reply::Bulk(Some(String::from_utf8_lossy(&b).into_owned())))
            }
            "*" => {
                let n: i64 = rest.parse().map_err(|_| format!("bad RESP {line:?}"))?;
                for _ in 0..n.max(0) {
                    self.reply()?;
                }
                Ok(Reply::Array)
            }
            _ => Err(format!("unexpected RESP line {line:?}")),
        }
    }

    /// Sends `args` and expects an integer reply.
    pub fn int(&mut self, args: &[&str]) -> Result<i64> {
        match self.cmd(args)? {
            Reply::Int(n) => Ok(n),
            other => Err(format!("`{}` answered {other:?}", args.join(" "))),
        }
    }
}
