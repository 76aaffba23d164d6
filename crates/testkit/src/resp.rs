//! A small blocking RESP client: enough to speak to Redis and to the lane
//! proxy as a client library would, and to send what no library would.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A RESP value, as the tests see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `+…`
    Simple(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…` and RESP3 verbatim strings.
    Bulk(Vec<u8>),
    /// A null of either protocol.
    Nil,
    /// Arrays, and RESP3 sets and pushes.
    Array(Vec<Value>),
    /// RESP3 maps, as flat key/value lists.
    Map(Vec<Value>),
    /// Any other one-line type, with its type byte.
    Other(String),
}

impl Value {
    /// Whether this is an error whose text starts with `prefix`.
    pub fn error_starts(&self, prefix: &str) -> bool {
        matches!(self, Value::Error(e) if e.starts_with(prefix))
    }

    /// The text of a bulk or simple string.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Simple(s) => Some(s.clone()),
            Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// Every bulk and simple string inside, flattened.
    pub fn strings(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<String>) {
        match self {
            Value::Simple(s) => out.push(s.clone()),
            Value::Bulk(b) => out.push(String::from_utf8_lossy(b).into_owned()),
            Value::Array(v) | Value::Map(v) => v.iter().for_each(|x| x.collect(out)),
            _ => {}
        }
    }
}

/// `+OK`.
pub fn ok() -> Value {
    Value::Simple("OK".into())
}

/// A bulk string.
pub fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

/// For tests writing a command as one line; an argument holding a space goes in its own element.
pub fn words(line: &str) -> Vec<String> {
    line.split_ascii_whitespace().map(str::to_string).collect()
}

/// Appends `args` to `out` as one command: an array of bulk strings.
pub fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses one value from `buf`: the value and the bytes it took, or `None`
/// while it is incomplete.
pub fn parse_value(buf: &[u8]) -> Option<(Value, usize)> {
    let lf = buf.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&buf[1..lf - 1]).unwrap().to_string();
    let mut pos = lf + 1;
    let agg = |n: i64, pos: &mut usize| -> Option<Vec<Value>> {
        let mut v = Vec::new();
        for _ in 0..n.max(0) {
            let (x, used) = parse_value(&buf[*pos..])?;
            *pos += used;
            v.push(x);
        }
        Some(v)
    };
    let v = match buf[0] {
        b'+' => Value::Simple(line),
        b'-' => Value::Error(line),
        b':' => Value::Int(line.parse().unwrap()),
        b'_' => Value::Nil,
        b'$' | b'=' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                Value::Nil
            } else {
                let n = n as usize;
                if buf.len() < pos + n + 2 {
                    return None;
                }
                let b = buf[pos..pos + n].to_vec();
                pos += n + 2;
                Value::Bulk(b)
            }
        }
        b'*' | b'~' | b'>' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                Value::Nil
            } else {
                Value::Array(agg(n, &mut pos)?)
            }
        }
        b'%' => Value::Map(agg(line.parse::<i64>().unwrap() * 2, &mut pos)?),
        other => Value::Other(format!("{}{line}", other as char)),
    };
    Some((v, pos))
}

/// A blocking RESP client on a unix socket (reads time out after 20 s: a
/// hung test fails).
pub struct Client {
    /// The connection, for tests that write from another thread.
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `path`.
    pub fn connect(path: &Path) -> Client {
        let stream =
            UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        Client::over(stream)
    }

    /// Connects to `path` if something listens there: for waiting on a
    /// socket, whose file exists a moment before it accepts.
    pub fn try_connect(path: &Path) -> Option<Client> {
        UnixStream::connect(path).ok().map(Client::over)
    }

    fn over(stream: UnixStream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends one command.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.stream.write_all(&out).unwrap();
    }

    /// Sends without minding whether the peer already closed.
    pub fn send_maybe<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let mut out = Vec::new();
        encode(&mut out, args);
        let _ = self.stream.write_all(&out);
    }

    /// Sends bytes as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends one command and reads its reply.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Value {
        self.send(args);
        self.read()
    }

    /// The next value; panics on EOF.
    pub fn read(&mut self) -> Value {
        self.try_read().expect("connection closed")
    }

    /// The next value, or `None` at EOF.
    pub fn try_read(&mut self) -> Option<Value> {
        loop {
            if !self.buf.is_empty() {
                if let Some((v, used)) = parse_value(&self.buf) {
                    self.buf.drain(..used);
                    return Some(v);
                }
            }
            let mut chunk = vec![0u8; 256 << 10];
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
                Err(e) => panic!("read: {e}"),
            };
            if n == 0 {
                assert!(self.buf.is_empty(), "EOF inside a reply");
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Asserts the peer closes the connection (after any replies already
    /// read).
    pub fn assert_closed(&mut self) {
        assert_eq!(self.try_read(), None, "connection still open");
    }

    /// For a connection being closed asynchronously: a PING sent now is
    /// answered at most once, then the connection closes.
    pub fn assert_closing(&mut self) {
        self.send_maybe(&["PING"]);
        match self.try_read() {
            None => {}
            Some(v) => {
                assert_eq!(v, Value::Simple("PONG".into()));
                self.assert_closed();
            }
        }
    }

    /// `ACL WHOAMI`.
    pub fn whoami(&mut self) -> Value {
        self.cmd(&["ACL", "WHOAMI"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resp3_and_waits_for_the_rest() {
        let map = b"%2\r\n$5\r\nproto\r\n:3\r\n+id\r\n_\r\n";
        let (v, used) = parse_value(map).unwrap();
        assert_eq!(used, map.len());
        assert_eq!(
            v,
            Value::Map(vec![
                bulk("proto"),
                Value::Int(3),
                Value::Simple("id".into()),
                Value::Nil
            ])
        );
        assert_eq!(parse_value(&map[..map.len() - 1]), None);
        assert_eq!(parse_value(b"$5\r\nhel"), None);
        let mut out = Vec::new();
        encode(&mut out, &["ECHO", ""]);
        assert_eq!(out, b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n");
    }

    #[test]
    fn words_split_a_command_line_on_ascii_whitespace() {
        assert_eq!(
            words("XADD  k:outbox\t* text {id}\n"),
            ["XADD", "k:outbox", "*", "text", "{id}"]
        );
        assert!(words(" ").is_empty());
    }
}
