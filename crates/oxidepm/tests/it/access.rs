//! Layer 2: who is asking, agent.sock limits, tiers, protected apps,
//! adapters and the audit trail.

use crate::harness::{alive, bin, read, strs, Env, Raw};
use oxidepm_testkit::words;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn whoami_cli(env: &Env, socket: Option<&str>, claim: Option<&str>) -> String {
    let mut c = env.cmd();
    if let Some(s) = socket {
        c.env("OXIDEPM_SOCKET", env.home.join(s));
    }
    if let Some(cl) = claim {
        c.env("OXIDEPM_ACTOR", cl);
    }
    let o = c.args(["whoami", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    format!(
        "{}:{} {} {}",
        v["class"].as_str().unwrap(),
        v["label"].as_str().unwrap(),
        v["socket"].as_str().unwrap(),
        v["tier"].as_str().unwrap()
    )
}

fn whoami_raw(env: &Env, socket: &str, claim: Option<&str>) -> String {
    let mut r = env.raw(socket);
    let mut req = json!({"id": 1, "op": "whoami"});
    if let Some(c) = claim {
        req["claim"] = json!(c);
    }
    let v = r.call(req)["result"].clone();
    format!(
        "{}:{} {} {}",
        v["class"].as_str().unwrap(),
        v["label"].as_str().unwrap(),
        v["socket"].as_str().unwrap(),
        v["tier"].as_str().unwrap()
    )
}

#[test]
fn the_claim_table_on_both_sockets_with_the_cli_and_a_raw_client() {
    let env = Env::new();
    env.daemon_pid();
    let l32 = "x".repeat(32);
    let l33 = "x".repeat(33);
    let h32 = format!("human:{l32}");
    let h33 = format!("human:{l33}");
    let rows: Vec<(&str, Option<&str>, String)> = vec![
        ("daemon.sock", None, "human:cli daemon admin".into()),
        (
            "daemon.sock",
            Some("human:alice"),
            "human:alice daemon admin".into(),
        ),
        (
            "daemon.sock",
            Some("ai:assistant"),
            "ai:assistant daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("adapter:chat"),
            "ai:invalid-claim daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("system:crash"),
            "ai:invalid-claim daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("human:"),
            "ai:invalid-claim daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("human:a"),
            "human:a daemon admin".into(),
        ),
        (
            "daemon.sock",
            Some(&h32),
            format!("human:{l32} daemon admin"),
        ),
        (
            "daemon.sock",
            Some(&h33),
            "ai:invalid-claim daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("human:bad/char"),
            "ai:invalid-claim daemon control".into(),
        ),
        (
            "daemon.sock",
            Some("nonsense"),
            "ai:invalid-claim daemon control".into(),
        ),
        ("agent.sock", None, "ai:agent agent control".into()),
        (
            "agent.sock",
            Some("human:root"),
            "ai:agent agent control".into(),
        ),
        (
            "agent.sock",
            Some("ai:helper"),
            "ai:helper agent control".into(),
        ),
        (
            "agent.sock",
            Some("adapter:chat"),
            "ai:agent agent control".into(),
        ),
        ("agent.sock", Some(&h33), "ai:agent agent control".into()),
    ];
    for (sock, claim, want) in rows {
        assert_eq!(whoami_raw(&env, sock, claim), want, "raw {sock} {claim:?}");
        assert_eq!(
            whoami_cli(&env, Some(sock), claim),
            want,
            "cli {sock} {claim:?}"
        );
    }
}

#[test]
fn agent_socket_limits_connections_line_length_and_idle_time() {
    let env = Env::new();
    // One peer may hold every slot here, to see the socket's own cap.
    env.daemon_toml("agent_idle_timeout_secs = 1\nagent_max_connections_per_peer = 32\n");
    env.daemon_pid();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.home.join("agent.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // 32 connections are served; the 33rd is closed at once.
    let mut conns: Vec<Raw> = (0..32).map(|_| env.raw("agent.sock")).collect();
    for c in conns.iter_mut() {
        assert_eq!(c.call(json!({"id": 1, "op": "ping"}))["ok"], true);
    }
    let mut extra = env.raw("agent.sock");
    assert!(extra.is_refused(), "the 33rd connection must be closed");
    // The main socket still answers.
    assert_eq!(env.json(&["ping"])["pong"], true);
    drop(conns);

    // A line of 1 MiB + 1 byte, once the daemon has seen the 32 go (a new
    // connection is served again).
    env.wait(10, "agent.sock to serve again", || {
        !env.raw("agent.sock").is_refused()
    });
    let mut big = env.raw("agent.sock");
    let line = "x".repeat((1 << 20) + 1);
    let _ = big.stream.write_all(line.as_bytes());
    let _ = big.stream.write_all(b"\n");
    let r = big.recv().expect("an error reply");
    assert_eq!(r["error"]["code"], "E_TOO_LARGE");
    assert!(big.recv().is_none(), "closed after E_TOO_LARGE");

    // An idle connection is closed (1 s here through daemon.toml).
    let mut idle = env.raw("agent.sock");
    let t = Instant::now();
    assert!(idle.recv().is_none());
    assert!(t.elapsed() >= Duration::from_millis(900));
    assert_eq!(
        whoami_raw(&env, "agent.sock", None),
        "ai:agent agent control"
    );
}

#[test]
fn a_client_that_never_reads_is_dropped_while_others_are_served() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "chatty",
        "--restart",
        "never",
        "--",
        "sh",
        "-c",
        "seq 1 300000",
    ]);
    env.wait(30, "the output", || {
        read(&env.home.join("logs/chatty-out.log")).lines().count() == 300000
    });
    let mut stuck = std::os::unix::net::UnixStream::connect(env.home.join("agent.sock")).unwrap();
    for i in 0..20 {
        let req = json!({"id": i, "op": "logs", "target": "chatty", "lines": 300000});
        stuck.write_all(format!("{req}\n").as_bytes()).unwrap();
    }
    // Meanwhile the daemon answers others at once.
    let t = Instant::now();
    for _ in 0..5 {
        assert_eq!(
            whoami_raw(&env, "agent.sock", None),
            "ai:agent agent control"
        );
        assert_eq!(env.json(&["ping"])["pong"], true);
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    // The daemon gives up on a reply unread for 10 s and closes the
    // connection; seen without reading, which would unblock its writes.
    env.wait(30, "the daemon to drop the stuck client", || {
        peer_closed(&stuck)
    });
    // The daemon gave up on it: draining what was buffered ends in EOF.
    stuck
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let mut total = 0usize;
    loop {
        match stuck.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => total += n,
            // Closed with requests of ours still unread: reset, also closed.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the connection was not closed ({e}) after {total} bytes"),
        }
    }
    assert!(total < 20 * 300000 * 10, "it did not send everything");
}

