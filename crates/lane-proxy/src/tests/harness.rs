//! Test harness for the lane proxy: a private redis-server, the proxy
//! in-process, and a small blocking RESP client.

use crate::server::{Proxy, ReloadReport};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

pub const BRIDGE_PW: &str = "bridge-secret-pw";

pub fn agent_pw(agent: &str) -> String {
    format!("{agent}-secret-pw")
}

/// The ACL of DESIGN.md for one agent: stream reads and acks on its
/// inboxes, XADD only on its outboxes, a few connection commands.
pub fn agent_acl(agent: &str) -> String {
    format!(
        "user agent_{agent} on >{pw} resetkeys resetchannels -@all \
         +xreadgroup +xack +xpending +xclaim +xautoclaim +xread +xrange +xrevrange +xlen \
         +xinfo|stream +xinfo|groups +xinfo|consumers +xgroup|create +xgroup|createconsumer \
         +ping +echo +hello +acl|whoami +command \
         ~{agent}:*:inbox (%W~{agent}:*:outbox +xadd)",
        pw = agent_pw(agent)
    )
}

/// A redis-server on a unix socket in a temp dir, killed on drop.
pub struct Redis {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    child: Child,
}

impl Redis {
    pub fn start(agents: &[&str]) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        // Other uids (the peer-uid test) must reach lanes/ inside it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mut acl = String::from("user default off resetkeys -@all\n");
        acl.push_str(&format!("user bridge on >{BRIDGE_PW} ~* &* +@all\n"));
        for a in agents {
            acl.push_str(&agent_acl(a));
            acl.push('\n');
        }
        let (child, socket) = oxidepm_testkit::private_redis(dir.path(), &acl);
        Redis { dir, socket, child }
    }

    /// A direct connection authenticated as `bridge`.
    pub fn bridge(&self) -> Client {
        let mut c = Client::connect(&self.socket);
        assert_eq!(c.cmd(&["AUTH", "bridge", BRIDGE_PW]), ok());
        c
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent of the proxy's configuration.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    pub extra: String,
}

impl Agent {
    pub fn new(name: &str) -> Agent {
        Agent {
            name: name.into(),
            extra: String::new(),
        }
    }

    /// Extra JSON members, e.g. `"maxlen": 5`.
    pub fn with(mut self, extra: &str) -> Agent {
        self.extra = format!(", {extra}");
        self
    }
}

/// The proxy, in-process on its own runtime.
pub struct TestProxy {
    pub proxy: Arc<Proxy>,
    pub config: PathBuf,
    pub lanes: PathBuf,
    secrets: PathBuf,
    upstream: PathBuf,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestProxy {
    pub fn start(redis: &Redis, agents: &[Agent]) -> TestProxy {
        Self::start_with(redis, agents, "", Vec::new())
    }

    /// `top_extra`: extra top-level JSON members (`"limits": {...}`).
    pub fn start_with(
        redis: &Redis,
        agents: &[Agent],
        top_extra: &str,
        activated: Vec<crate::activation::ActivatedSocket>,
    ) -> TestProxy {
        let base = redis.dir.path();
        let secrets = base.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        let config = base.join("lane-proxy.json");
        let lanes = base.join("lanes");
        let upstream = redis.socket.clone();
        write_config(&config, &secrets, &upstream, &lanes, agents, top_extra);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (proxy, report) = Proxy::start(config.clone(), activated, rt.handle().clone()).unwrap();
        assert!(report.failed.is_empty(), "{report}");
        TestProxy {
            proxy,
            config,
            lanes,
            secrets,
            upstream,
            rt: Some(rt),
        }
    }

    pub fn write_config(&self, agents: &[Agent], top_extra: &str) {
        write_config(
            &self.config,
            &self.secrets,
            &self.upstream,
            &self.lanes,
            agents,
            top_extra,
        );
    }

    /// Rewrites the configuration and reloads it, as SIGHUP would.
    pub fn reconfigure(&self, agents: &[Agent]) -> ReloadReport {
        self.write_config(agents, "");
        self.proxy.reload().unwrap()
    }

    pub fn socket(&self, agent: &str) -> PathBuf {
        self.lanes.join(format!("{agent}.sock"))
    }

    /// A client of `agent`'s lane.
    pub fn client(&self, agent: &str) -> Client {
        Client::connect(&self.socket(agent))
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.proxy.shutdown();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn write_config(
    config: &Path,
    secrets: &Path,
    upstream: &Path,
    lanes: &Path,
    agents: &[Agent],
    top_extra: &str,
) {
    let mut list = Vec::new();
    for a in agents {
        let pw = secrets.join(format!("agent_{}", a.name));
        std::fs::write(&pw, format!("{}\n", agent_pw(&a.name))).unwrap();
        list.push(format!(
            r#"{{"name": "{}", "password_file": "{}"{}}}"#,
            a.name,
            pw.display(),
            a.extra
        ));
    }
    let sep = if top_extra.is_empty() { "" } else { ", " };
    let json = format!(
        r#"{{"upstream": "{}", "lanes_dir": "{}", "agents": [{}]{sep}{top_extra}}}"#,
        upstream.display(),
        lanes.display(),
        list.join(", ")
    );
    std::fs::write(config, json).unwrap();
}

/// A RESP value, as the tests see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Value>),
    /// RESP3 maps, as flat key/value lists.
    Map(Vec<Value>),
    Other(String),
}

impl Value {
    pub fn error_starts(&self, prefix: &str) -> bool {
        matches!(self, Value::Error(e) if e.starts_with(prefix))
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

pub fn ok() -> Value {
    Value::Simple("OK".into())
}

pub fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

/// Parses one value from `buf`; `None` if incomplete.
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

/// A blocking RESP client (reads time out after 20 s: a hung test fails).
pub struct Client {
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(path: &Path) -> Client {
        let stream =
            UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let mut out = Vec::new();
        crate::resp::encode_args(&mut out, args);
        self.stream.write_all(&out).unwrap();
    }

    /// Sends without minding whether the peer already closed.
    pub fn send_maybe<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let mut out = Vec::new();
        crate::resp::encode_args(&mut out, args);
        let _ = self.stream.write_all(&out);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

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

    /// Asserts the proxy closes the connection (after any replies already
    /// read).
    pub fn assert_closed(&mut self) {
        assert_eq!(self.try_read(), None, "connection still open");
    }

    /// For a lane being removed (its connections are aborted
    /// asynchronously): a PING sent now is answered at most once, then the
    /// connection closes.
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

    pub fn whoami(&mut self) -> Value {
        self.cmd(&["ACL", "WHOAMI"])
    }
}
