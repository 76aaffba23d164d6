//! What a client makes `oxidepm mcp` hold: a client that keeps asking but
//! stops reading is stopped by its own full pipe (the server reads no more
//! once a bounded amount of answers waits), loses no answer, and the server
//! stays small; a client that keeps more requests open than the bound gets
//! "busy" at once for the rest, and a cancel frees a request's place.

use crate::harness::{bin, Env};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Raw {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<Value>,
    /// Set free the reading thread: until then it holds every line unread.
    reading: Option<mpsc::Sender<()>>,
}

impl Raw {
    /// `oxidepm mcp` on `env`, initialized; its answers are read only once
    /// `read_answers` is called.
    fn start(env: &Env) -> Raw {
        let mut child = Command::new(bin("oxidepm"))
            .arg("mcp")
            .env("OXIDEPM_HOME", &env.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, answers) = mpsc::channel::<Value>();
        let (go, gate) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(out).lines().map_while(Result::ok);
            // The initialize answer, then nothing until let go.
            if let Some(l) = lines.next() {
                let _ = tx.send(serde_json::from_str(&l).unwrap());
            }
            if gate.recv().is_err() {
                return;
            }
            for line in lines {
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        let mut raw = Raw {
            child,
            stdin,
            answers,
            reading: Some(go),
        };
        raw.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}));
        assert_eq!(raw.next()["id"], 0);
        raw.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        raw
    }

    fn send(&mut self, v: &Value) {
        self.stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn next(&self) -> Value {
        self.answers
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer within 60 s")
    }

    fn read_answers(&mut self) {
        if let Some(go) = self.reading.take() {
            go.send(()).unwrap();
        }
    }

    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn whoami(id: u64) -> Vec<u8> {
    format!(
        "{}\n",
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"whoami","arguments":{}}})
    )
    .into_bytes()
}

