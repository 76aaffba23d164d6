//! Connections of the proxy's own to the lanes' Redis, as an agent: the
//! one opened for each client connection (then relayed byte-wise by
//! `connection`), and the meter's, on which the proxy asks and reads the
//! answers itself ([`Upstream::call`]).

use crate::upstream::link::Link;
use crate::resp::{encode_args, parse_int};
use crate::upstream::route::Route;
use oxidepm_lanes::{AclUser, AgentName, Secret};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The lane a user's connections belong to: its slot on a cluster.
pub fn lane_of(user: &AclUser) -> String {
    match user {
        AclUser::Agent(a) => a.to_string(),
        AclUser::Responder(r) => r.clone(),
        other => other.to_string(),
    }
}

/// Authenticates `link` as `user` (an agent's or a responder's).
pub async fn authenticate(link: &mut Link, user: &AclUser, password: &Secret) -> io::Result<()> {
    let user = user.to_string();
    let mut auth = Vec::with_capacity(64);
    encode_args(
        &mut auth,
        &[
            b"AUTH".as_slice(),
            user.as_bytes(),
            password.expose().as_bytes(),
        ],
    );
    link.write_all(&auth).await?;
    link.flush().await?;
    let mut reply = Vec::with_capacity(64);
    loop {
        if reply.len() > 4096 {
            return Err(io::Error::other("oversized reply to AUTH"));
        }
        let mut b = [0u8; 256];
        let n = link.read(&mut b).await?;
        if n == 0 {
            return Err(io::Error::other("Redis closed the connection during AUTH"));
        }
        reply.extend_from_slice(&b[..n]);
        if reply.ends_with(b"\r\n") {
            break;
        }
    }
    if reply == b"+OK\r\n" {
        return Ok(());
    }
    let text = String::from_utf8_lossy(reply.strip_prefix(b"-").unwrap_or(&reply))
        .trim_end()
        .to_string();
    Err(io::Error::other(format!(
        "Redis refused AUTH as {user}: {text}"
    )))
}

/// A RESP2 reply, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+…`
    Simple(Vec<u8>),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…`; `None` for the null bulk.
    Bulk(Option<Vec<u8>>),
    /// `*…`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an `Int`.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes of a simple or bulk string.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Simple(b) | Reply::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }

    /// The elements of an array (none for the null array).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            _ => &[],
        }
    }
}

/// The largest answer the meter waits for: its questions have short
/// answers, so anything longer means the connection is not what it seems.
const MAX_ANSWER: usize = 1 << 20;

/// Parses one reply from the start of `buf`: `Ok(None)` if incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply, usize)>, String> {
    if depth > 8 {
        return Err("reply nested too deeply".into());
    }
    let Some(&ty) = buf.get(at) else {
        return Ok(None);
    };
    let Some(lf) = buf[at..].iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    if lf < 2 || buf[at + lf - 1] != b'\r' {
        return Err("reply line not terminated by CRLF".into());
    }
    let line = &buf[at + 1..at + lf - 1];
    let next = at + lf + 1;
    let int = || parse_int(line).ok_or_else(|| format!("bad integer in reply: {line:?}"));
    Ok(Some(match ty {
        b'+' => (Reply::Simple(line.to_vec()), next),
        b'-' => (
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            next,
        ),
        b':' => (Reply::Int(int()?), next),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let end = next + n as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            (Reply::Bulk(Some(buf[next..end].to_vec())), end + 2)
        }
        b'*' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((r, p)) => {
                        items.push(r);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            (Reply::Array(Some(items)), pos)
        }
        other => return Err(format!("unexpected reply type byte 0x{other:02x}")),
    }))
}

/// A connection on which the proxy asks Redis things itself.
#[derive(Debug)]
pub struct Upstream {
    stream: Link,
    buf: Vec<u8>,
    /// The route it was opened on, and for which lane: told when a reply
    /// says the lane is served elsewhere.
    route: Option<(Arc<Route>, String)>,
}

impl Upstream {
    /// Connects and authenticates as `agent_<agent>`.
    pub async fn open(
        route: &Arc<Route>,
        agent: &AgentName,
        password: &Secret,
    ) -> io::Result<Upstream> {
        Self::open_as(route, &AclUser::Agent(agent.clone()), password).await
    }

    /// Connects and authenticates as `user`.
    pub async fn open_as(
        route: &Arc<Route>,
        user: &AclUser,
        password: &Secret,
    ) -> io::Result<Upstream> {
        let lane = lane_of(user);
        let link = route.connect(&lane, user, password).await?;
        let mut up = Self::from_link(link);
        up.route = Some((route.clone(), lane));
        Ok(up)
    }

    /// Asks on `link`, already authenticated (or needing no credential).
    pub fn from_link(link: Link) -> Upstream {
        Upstream {
            stream: link,
            buf: Vec::new(),
            route: None,
        }
    }

    /// The connection, once every answer asked for was read.
    pub fn into_link(self) -> Link {
        self.stream
    }

    /// Sends `commands` in one write and reads their replies, in order.
    pub async fn call(&mut self, commands: &[Vec<Vec<u8>>]) -> io::Result<Vec<Reply>> {
        let mut out = Vec::new();
        for c in commands {
            encode_args(&mut out, c);
        }
        self.stream.write_all(&out).await?;
        self.stream.flush().await?;
        let mut replies = Vec::with_capacity(commands.len());
        let mut start = 0;
        while replies.len() < commands.len() {
            match parse_reply(&self.buf[start..]).map_err(io::Error::other)? {
                Some((r, used)) => {
                    replies.push(r);
                    start += used;
                    continue;
                }
                None if self.buf.len() - start > MAX_ANSWER => {
                    return Err(io::Error::other("an answer from Redis is too long"));
                }
                None => {}
            }
            self.buf.drain(..start);
            start = 0;
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::other("Redis closed the connection"));
            }
        }
        self.buf.drain(..start);
        if let Some((route, lane)) = &self.route {
            if !route.is_unix() {
                for r in &replies {
                    if let Reply::Error(e) = r {
                        if let Some(m) = crate::upstream::cluster_map::moved(e.as_bytes()) {
                            // This connection is on the wrong node now: the
                            // caller drops it, the next one goes elsewhere.
                            route.moved(lane, m);
                            return Err(io::Error::other(format!(
                                "the lane moved to another node ({e})"
                            )));
                        }
                    }
                }
            }
        }
        Ok(replies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_replies_only() {
        let b = b"*3\r\n:5\r\n$3\r\nabc\r\n*2\r\n$-1\r\n-ERR x\r\n+OK\r\n";
        let (r, used) = parse_reply(b).unwrap().unwrap();
        assert_eq!(used, b.len() - 5);
        assert_eq!(r.items()[0].int(), Some(5));
        assert_eq!(r.items()[1].bytes(), Some(&b"abc"[..]));
        assert_eq!(
            r.items()[2],
            Reply::Array(Some(vec![Reply::Bulk(None), Reply::Error("ERR x".into())]))
        );
        for cut in 0..used {
            assert_eq!(parse_reply(&b[..cut]).unwrap(), None, "at {cut}");
        }
        assert!(parse_reply(b"%1\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
    }
}