/// Whether the other end of `s` is closed, seen by poll(2) without
/// reading anything.
fn peer_closed(s: &std::os::unix::net::UnixStream) -> bool {
    oxidepm_sys::poll::hung_up(s)
}

/// Starts an app of `kind` that runs the CLI with `args` (and a claim)
/// from inside its own process tree, writing the JSON answer to a file.
fn run_inside(env: &Env, name: &str, kind: &str, claim: Option<&str>, args: &str) -> Value {
    let out = env.path(&format!("{name}.out"));
    let err = env.path(&format!("{name}.err"));
    let claim = claim
        .map(|c| format!("OXIDEPM_ACTOR={c} "))
        .unwrap_or_default();
    let script = format!(
        "{claim}{} {args} --json > {} 2> {}; sleep 1000",
        bin("oxidepm").display(),
        out.display(),
        err.display()
    );
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    env.ok(&[
        "start", "--name", name, "--kind", kind, "--env", &home, "--", "sh", "-c", &script,
    ]);
    env.wait(20, "the inner CLI", || {
        !read(&out).is_empty() || !read(&err).is_empty()
    });
    let text = read(&out);
    if text.is_empty() {
        return json!({"stderr": read(&err)});
    }
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_cli_inside_an_adapter_or_agent_is_that_adapter_or_agent() {
    let env = Env::new();
    env.daemon_toml(
        "agents_share_uid = true\n[adapters.chat]\ntier = \"control\"\napps = [\"web\"]\n",
    );
    let v = run_inside(&env, "chat", "adapter", Some("human:root"), "whoami");
    assert_eq!(
        (v["class"].as_str(), v["label"].as_str()),
        (Some("adapter"), Some("chat")),
        "{v}"
    );
    assert_eq!(v["tier"], "control");
    let v = run_inside(&env, "alice", "agent", None, "whoami");
    assert_eq!(
        (v["class"].as_str(), v["label"].as_str()),
        (Some("ai"), Some("alice")),
        "{v}"
    );
    let v = run_inside(&env, "bob", "agent", Some("human:root"), "whoami");
    assert_eq!(v["label"], "bob", "{v}");
    assert_eq!(v["class"], "ai", "{v}");
    // A human-defined ordinary app is whoever runs it (code that runs as you is you).
    let v = run_inside(&env, "plain", "app", None, "whoami");
    assert_eq!(v["class"], "human", "{v}");
}

#[test]
fn an_adapter_stays_inside_its_grant_and_what_it_defines_is_never_more_trusted() {
    let env = Env::new();
    env.daemon_toml("[adapters.chat]\ntier = \"manage\"\napps = [\"web\", \"@bots\"]\n");
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "db", "--", "sleep", "1000"]);
    let db = env.pid("db");
    let v = run_inside(&env, "chat", "adapter", None, "stop db");
    assert!(
        v["stderr"].as_str().unwrap().contains("E_POLICY_DENIED"),
        "{v}"
    );
    assert!(alive(db));
    let v = run_inside(&env, "chat2", "adapter", None, "stop web db");
    assert!(
        v["stderr"].as_str().unwrap().contains("E_POLICY_DENIED"),
        "{v}"
    );
    assert_eq!(env.app("web")["status"], "online", "refused whole");
    // An app the adapter defines runs the CLI as the adapter, not as a human.
    let inner = env.path("helper.out");
    let script = format!(
        "OXIDEPM_HOME={} {} start --name helper --tag bots -- sh -c '{} whoami --json > {}; sleep 1000'; sleep 1000",
        env.home.display(),
        bin("oxidepm").display(),
        bin("oxidepm").display(),
        inner.display()
    );
    env.daemon_toml("[adapters.chat]\ntier = \"manage\"\napps = [\"web\", \"@bots\"]\n[adapters.maker]\ntier = \"manage\"\napps = [\"@bots\"]\n");
    env.ok(&["kill"]);
    env.ok(&[
        "start", "--name", "maker", "--kind", "adapter", "--", "sh", "-c", &script,
    ]);
    env.wait(20, "helper's answer", || !read(&inner).is_empty());
    let v: Value = serde_json::from_str(&read(&inner)).unwrap();
    assert_eq!(
        format!(
            "{}:{}",
            v["class"].as_str().unwrap(),
            v["label"].as_str().unwrap()
        ),
        "adapter:maker"
    );
    let ev = env.events("helper");
    assert!(
        ev.iter()
            .any(|e| e["kind"] == "defined" && e["actor"] == "adapter:maker"),
        "{ev:?}"
    );
    let rows = env.json(&["audit", "--actor", "adapter:chat"]);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["outcome"] == "E_POLICY_DENIED" && r["op"] == "stop"),
        "{rows}"
    );
    // `chat2` has no grant at all: it may only read.
    let rows = env.json(&["audit", "--actor", "adapter:chat2"]);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["outcome"] == "E_POLICY_DENIED"),
        "{rows}"
    );
}

