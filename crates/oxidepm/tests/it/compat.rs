//! Agents written with the Redis libraries agents are written with, through
//! a real lane: redis-py (sync and asyncio), ioredis, node-redis and
//! redis-rs (`tests/compat/` and testkit's `compat-agent-rs`). Each
//! connects from its environment as the README says, with its library's
//! default options, and meets what a lane's life brings: a webhook's
//! messages, a run that dies before answering, restarts of the proxy and
//! of Redis. Every message must be answered exactly once.
//!
//! The node libraries are installed by test.sh into `target/compat`
//! (`npm install --prefix`), redis-py from PyPI. A missing library skips
//! its test with the reason printed, unless `OXIDEPM_REQUIRE_COMPAT=1`
//! (test.sh sets it), which makes it fail.

use crate::harness::{read, Env};
use oxidepm_lanes::Secret;
use oxidepm_testkit::{free_port, http, Sink, SinkMode};
use serde_json::Value;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Messages per batch; every third asks for a plain (non-transaction)
/// pipeline.
const BATCH: usize = 6;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/oxidepm is two levels under the root")
        .to_path_buf()
}

/// Where test.sh installs the node libraries.
fn node_modules() -> PathBuf {
    root().join("target/compat/node_modules")
}

/// An agent's command line, or why its library is not here.
fn agent_command(lib: &str) -> Result<Vec<String>, String> {
    let script = |name: &str| root().join("tests/compat").join(name).display().to_string();
    match lib {
        "redis-py" | "redis-py-asyncio" => {
            let python = python_with_redis()?;
            let file = if lib == "redis-py" {
                "redis_py_agent.py"
            } else {
                "redis_py_async_agent.py"
            };
            Ok(vec![python, script(file)])
        }
        "ioredis" | "node-redis" => {
            let node = on_path("node").ok_or("node is not installed (Debian: nodejs)")?;
            let (module, file) = if lib == "ioredis" {
                ("ioredis", "ioredis_agent.js")
            } else {
                ("redis", "node_redis_agent.js")
            };
            let dir = node_modules().join(module);
            if !dir.join("package.json").is_file() {
                return Err(format!(
                    "{} is missing: run test.sh, or npm install --prefix target/compat {module}",
                    dir.display()
                ));
            }
            Ok(vec![node.display().to_string(), script(file)])
        }
        "redis-rs" => {
            let bin = oxidepm_testkit::workspace_bin("oxidepm-testkit", "compat-agent-rs");
            Ok(vec![bin.display().to_string()])
        }
        _ => Err(format!("no agent for {lib}")),
    }
}

