//! What a lane's clients can make the proxy hold: connections, buffered
//! commands, time. The attacks of a client that sends half a command and
//! stalls, many times over.

use super::harness::{bulk, Agent, Client, Redis, TestProxy, Value};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn wait_for<R: oxidepm_testkit::Ready>(what: &str, ok: impl FnMut() -> R) -> R::Output {
    oxidepm_testkit::eventually(Duration::from_secs(30), what, ok)
}

/// The start of an XADD whose value is declared 1,000,000 bytes long.
const HALF_XADD: &[u8] =
    b"*5\r\n$4\r\nXADD\r\n$20\r\nalice:webhook:outbox\r\n$1\r\n*\r\n$1\r\nv\r\n$1000000\r\n";

/// A connection to `socket` that the proxy serves: a connection that
/// arrives while an earlier one is still being closed may be refused, and
/// is tried again.
fn served(socket: &Path) -> UnixStream {
    wait_for("a connection the proxy serves", || {
        let mut c = Client::connect(socket);
        c.send(&["PING"]);
        match c.read() {
            Value::Simple(s) if s == "PONG" => Some(c.stream),
            r => {
                assert!(r.error_starts("OXIDEPM connections"), "{r:?}");
                None
            }
        }
    })
}

/// From a thread of its own, sends `HALF_XADD` and `extra` bytes of its
/// value on `s` (blocking while the proxy does not read), then nothing.
fn stall(s: UnixStream, extra: usize) -> UnixStream {
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut data = HALF_XADD.to_vec();
        data.resize(HALF_XADD.len() + extra, b'x');
        // Ends when all is sent, or when the proxy closes the connection.
        let _ = w.write_all(&data);
    });
    s
}

/// Reads what the proxy says to a stalled connection until it closes it
/// (a reset, since the proxy leaves the rest of the command unread, ends
/// it too).
fn closing_words(mut s: UnixStream) -> Vec<u8> {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
    }
    out
}

/// The proxy binary, as the daemon runs it; killed on drop.
struct BinProxy {
    child: Child,
    lanes: PathBuf,
}

impl BinProxy {
    fn start(redis: &Redis, agents: &[&str], limits: &str) -> BinProxy {
        let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_oxidepm-lane-proxy"));
        let base = redis.dir.path();
        let lanes = base.join("lanes");
        let config = base.join("bin-proxy.json");
        let list: Vec<String> = agents
            .iter()
            .map(|a| {
                let pw = redis.password_file(&oxidepm_testkit::agent_user(a));
                format!(r#"{{"name": "{a}", "password_file": "{}"}}"#, pw.display())
            })
            .collect();
        std::fs::write(
            &config,
            format!(
                r#"{{"upstream": "{}", "lanes_dir": "{}", "families": ["webhook"],
                    "limits": {{{limits}}}, "agents": [{}]}}"#,
                redis.socket.display(),
                lanes.display(),
                list.join(", ")
            ),
        )
        .unwrap();
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = BinProxy { child, lanes };
        for a in agents {
            wait_for("the lane's socket", || Client::try_connect(&p.socket(a)));
        }
        p
    }

    fn socket(&self, agent: &str) -> PathBuf {
        self.lanes.join(format!("{agent}.sock"))
    }

    /// A `kB` line of /proc/<pid>/status, in bytes.
    fn status_bytes(&self, key: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {text}"));
        let kb: u64 = line[key.len() + 1..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kb * 1024
    }
}

