//! Test harness of the bridge: testkit's private redis-server (the ACL the
//! daemon writes), the bridge in-process or as the real binary, and its
//! configuration file.

use oxidepm_bridge::Bridge;
use oxidepm_lanes::acl;
use oxidepm_testkit::{Client, Value as Resp};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub use oxidepm_testkit::{eventually, free_port, words, Redis, Sink, SinkMode};

/// The webhook's bearer token in every test.
pub const TOKEN: &str = "webhook-test-token";

/// How long a wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The bridge's files beside testkit's Redis.
pub trait BridgeFiles {
    /// Writes the bridge's configuration: the given members over defaults
    /// (this Redis, the bridge's password file, the webhook on `listen`).
    fn write_config(&self, path: &Path, members: Value);
    /// Where the tests keep the bridge's configuration.
    fn config_path(&self) -> PathBuf;
}

impl BridgeFiles for Redis {
    fn write_config(&self, path: &Path, members: Value) {
        let token = self.dir.path().join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
        let mut cfg = json!({
            "redis_socket": self.socket,
            "password_file": self.password_file(acl::BRIDGE_USER),
            "agents": [],
            "sources": ["webhook", "email"],
            "routes": [],
            "webhook": { "listen": "127.0.0.1:0", "token_file": token },
            "retry": { "attempts": 3, "base_ms": 10, "max_ms": 100 },
            "outbox": { "block_ms": 200 },
        });
        merge(&mut cfg, members);
        std::fs::write(path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("bridge.json")
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
pub fn entries(con: &mut Client, key: &str) -> Vec<(String, HashMap<String, String>)> {
    let reply = con.cmd(&["XRANGE", key, "-", "+"]);
    let Resp::Array(list) = reply else {
        panic!("XRANGE {key}: {reply:?}")
    };
    list.into_iter()
        .map(|e| match e {
            Resp::Array(parts) if parts.len() == 2 => {
                let id = parts[0].text().expect("an entry id");
                let fields = parts[1].strings();
                let map = fields
                    .chunks(2)
                    .map(|kv| (kv[0].clone(), kv[1].clone()))
                    .collect();
                (id, map)
            }
            other => panic!("XRANGE {key}: entry {other:?}"),
        })
        .collect()
}

/// The counters of `bridge:stats`.
pub fn stats(con: &mut Client) -> HashMap<String, i64> {
    con.cmd(&["HGETALL", "bridge:stats"])
        .strings()
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].parse().unwrap()))
        .collect()
}

/// Entries pending in group `bridge` of a stream.
pub fn pending(con: &mut Client, key: &str) -> i64 {
    match con.cmd(&["XPENDING", key, "bridge"]) {
        Resp::Array(parts) => match parts[0] {
            Resp::Int(n) => n,
            ref other => panic!("XPENDING: {other:?}"),
        },
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

/// The real `oxidepm-bridge` binary, built by `cargo build`.
pub fn bridge_binary() -> PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_oxidepm-bridge"))
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
    let (status, body) = oxidepm_testkit::http(addr, method, path, token, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
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