#[test]
fn a_client_that_stops_reading_is_stopped_by_its_pipe_and_loses_no_answer() {
    let env = Env::new();
    env.ok(&["ping"]);
    let mut raw = Raw::start(&env);
    nix::fcntl::fcntl(
        raw.stdin.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    // Requests until the server has read none for 2 s: its answers wait
    // unread, so it stopped taking more. Without the bound it reads them
    // all, and this ends at the cap instead.
    const CAP: u64 = 200_000;
    let (mut sent, mut pending): (u64, Vec<u8>) = (0, Vec::new());
    let mut still = Instant::now();
    while sent < CAP && still.elapsed() < Duration::from_secs(2) {
        if pending.is_empty() {
            sent += 1;
            pending = whoami(sent);
        }
        match raw.stdin.write(&pending) {
            Ok(n) => {
                pending.drain(..n);
                still = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the server's stdin: {e}"),
        }
    }
    assert!(
        sent < CAP,
        "the server read {sent} requests while none of its answers was read"
    );
    let peak = raw.peak_rss_kib();
    assert!(
        peak < 32 << 10,
        "peak RSS {peak} KiB with its answers unread"
    );

    // Every request taken is answered once the client reads again: done,
    // or busy (a flood keeps more requests open than the bound).
    nix::fcntl::fcntl(
        raw.stdin.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .unwrap();
    raw.read_answers();
    raw.stdin.write_all(&pending).unwrap();
    let last = sent + 1;
    raw.stdin.write_all(&whoami(last)).unwrap();
    let mut seen = std::collections::HashSet::new();
    while seen.len() < last as usize {
        let Ok(v) = raw.answers.recv_timeout(Duration::from_secs(60)) else {
            let missing: Vec<u64> = (1..=last).filter(|i| !seen.contains(i)).take(20).collect();
            panic!(
                "{} of {last} requests answered; not: {missing:?}",
                seen.len()
            );
        };
        let id = v["id"].as_u64().unwrap_or_else(|| panic!("an answer: {v}"));
        let done = v["result"]["structuredContent"]["class"].is_string();
        assert!(done || v["error"]["code"] == -32000, "{v}");
        assert!(seen.insert(id), "answered twice: {id}");
    }
}

#[test]
fn past_the_bound_of_open_requests_a_request_is_busy_and_a_cancel_frees_a_place() {
    let env = Env::new();
    let script = env.script("quiet", "exec sleep 1000");
    env.ok(&["start", &script, "--name", "quiet"]);
    env.wait_status("quiet", "online");
    let mut raw = Raw::start(&env);
    raw.read_answers();
    let wait = |id: u64| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"wait",
            "arguments":{"app":"quiet","until":"log","pattern":"never printed","timeout_secs":600}}})
    };
    for id in 1..=100 {
        raw.send(&wait(id));
    }
    // The first 64 stay open (8 run, the rest wait for a turn); the other
    // 36 are answered busy at once.
    let mut busy = Vec::new();
    while busy.len() < 36 {
        let v = raw.next();
        assert_eq!(v["error"]["code"], -32000, "{v}");
        busy.push(v["id"].as_u64().unwrap());
    }
    busy.sort();
    assert_eq!(busy, (65..=100).collect::<Vec<_>>());
    // Past the bound a ping is busy too.
    raw.send(&json!({"jsonrpc":"2.0","id":"full","method":"ping"}));
    let full = raw.next();
    assert_eq!(
        (&full["id"], &full["error"]["code"]),
        (&json!("full"), &json!(-32000))
    );
    // An id still open is not taken twice (it would count once).
    raw.send(&wait(2));
    let twice = raw.next();
    assert_eq!(
        (&twice["id"], &twice["error"]["code"]),
        (&json!(2), &json!(-32600)),
        "{twice}"
    );
    // A cancel of an open request frees its place.
    raw.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}));
    // A ping needs no turn among the running calls, only a place.
    raw.send(&json!({"jsonrpc":"2.0","id":"probe","method":"ping"}));
    loop {
        let v = raw.next();
        if v["id"] == "probe" {
            assert!(v["result"].is_object(), "{v}");
            break;
        }
        // The cancelled wait may still answer that it was cancelled.
        assert_eq!(v["id"], 1, "{v}");
    }
}

#[test]
fn subscriptions_hold_connections_up_to_their_share_and_a_call_still_runs() {
    let env = Env::new();
    for name in ["a", "b", "c", "d"] {
        let script = env.script(name, "exec sleep 1000");
        env.ok(&["start", &script, "--name", name]);
    }
    env.wait_status("d", "online");
    let mut raw = Raw::start(&env);
    raw.read_answers();
    let mut ask = |id: &str, method: &str, params: Value| {
        raw.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        let v = raw.next();
        assert_eq!(v["id"], id, "{v}");
        v
    };
    let log = |app: &str| json!({ "uri": format!("oxidepm://apps/{app}/log") });
    // Three apps' logs take the 6 connections subscriptions may hold.
    for app in ["a", "b", "c"] {
        let v = ask(app, "resources/subscribe", log(app));
        assert!(v["result"].is_object(), "{v}");
    }
    let v = ask(
        "events",
        "resources/subscribe",
        json!({"uri":"oxidepm://events"}),
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("E_LIMIT"),
        "{v}"
    );
    // The calls keep their own connections.
    let v = ask(
        "status",
        "tools/call",
        json!({"name":"status","arguments":{}}),
    );
    assert_eq!(
        v["result"]["structuredContent"]["apps"]
            .as_array()
            .unwrap()
            .len(),
        4,
        "{v}"
    );
    // An unsubscribe frees its connections at once.
    let v = ask("un-a", "resources/unsubscribe", log("a"));
    assert!(v["result"].is_object(), "{v}");
    let v = ask(
        "events2",
        "resources/subscribe",
        json!({"uri":"oxidepm://events"}),
    );
    assert!(v["result"].is_object(), "{v}");
    let v = ask("d", "resources/subscribe", log("d"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("E_LIMIT"),
        "{v}"
    );
}