impl Drop for BinProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn stalled_half_commands_stay_within_the_lanes_budgets_and_other_lanes_work() {
    let attackers = ["alice", "carol", "dave"];
    let mut agents = attackers.to_vec();
    agents.push("bob");
    let redis = Redis::start(&agents);
    // The default limits (16 connections, 4 MiB per lane), but a deadline
    // that ends the attack in seconds rather than ten.
    let proxy = BinProxy::start(&redis, &agents, r#""command_timeout_ms": 3000"#);
    let mut bob = Client::connect(&proxy.socket("bob"));
    assert_eq!(bob.whoami(), bulk("agent_bob"));
    let idle = proxy.status_bytes("VmRSS");

    // Every attacker lane: all its 16 connections, each 900 kB into a
    // 1 MB value, then silence. Without a budget, 43 MB buffered.
    let mut held = Vec::new();
    for a in attackers {
        for _ in 0..16 {
            held.push(served(&proxy.socket(a)));
        }
    }
    let stalled: Vec<UnixStream> = held.into_iter().map(|s| stall(s, 900_000)).collect();
    // Meanwhile the other lane's round trips go on.
    for i in 0..50 {
        let r = bob.cmd(&["XADD", "bob:webhook:outbox", "*", "n", &i.to_string()]);
        assert!(matches!(r, Value::Bulk(_)), "{r:?}");
    }
    assert_eq!(bob.cmd(&["PING"]), Value::Simple("PONG".into()));

    // The deadline closes every stalled command, with a word.
    for s in stalled {
        let words = closing_words(s);
        assert!(
            words.starts_with(b"-OXIDEPM timeout: a command was not completed within 3000 ms"),
            "{}",
            String::from_utf8_lossy(&words)
        );
    }
    // At its peak the proxy held no more than the three lanes' budgets
    // (plus what every connection needs to exist).
    let peak = proxy.status_bytes("VmHWM");
    let budget = idle + 3 * (4 << 20) + (8 << 20);
    assert!(
        peak <= budget,
        "peak RSS {} kB over the budget of {} kB (idle {} kB)",
        peak >> 10,
        budget >> 10,
        idle >> 10
    );
    // Nothing half-sent reached Redis; bob's entries did.
    let mut admin = redis.admin();
    assert_eq!(
        admin.cmd(&["EXISTS", "alice:webhook:outbox"]),
        Value::Int(0)
    );
    assert_eq!(admin.cmd(&["XLEN", "bob:webhook:outbox"]), Value::Int(50));
    // The lanes serve again.
    assert_eq!(
        Client::connect(&proxy.socket("alice")).whoami(),
        bulk("agent_alice")
    );
}

#[test]
fn a_half_sent_command_is_closed_at_its_deadline_and_the_lane_goes_on() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"command_timeout_ms": 200}"#,
        Vec::new(),
    );
    let mut a = proxy.client("alice");
    // A complete command, then half of one.
    a.send(&["PING"]);
    a.send_raw(b"*2\r\n$4\r\nECHO\r\n$10\r\nhal");
    assert_eq!(a.read(), Value::Simple("PONG".into()));
    let r = a.read();
    assert!(r.error_starts("OXIDEPM timeout"), "{r:?}");
    a.assert_closed();
    // An idle connection has no deadline: between commands, it may wait.
    let mut idle = proxy.client("alice");
    assert_eq!(idle.whoami(), bulk("agent_alice"));
    let mut b = proxy.client("alice");
    for _ in 0..3 {
        assert_eq!(b.cmd(&["ECHO", "x"]), bulk("x"));
    }
    assert_eq!(idle.whoami(), bulk("agent_alice"));
}

#[test]
fn connections_past_the_cap_are_refused_in_order_of_arrival() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    // 24 at once: the first 16 to arrive are served, whatever the order
    // in which the proxy's tasks run.
    let mut all: Vec<Client> = (0..24).map(|_| proxy.client("alice")).collect();
    for c in &mut all {
        c.send(&["PING"]);
    }
    let mut extra = all.split_off(16);
    for c in &mut all {
        assert_eq!(c.read(), Value::Simple("PONG".into()));
    }
    for c in &mut extra {
        let r = c.read();
        assert!(
            r.error_starts("OXIDEPM connections: agent 'alice' has 16 connections open"),
            "{r:?}"
        );
        c.assert_closed();
    }
    assert_eq!(all[0].cmd(&["PING"]), Value::Simple("PONG".into()));
    // One closes: a new one is served.
    drop(all.pop());
    let mut next = wait_for("a free connection", || {
        let mut c = proxy.client("alice");
        c.send(&["ACL", "WHOAMI"]);
        (c.read() == bulk("agent_alice")).then_some(c)
    });
    assert_eq!(next.cmd(&["PING"]), Value::Simple("PONG".into()));
}

#[test]
fn a_value_over_one_mib_is_refused_with_a_clear_error() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let mut a = proxy.client("alice");
    // The largest value passes.
    let most = vec![b'v'; 1 << 20];
    let r = a.cmd(&[&b"XADD"[..], b"alice:webhook:outbox", b"*", b"v", &most]);
    assert!(matches!(r, Value::Bulk(_)), "{r:?}");
    // One byte more is refused on its header, before it is read.
    let mut b = proxy.client("alice");
    b.send_raw(
        b"*5\r\n$4\r\nXADD\r\n$20\r\nalice:webhook:outbox\r\n$1\r\n*\r\n$1\r\nv\r\n$1048577\r\n",
    );
    let r = b.read();
    assert!(
        r.error_starts(
            "OXIDEPM too large: argument of 1048577 bytes; at most 1048576 bytes are accepted \
             (lanes.limits.max_bulk)"
        ),
        "{r:?}"
    );
    b.assert_closed();
    let mut admin = redis.admin();
    assert_eq!(admin.cmd(&["XLEN", "alice:webhook:outbox"]), Value::Int(1));
    assert_eq!(a.whoami(), bulk("agent_alice"));
}
