//! Test harness of the bridge: a private redis-server with the real ACL
//! rules, the bridge in-process or as the real binary, a blocking HTTP
//! client and an HTTP sink.

use crate::Bridge;
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::Secret;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BRIDGE_PW: &str = "bridge-test-pw";
pub const ADMIN_PW: &str = "sys-test-pw";
pub const TOKEN: &str = "webhook-test-token";

pub fn agent_pw(agent: &str) -> String {
    format!("{agent}-test-pw")
}

fn agent_user(agent: &str) -> AclUser {
    AclUser::Agent(agent.parse().unwrap())
}

/// Polls `f` until it gives `Some`, for at most 30 s (a hung test fails).
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server on a unix socket in a temp dir, with the ACL users of
/// the lanes (`bridge`, `agent_<name>`) and `sys` for inspection; killed on
/// drop.
pub struct Redis {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    child: Child,
}

impl Redis {
    pub fn start(agents: &[&str]) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let mut users = vec![
            (AclUser::Admin, Secret::new(ADMIN_PW)),
            (AclUser::Bridge, Secret::new(BRIDGE_PW)),
        ];
        for a in agents {
            users.push((agent_user(a), Secret::new(agent_pw(a))));
        }
        let (child, socket) = oxidepm_testkit::private_redis(dir.path(), &acl::acl_file(&users));
        std::fs::write(dir.path().join("bridge.pw"), format!("{BRIDGE_PW}\n")).unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        Redis { dir, socket, child }
    }

    /// Stops redis-server now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A connection as `user`.
    pub fn connect(&self, user: &str, password: &str) -> redis::Connection {
        let info = redis::ConnectionInfo {
            addr: redis::ConnectionAddr::Unix(self.socket.clone()),
            redis: redis::RedisConnectionInfo {
                db: 0,
                username: Some(user.into()),
                password: Some(password.into()),
                protocol: redis::ProtocolVersion::RESP2,
            },
        };
        redis::Client::open(info).unwrap().get_connection().unwrap()
    }

    /// The inspecting admin user.
    pub fn admin(&self) -> redis::Connection {
        self.connect(acl::ADMIN_USER, ADMIN_PW)
    }

    /// An agent, as its proxy would authenticate it.
    pub fn agent(&self, agent: &str) -> redis::Connection {
        self.connect(&agent_user(agent).to_string(), &agent_pw(agent))
    }

    /// Writes the bridge's configuration: the given members over defaults
    /// (this Redis, its files, the webhook on `listen`).
    pub fn write_config(&self, path: &Path, members: Value) {
        let mut cfg = json!({
            "redis_socket": self.socket,
            "password_file": self.dir.path().join("bridge.pw"),
            "agents": [],
            "sources": ["webhook", "email"],
            "routes": [],
            "webhook": { "listen": "127.0.0.1:0", "token_file": self.dir.path().join("token") },
            "retry": { "attempts": 3, "base_ms": 10, "max_ms": 100 },
            "outbox": { "block_ms": 200 },
        });
        merge(&mut cfg, members);
        std::fs::write(path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("bridge.json")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Merges `b` into `a`, object members recursively.
fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (a, b) => *a = b,
    }
}

/// Every entry of a stream: `(id, fields)`.
pub fn entries(con: &mut redis::Connection, key: &str) -> Vec<(String, HashMap<String, String>)> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(con)
        .unwrap();
    reply
        .ids
        .into_iter()
        .map(|e| {
            let fields = e
                .map
                .iter()
                .map(|(k, v)| (k.clone(), redis::from_redis_value::<String>(v).unwrap()))
                .collect();
            (e.id, fields)
        })
        .collect()
}

/// The counters of `bridge:stats`.
pub fn stats(con: &mut redis::Connection) -> HashMap<String, i64> {
    redis::cmd("HGETALL")
        .arg("bridge:stats")
        .query(con)
        .unwrap()
}

/// Entries pending in group `bridge` of a stream.
pub fn pending(con: &mut redis::Connection, key: &str) -> i64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(key)
        .arg("bridge")
        .query(con)
        .unwrap();
    match v {
        redis::Value::Array(parts) => redis::from_redis_value(&parts[0]).unwrap(),
        other => panic!("XPENDING: {other:?}"),
    }
}

/// The bridge in-process, on its own runtime.
pub struct TestBridge {
    pub bridge: Arc<Bridge>,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestBridge {
    pub fn start(config: &Path) -> TestBridge {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let bridge = rt.block_on(Bridge::start(config.to_path_buf())).unwrap();
        TestBridge {
            bridge,
            rt: Some(rt),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.bridge.webhook_addr().expect("the webhook runs")
    }

    /// Runs a future on the bridge's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().unwrap().block_on(f)
    }
}

impl Drop for TestBridge {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.block_on(self.bridge.shutdown());
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real `oxidepm-bridge` binary, built by `cargo build`.
pub fn bridge_binary() -> PathBuf {
    oxidepm_testkit::workspace_bin("oxidepm-bridge", "oxidepm-bridge")
}

/// The bridge as a process of its own.
pub struct BridgeProcess {
    pub child: Child,
    pub log: PathBuf,
}

impl BridgeProcess {
    pub fn spawn(config: &Path, log: &Path) -> BridgeProcess {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(bridge_binary())
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        BridgeProcess {
            child,
            log: log.to_path_buf(),
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP/1.1 request (one connection, closed after it):
/// `(status, JSON body or Null)`.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// POSTs a message to `/in/<source>` with the right token.
pub fn post(addr: SocketAddr, source: &str, msg: Value) -> (u16, Value) {
    http(
        addr,
        "POST",
        &format!("/in/{source}"),
        Some(TOKEN),
        &msg.to_string(),
    )
}

/// What the sink answers.
#[derive(Clone, Copy, Debug)]
pub enum SinkMode {
    /// 200 to everything.
    Ok,
    /// This status to everything.
    Always(u16),
    /// 503 to the first n requests, then 200.
    FailFirst(usize),
}

/// A local HTTP sink (keep-alive) recording every JSON body it is POSTed.
pub struct Sink {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Value>>>,
    pub requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Sink {
    /// `delay`: how long each answer takes.
    pub fn start(mode: SinkMode, delay: Duration) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, r, st) = (got.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (g, r) = (g.clone(), r.clone());
                std::thread::spawn(move || serve_sink(conn, mode, delay, g, r));
            }
        });
        Sink {
            addr,
            got,
            requests,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/out", self.addr)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve_sink(
    conn: TcpStream,
    mode: SinkMode,
    delay: Duration,
    got: Arc<Mutex<Vec<Value>>>,
    requests: Arc<AtomicUsize>,
) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let n = requests.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(delay);
        let status = match mode {
            SinkMode::Ok => 200,
            SinkMode::Always(s) => s,
            SinkMode::FailFirst(k) if n < k => 503,
            SinkMode::FailFirst(_) => 200,
        };
        if status < 300 {
            got.lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        }
        let answer = if status < 300 { "" } else { "sink says no" };
        // One write: several small ones would meet Nagle and delayed ACKs.
        let out = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if conn.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}