/// A program on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The interpreter (its real path, not a version manager's shim) of a
/// python3 that has redis-py.
fn python_with_redis() -> Result<String, String> {
    let out = Command::new("python3")
        .args(["-c", "import sys, redis; print(sys.executable)"])
        .output()
        .map_err(|e| format!("python3 cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "python3 has no redis-py (pip install redis): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The agent's command, or `None` (a skip, printed) when its library is
/// missing and the suite is not required.
fn command_or_skip(lib: &str) -> Option<Vec<String>> {
    match agent_command(lib) {
        Ok(c) => Some(c),
        Err(why) if std::env::var("OXIDEPM_REQUIRE_COMPAT").as_deref() == Ok("1") => {
            panic!("{lib}: {why} (OXIDEPM_REQUIRE_COMPAT=1)")
        }
        Err(why) => {
            eprintln!("skipped: the {lib} agent cannot run: {why}");
            None
        }
    }
}

/// A daemon with a webhook whose messages all go to one agent, and a sink
/// for the agent's answers.
struct Lane {
    env: Env,
    sink: Sink,
    port: u16,
    token: String,
    agent: String,
    lib: String,
    /// The message texts sent so far.
    sent: Vec<String>,
}

impl Lane {
    fn start(lib: &str, agent: &str, command: &[String]) -> Lane {
        let env = Env::new();
        let port = free_port();
        let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
        // The agents share the daemon's uid: their interpreters and
        // libraries (a pyenv under /root, target/compat) need not be
        // readable by a user of their own.
        env.daemon_toml(&format!(
            r#"
agents_share_uid = true
[lanes]
sources = ["webhook"]
default_agent = "{agent}"

[lanes.webhook]
listen = "127.0.0.1:{port}"
deliver = {{ "*" = "{}" }}
"#,
            sink.url()
        ));
        let state = env.path("state");
        std::fs::create_dir_all(&state).unwrap();
        let node_path = format!("NODE_PATH={}", node_modules().display());
        let state = state.display().to_string();
        let mut args = vec![
            "start",
            "--kind",
            "agent",
            "--name",
            agent,
            "--env",
            &node_path,
            "--restart",
            "always",
            "--",
        ];
        args.extend(command.iter().map(String::as_str));
        args.push(&state);
        env.ok(&args);
        let mut lane = Lane {
            env,
            sink,
            port,
            token: String::new(),
            agent: agent.to_string(),
            lib: lib.to_string(),
            sent: Vec::new(),
        };
        lane.wait_for_webhook();
        lane.token = Secret::read(&lane.env.home.join("secrets/webhook_token"))
            .unwrap()
            .expose()
            .to_string();
        lane
    }

    fn wait_for_webhook(&self) {
        self.env.wait(30, "the bridge and its webhook", || {
            self.env
                .daemon_status()
                .iter()
                .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    /// Sends one message through the webhook. A refusal while Redis comes
    /// back (5xx: nothing written) is tried again.
    fn send(&mut self, text: &str) {
        let body =
            serde_json::json!({"channel": "compat", "sender": "t", "text": text}).to_string();
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        self.env
            .wait(30, &format!("the webhook to take {text:?}"), || {
                let (code, _) = http(addr, "POST", "/in/webhook", Some(&self.token), &body);
                // A 4xx is this test's mistake: say so rather than retry.
                assert!(!(400..500).contains(&code), "{code} for {body}");
                (200..300).contains(&code)
            });
        self.sent.push(text.to_string());
    }

    /// Sends a batch of messages, every third asking for a plain pipeline.
    fn send_batch(&mut self, name: &str) {
        for i in 0..BATCH {
            let plain = if i % 3 == 0 { " [plain]" } else { "" };
            self.send(&format!("{name}-{i}{plain}"));
        }
    }

    /// The answers at the sink, as texts.
    fn answers(&self) -> Vec<String> {
        self.sink
            .bodies()
            .iter()
            .map(|b| b["text"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// Waits until every message sent has an answer; on giving up, says
    /// which are missing and what the agent logged.
    fn wait_answered(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let got = self.answers();
            let missing: Vec<&String> = self
                .sent
                .iter()
                .filter(|m| !got.contains(&format!("{}: {m}", self.lib)))
                .collect();
            if missing.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let logs = self.env.run(&["logs", &self.agent, "--lines", "40"]);
                panic!(
                    "{}: {what}: no answer to {missing:?}; the sink has {got:?}; the agent logged:\n{}{}",
                    self.lib,
                    String::from_utf8_lossy(&logs.stdout),
                    String::from_utf8_lossy(&logs.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Restarts a system app and waits until it is online again.
    fn restart(&self, app: &str) {
        let before = self.env.pid(app);
        self.env.ok(&["restart", app]);
        self.env.wait(30, &format!("{app} back"), || {
            let a = self.env.daemon_app(app);
            a["status"] == "online" && a["pid"].as_u64().is_some_and(|p| p as u32 != before)
        });
    }
}

/// The whole life of one library's agent.
fn suite(lib: &str, agent: &str) {
    let Some(command) = command_or_skip(lib) else {
        return;
    };
    let mut lane = Lane::start(lib, agent, &command);

    // A batch and a message whose reader dies before answering: the next
    // run (a new consumer name) takes it over with XAUTOCLAIM.
    lane.send_batch("first");
    lane.send("please crash now");
    lane.send("after-the-crash");
    lane.wait_answered("the first batch and the crash");
    assert!(
        lane.env
            .path("state")
            .join(format!("{agent}.crashed"))
            .exists(),
        "the agent never met the crash message"
    );

    lane.restart("oxidepm-lanes");
    lane.send_batch("after-proxy-restart");
    lane.wait_answered("after `oxidepm restart oxidepm-lanes`");

    lane.restart("oxidepm-redis");
    lane.wait_for_webhook();
    lane.send_batch("after-redis-restart");
    lane.wait_answered("after `oxidepm restart oxidepm-redis`");

    // One more message, answered after everything before it (the agent
    // answers in order): a duplicate of an earlier answer would be in.
    lane.send("last");
    lane.wait_answered("the last message");
    let got = lane.answers();
    let bodies = lane.sink.bodies();
    for m in &lane.sent {
        let answer = format!("{lib}: {m}");
        // The outbox entries behind each delivery: one entry delivered
        // twice is the bridge's doing, two entries the agent's.
        let ids: Vec<&Value> = bodies
            .iter()
            .filter(|b| b["text"] == answer.as_str())
            .map(|b| &b["id"])
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "{lib}: {m:?} delivered from outbox entries {ids:?}: {got:?}"
        );
    }
    assert_eq!(
        got.len(),
        lane.sent.len(),
        "{lib}: answers to what was never sent: {got:?}"
    );
    assert!(
        lane.sink.bodies().iter().all(|b| b["agent"] == agent),
        "{:?}",
        lane.sink.bodies()
    );
}

#[test]
fn compat_redis_py_sync() {
    suite("redis-py", "pysync");
}

#[test]
fn compat_redis_py_asyncio() {
    suite("redis-py-asyncio", "pyasync");
}

#[test]
fn compat_ioredis() {
    suite("ioredis", "ioredis");
}

#[test]
fn compat_node_redis() {
    suite("node-redis", "noderedis");
}

#[test]
fn compat_redis_rs() {
    suite("redis-rs", "redisrs");
}

/// The README's example agent (`examples/agents/agent.py`) does what the
/// README advises: a restart of its lane's proxy does not end it, what it
/// read and left unanswered is taken over when it starts, and it answers
/// and acknowledges in one transaction: each message is answered once.
#[test]
fn the_example_agent_survives_its_lane_and_answers_each_message_once() {
    let Some(mut command) = command_or_skip("redis-py") else {
        return;
    };
    command[1] = root()
        .join("examples/agents/agent.py")
        .display()
        .to_string();
    command.push("example".into());
    let mut lane = Lane::start("example", "alice", &command);
    let answered = |lane: &Lane, text: &str| {
        let want = format!("example: you said {text:?}").replace('"', "'");
        lane.env.wait(60, &format!("the answer to {text}"), || {
            lane.answers().contains(&want)
        });
    };
    lane.send("one");
    answered(&lane, "one");
    lane.restart("oxidepm-lanes");
    lane.send("two");
    answered(&lane, "two");
    // Read and left unanswered (a run that died mid-answer), then the
    // agent starts again: it is answered first.
    lane.env.ok(&["stop", "alice"]);
    lane.send("left pending");
    let mut sys = sys_conn(&lane.env).expect("the lanes' Redis");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("alice")
        .arg("dead-run")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg("alice:webhook:inbox")
        .arg(">")
        .query(&mut sys)
        .unwrap();
    lane.env.ok(&["start", "alice"]);
    answered(&lane, "left pending");
    lane.send("three");
    answered(&lane, "three");
    let got = lane.answers();
    assert_eq!(got.len(), 4, "each message answered once: {got:?}");
}

#[test]
fn the_deprecated_lane_scheme_still_gives_the_old_url_and_other_schemes_are_refused() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[lanes]\nlane_url_scheme = \"redis+unix\"\n");
    let home = env.home.display().to_string();
    let e = env.agent_environment("dora");
    assert!(
        e.contains(&format!(
            "OXIDEPM_LANE=redis+unix://{home}/lanes/dora.sock\n"
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!("OXIDEPM_LANE_SOCKET={home}/lanes/dora.sock\n")),
        "{e}"
    );
    let desc: Value = serde_json::from_str(&read(&env.home.join("lanes/dora.json"))).unwrap();
    assert_eq!(desc["lane"], format!("redis+unix://{home}/lanes/dora.sock"));

    // A scheme no agent expects: the daemon does not start, so nothing runs.
    let bad = Env::new();
    bad.daemon_toml("[lanes]\nlane_url_scheme = \"redis\"\n");
    bad.fails(&["start", "--name", "x", "--", "sleep", "100000"]);
    let log = read(&bad.home.join("daemon.log"));
    assert!(log.contains("lane_url_scheme"), "{log}");
    assert!(log.contains("use \"unix\""), "{log}");
    assert!(!bad.run(&["status"]).status.success());
    assert!(!bad.home.join("state.db").exists());
}

/// What every library's transaction and every group read of several
/// entries become in Redis's append-only file (MULTI … EXEC) must be there
/// after a restart of Redis, or a restart forgets acknowledgements and
/// deliveries and agents answer again. Written as the `sys` user, so that
/// what is tested is Redis's replay of the file under the daemon's ACL, not
/// the lane.
#[test]
fn transactions_and_group_reads_written_before_a_redis_restart_are_there_after_it() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[lanes]\nsources = [\"webhook\"]\n");
    env.ok(&[
        "start", "--kind", "agent", "--name", "erin", "--", "sleep", "100000",
    ]);
    let (inbox, outbox) = ("erin:webhook:inbox", "erin:webhook:outbox");
    let mut sys = env.wait(20, "the lanes' Redis", || sys_conn(&env));
    redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg(outbox)
        .arg("*")
        .arg("text")
        .arg("one")
        .cmd("XADD")
        .arg(outbox)
        .arg("*")
        .arg("text")
        .arg("two")
        .query::<()>(&mut sys)
        .unwrap();
    for t in ["a", "b"] {
        redis::cmd("XADD")
            .arg(inbox)
            .arg("*")
            .arg("text")
            .arg(t)
            .query::<String>(&mut sys)
            .unwrap();
    }
    let read = |c: &mut redis::Connection| -> Vec<String> {
        let got: Option<redis::streams::StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("erin")
            .arg("c1")
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg(inbox)
            .arg(">")
            .query(c)
            .unwrap();
        got.into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(read(&mut sys).len(), 2);

    let before = env.pid("oxidepm-redis");
    env.ok(&["restart", "oxidepm-redis"]);
    let mut sys = env.wait(30, "Redis back", || {
        let a = env.daemon_app("oxidepm-redis");
        let back = a["status"] == "online" && a["pid"].as_u64().is_some_and(|p| p as u32 != before);
        back.then(|| sys_conn(&env)).flatten()
    });
    let len =
        |c: &mut redis::Connection| -> usize { redis::cmd("XLEN").arg(outbox).query(c).unwrap() };
    assert_eq!(len(&mut sys), 2, "the transaction's two entries");
    let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg(inbox)
        .arg("erin")
        .query(&mut sys)
        .unwrap();
    assert_eq!(pending.count(), 2, "the two entries read stay delivered");
    assert!(read(&mut sys).is_empty(), "nothing is delivered twice");
}

/// A connection to the lanes' Redis as `sys`, once it serves (it answers
/// LOADING while it reads its files).
fn sys_conn(env: &Env) -> Option<redis::Connection> {
    let pw = Secret::read(&env.home.join("secrets/sys")).ok()?;
    let url = format!("unix://{}", env.home.join("redis/redis.sock").display());
    let mut c = redis::Client::open(url.as_str())
        .ok()?
        .get_connection()
        .ok()?;
    redis::cmd("AUTH")
        .arg("sys")
        .arg(pw.expose())
        .query::<()>(&mut c)
        .ok()?;
    redis::cmd("PING").query::<String>(&mut c).ok()?;
    Some(c)
}