fn as_ai(env: &Env, args: &[&str]) -> std::process::Output {
    env.cmd()
        .env("OXIDEPM_ACTOR", "ai:assistant")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn protected_apps_and_tiers_for_an_ai() {
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 1000")));
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    let db = env.pid("db");
    let web = env.pid("web");

    let o = as_ai(&env, &["stop", "db"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("E_PROTECTED") && err.contains("ai:assistant") && err.contains("db"),
        "{err}"
    );
    assert_eq!(env.pid("db"), db);

    let o = as_ai(&env, &["stop", "all"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("E_PROTECTED"));
    assert_eq!(env.pid("web"), web, "refused whole: web untouched");

    let o = as_ai(&env, &["start", "--name", "new", "--", "sleep", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("E_POLICY_DENIED") && err.contains("define"),
        "{err}"
    );
    assert!(env.status().iter().all(|a| a["name"] != "new"));

    // Control of an unprotected app is allowed, and credited to the AI.
    assert!(as_ai(&env, &["restart", "web"]).status.success());
    assert!(env
        .events("web")
        .iter()
        .any(|e| e["kind"] == "restarted" && e["actor"] == "ai:assistant"));

    // Environment values are redacted for an AI.
    env.ok(&strs(&words(
        "start --name sec --env TOKEN=hunter2 -- sleep 1000",
    )));
    let o = as_ai(&env, &["show", "sec", "--json"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        !text.contains("hunter2") && text.contains("TOKEN"),
        "{text}"
    );
    assert!(env.ok(&["show", "sec", "--json"]).contains("hunter2"));

    let rows = env.json(&["audit", "--actor", "ai:assistant"]);
    let outcomes: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["op"].as_str().unwrap(),
                r["outcome"].as_str().unwrap()
            )
        })
        .collect();
    for want in ["stop E_PROTECTED", "define E_POLICY_DENIED", "restart ok"] {
        assert!(
            outcomes.iter().any(|o| o == want),
            "{want} missing from {outcomes:?}"
        );
    }
    let rows = env.json(&["audit", "--app", "db"]);
    assert!(rows.as_array().unwrap().iter().all(|r| r["apps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "db")));
    assert!(!rows.as_array().unwrap().is_empty());
}

#[test]
fn a_double_forked_descendant_of_the_daemon_is_an_ai() {
    let env = Env::new();
    let out = env.path("orphan.out");
    let script = format!(
        "setsid sh -c 'sleep 0.5; OXIDEPM_HOME={} {} whoami --json > {}' & sleep 0.2; exit 0",
        env.home.display(),
        bin("oxidepm").display(),
        out.display()
    );
    // Without cgroups (the sessions fallback): a process that left the
    // app's session is found by nothing but its parent, the daemon. (With
    // a cgroup it is the app's; see containment.rs.)
    let o = env
        .cmd()
        .env("OXIDEPM_CGROUP_ROOT", "none")
        .args([
            "start",
            "--name",
            "forker",
            "--restart",
            "never",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    env.wait(20, "the orphan's answer", || !read(&out).is_empty());
    let v: Value = serde_json::from_str(&read(&out)).unwrap();
    assert_eq!(v["class"], "ai", "{v}");
}

#[test]
fn the_front_end_a_request_names_is_in_its_audit_row_and_grants_nothing() {
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 1000")));
    let mut raw = env.raw("agent.sock");
    // A `via` is a word for the audit row, never a way around the gate.
    let r = raw.call(json!({"id": 1, "op": "stop", "target": "db", "via": "mcp:stop"}));
    assert_eq!(r["error"]["code"], "E_PROTECTED", "{r}");
    let r = raw.call(json!({"id": 2, "op": "stop", "target": "db", "via": "mcp stop; DROP"}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("via must be"),
        "{r}"
    );
    let long = "m".repeat(65);
    let r = raw.call(json!({"id": 3, "op": "stop", "target": "db", "via": long}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    assert_eq!(env.app("db")["status"], "online");

    let rows = env.json(&["audit", "--actor", "ai"]);
    let rows = rows.as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["op"] == "stop" && r["via"] == "mcp:stop" && r["outcome"] == "E_PROTECTED"),
        "{rows:?}"
    );
    // The CLI's own rows name no front end.
    assert!(env
        .json(&["audit", "--actor", "human"])
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r.get("via").is_none()));
    let text = env.ok(&["audit", "--actor", "ai"]);
    assert!(text.contains("stop via mcp:stop"), "{text}");
}
