//! `oxidepm mcp` driven by real MCP clients: the official Python SDK
//! (tests/mcp/session.py) over stdio against a real daemon and real apps.
//! Without the SDK a test is skipped with the reason printed, unless
//! `OXIDEPM_REQUIRE_MCP=1` (test.sh sets it and installs the SDK).

use crate::harness::{bin, read, strs, Env};
use oxidepm_testkit::words;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Whether the Python SDK is there (a skip is printed when not).
pub fn have_sdk() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok && std::env::var("OXIDEPM_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("python3 has no MCP SDK (pip install mcp) and OXIDEPM_REQUIRE_MCP=1");
    }
    if !ok {
        eprintln!("skipped: python3 has no MCP SDK (pip install mcp)");
    }
    ok
}

/// The driver script.
pub fn driver() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/session.py").to_string()
}

/// One SDK session running `steps`, its printed lines as they come.
pub struct Session {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Session {
    /// Starts the driver against `env`'s home with `steps` and extra
    /// arguments for `oxidepm mcp`.
    pub fn start(env: &Env, steps: Value, args: &[&str]) -> Session {
        let mut child = Command::new("python3")
            .arg(driver())
            .arg(bin("oxidepm"))
            .arg(steps.to_string())
            .args(args)
            .env("OXIDEPM_HOME", &env.home)
            .env_remove("OXIDEPM_SOCKET")
            .env_remove("OXIDEPM_ACTOR")
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "unparsed": line }));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Session { child, lines }
    }

    /// The next printed line (a session that prints nothing for two
    /// minutes is hung).
    pub fn next(&mut self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("the MCP session printed its next line")
    }

    /// Every line up to `done`, the step results in step order.
    pub fn finish(mut self) -> Vec<Value> {
        let mut steps = Vec::new();
        loop {
            let v = self.next();
            assert!(v.get("unparsed").is_none(), "{v}");
            if v["done"] == true {
                break;
            }
            if v.get("step").is_some() && v.get("progress").is_none() {
                steps.push(v);
            }
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the driver failed");
        steps
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `steps` to the end and returns their results.
pub fn run(env: &Env, steps: Value) -> Vec<Value> {
    Session::start(env, steps, &[]).finish()
}

fn call(tool: &str, args: Value) -> Value {
    json!({ "op": "call", "tool": tool, "args": args })
}

/// A `tick` a second on stdout, for ever.
fn ticker(env: &Env, name: &str) {
    env.ok(&[
        "start",
        "--name",
        name,
        "--",
        "sh",
        "-c",
        "while :; do echo tick; sleep 1; done",
    ]);
}

#[test]
fn every_tool_is_listed_with_a_schema_and_works_against_a_real_daemon() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    ticker(&env, "web");
    let pid = env.pid("web");
    let r = run(
        &env,
        json!([
            { "op": "tools" },
            call("whoami", json!({})),
            call("status", json!({})),
            call("show", json!({ "app": "web" })),
            call("logs", json!({ "app": "web", "lines": 5 })),
            call("restart", json!({ "app": "web" })),
            call("wait", json!({ "app": "web", "until": "online" })),
            call("signal", json!({ "app": "web", "signal": "CONT" })),
            call("reset", json!({ "app": "web" })),
            call("stop", json!({ "app": "web" })),
            call("wait", json!({ "app": "web", "until": "exited" })),
            call("start", json!({ "app": "web" })),
            call("reload", json!({ "app": "web" })),
            call("events", json!({ "app": "web" })),
            { "op": "resources" },
            { "op": "read", "uri": "oxidepm://apps/web/log" },
        ]),
    );
    let tools = r[0]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for want in [
        "whoami",
        "status",
        "show",
        "logs",
        "start",
        "stop",
        "restart",
        "reload",
        "signal",
        "reset",
        "define",
        "wait",
        "events",
        "lane_read",
        "lane_send",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    for t in tools {
        assert_eq!(t["schema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
    }
    for step in &r[1..14] {
        assert_eq!(step["is_error"], false, "{step}");
        assert!(step["structured"].is_object(), "{step}");
    }
    assert_eq!(r[1]["structured"]["actor"], "ai:agent");
    assert_eq!(r[1]["structured"]["socket"], "agent");
    let app = &r[2]["structured"]["apps"][0];
    assert_eq!(app["name"], "web");
    assert_eq!(app["pid"], pid);
    assert!(r[4]["structured"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["line"].as_str().unwrap().ends_with("tick")));
    assert_ne!(env.pid("web"), pid, "restarted");
    assert_eq!(r[6]["structured"]["reached"], true);
    assert_eq!(r[10]["structured"]["reached"], true);
    let uris = r[14]["uris"].as_array().unwrap();
    assert!(
        uris.contains(&json!("oxidepm://apps/web/log"))
            && uris.contains(&json!("oxidepm://events"))
    );
    assert!(r[15]["text"].as_str().unwrap().contains("tick"));

    // Each call is a request audited with its actor and the tool.
    let audit = env.ok(&["audit", "--actor", "ai"]);
    // Reads are logged, not audited, as from the CLI; every change is a row.
    for op in ["restart", "stop", "start", "signal", "reset", "reload"] {
        let row = audit
            .lines()
            .find(|l| l.contains(&format!(" {op} via mcp:{op} ")))
            .unwrap_or_else(|| panic!("{op} via mcp:{op} in:\n{audit}"));
        assert!(row.contains("ai:agent"), "{row}");
    }
}

#[test]
fn an_ai_is_refused_a_protected_stop_and_a_define_as_tool_errors_and_nothing_changes() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 100000")));
    let db = env.pid("db");
    let spec = json!({ "name": "new", "command": "sleep", "args": ["100000"] });
    let r = run(
        &env,
        json!([
            call("stop", json!({ "app": "db" })),
            call("define", json!({ "apps": [spec] })),
            call("whoami", json!({})),
        ]),
    );
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    let text = r[0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("E_PROTECTED") && text.contains("db"),
        "{text}"
    );
    assert_eq!(r[1]["is_error"], true);
    let text = r[1]["text"].as_str().unwrap();
    assert!(
        text.starts_with("E_POLICY_DENIED") && text.contains("define"),
        "{text}"
    );
    assert_eq!(r[1]["structured"]["error"]["code"], "E_POLICY_DENIED");
    // The CLI on agent.sock is told the same.
    let o = env
        .cmd()
        .env("OXIDEPM_SOCKET", env.home.join("agent.sock"))
        .args(["start", "--name", "new", "--", "sleep", "100000"])
        .output()
        .unwrap();
    let cli = String::from_utf8_lossy(&o.stderr);
    let daemon_text = text.trim_start_matches("E_POLICY_DENIED: ");
    assert!(cli.contains(daemon_text), "{cli} / {daemon_text}");
    assert_eq!(r[2]["is_error"], false, "the session goes on");
    assert_eq!(env.pid("db"), db, "db keeps its pid");
    assert!(
        env.status().iter().all(|a| a["name"] != "new"),
        "nothing defined"
    );
}

#[test]
fn a_define_succeeds_when_a_person_granted_manage_to_an_agent() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    env.daemon_toml(
        "agents_share_uid = true\n[agents.builder]\ntier = \"manage\"\napps = [\"made\"]\n",
    );
    let spec = json!({ "name": "made", "command": "sleep", "args": ["100000"] });
    let (r, _) = inside_agent(
        &env,
        "builder",
        json!([
            call("whoami", json!({})),
            call("define", json!({ "apps": [spec] })),
            call("start", json!({ "app": "made" })),
            call("wait", json!({ "app": "made", "until": "online" })),
        ]),
    );
    for s in &r {
        assert_eq!(s["is_error"], false, "{s}");
    }
    assert_eq!(r[0]["structured"]["tier"], "manage");
    let app = env.app("made");
    assert_eq!(app["status"], "online");
    assert_eq!(app["defined_by"], "ai:builder");
}

/// Runs `steps` in a session started by agent app `agent`, then (in the
/// same tree) `oxidepm mcp --socket daemon.sock`; returns the steps'
/// results and what the second printed.
fn inside_agent(env: &Env, agent: &str, steps: Value) -> (Vec<Value>, String) {
    let out = env.path(&format!("{agent}.jsonl"));
    let refused = env.path(&format!("{agent}-refused.txt"));
    let cmd = format!(
        "python3 {} {} '{}' > {} 2>&1; {} mcp --socket {} < /dev/null > {} 2>&1; echo finished >> {}; exec sleep 100000",
        driver(),
        bin("oxidepm").display(),
        steps,
        out.display(),
        bin("oxidepm").display(),
        env.home.join("daemon.sock").display(),
        refused.display(),
        out.display(),
    );
    env.ok(&[
        "start", "--kind", "agent", "--name", agent, "--", "sh", "-c", &cmd,
    ]);
    env.wait(120, "the session inside the agent", || {
        read(&out).contains("finished")
    });
    let lines: Vec<Value> = read(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("step").is_some() && l.get("progress").is_none())
        .collect();
    assert_eq!(
        lines.len(),
        steps.as_array().unwrap().len(),
        "{}",
        read(&out)
    );
    (lines, read(&refused))
}

#[test]
fn wait_sees_a_line_that_comes_later_times_out_with_status_and_lines_and_ends_when_cancelled() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    let flag = env.path("go");
    let body = format!(
        "echo starting; while [ ! -e {} ]; do sleep 0.2; done; echo ready-now; exec sleep 100000",
        flag.display()
    );
    let script = env.script("late", &body);
    env.ok(&["start", "--name", "late", "--", &script]);
    env.wait(10, "the app's first line", || {
        env.ok(&["logs", "late"]).contains("starting")
    });
    let mut s = Session::start(
        &env,
        json!([
            call("wait", json!({ "app": "late", "until": "log", "pattern": "ready-now", "timeout_secs": 120 })),
            call("wait", json!({ "app": "late", "until": "log", "pattern": "never-printed", "timeout_secs": 2 })),
            { "op": "cancel", "tool": "wait", "args": { "app": "late", "until": "log", "pattern": "never-printed", "timeout_secs": 600 } },
            call("whoami", json!({})),
        ]),
        // One call at a time: the whoami after the cancelled wait runs
        // only once that wait has really ended.
        &["--max-calls", "1"],
    );
    // The line is written only once the wait has said it is waiting.
    let first = s.next();
    assert_eq!(first["init"]["server"], "oxidepm", "{first}");
    let p = s.next();
    assert_eq!(p["step"], 0);
    assert!(p["progress"].is_number(), "{p}");
    std::fs::write(&flag, "").unwrap();
    let r = s.finish();
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert_eq!(r[0]["structured"]["reached"], true);
    assert!(r[0]["structured"]["found"]["line"]
        .as_str()
        .unwrap()
        .ends_with("ready-now"));
    assert!(r[0]["progress_count"].as_u64().unwrap() >= 1);

    let t = &r[1]["structured"];
    assert_eq!(t["reached"], false, "{t}");
    assert_eq!(t["timed_out"], true);
    assert_eq!(t["status"]["name"], "late");
    assert_eq!(t["status"]["status"], "online");
    let last: Vec<&str> = t["last_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert!(last.iter().any(|l| l.ends_with("ready-now")), "{last:?}");
    assert!(r[1]["progress_count"].as_u64().unwrap() >= 1);

    assert_eq!(r[2]["cancelled"], true);
    assert!(r[2].get("finished").is_none());
    assert_eq!(
        r[3]["is_error"], false,
        "answered after the cancelled wait: {}",
        r[3]
    );
}

#[test]
fn a_log_search_finds_a_line_in_a_rotated_file_within_the_result_bound() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    let body = "echo needle-old; \
        awk 'BEGIN { for (i = 1; i <= 60000; i++) printf \"filler %06d ..........................................\\n\", i }'; \
        echo needle-new; exec sleep 100000";
    let script = env.script("n", body);
    let spec = json!({"apps": [{ "name": "n", "script": script, "log_max_size": 1 << 20, "log_files_kept": 5 }]});
    let file = env.path("n.json");
    std::fs::write(&file, spec.to_string()).unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.wait(60, "the second needle", || {
        env.ok(&["logs", "n", "-n", "1"]).contains("needle-new")
    });
    assert!(env.home.join("logs/n-out.log.3").exists(), "rotated");
    let r = Session::start(
        &env,
        json!([
            call("logs", json!({ "app": "n", "search": "needle-old" })),
            call(
                "logs",
                json!({ "app": "n", "search": "filler", "lines": 2000 })
            ),
            call(
                "logs",
                json!({ "app": "n", "search": "needle-n.w", "regex": true, "context": 1 })
            ),
        ]),
        &["--max-result-bytes", "32768"],
    )
    .finish();
    let lines = r[0]["structured"]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{}", r[0]);
    assert!(lines[0]["line"].as_str().unwrap().ends_with("needle-old"));
    let big = &r[1]["structured"];
    assert_eq!(big["truncated"], true, "{big}");
    assert!(big["more"].as_str().unwrap().contains("fewer"));
    assert!(serde_json::to_vec(big).unwrap().len() <= 32768);
    let ctx = r[2]["structured"]["lines"].as_array().unwrap();
    assert_eq!(ctx.len(), 2, "{ctx:?}");
    assert!(ctx[1]["line"].as_str().unwrap().ends_with("needle-new"));
}

#[test]
fn with_the_daemon_killed_mid_call_the_tool_says_so_and_the_server_goes_on() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    ticker(&env, "web");
    let mut s = Session::start(
        &env,
        json!([
            call("wait", json!({ "app": "web", "until": "log", "pattern": "never-printed", "timeout_secs": 120 })),
            call("status", json!({})),
            { "op": "tools" },
        ]),
        &[],
    );
    let _init = s.next();
    let p = s.next();
    assert!(p["progress"].is_number(), "{p}");
    env.kill_daemon();
    let r = s.finish();
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert_eq!(r[0]["structured"]["error"]["code"], "E_UNAVAILABLE");
    let t = r[1]["text"].as_str().unwrap();
    assert!(
        r[1]["is_error"] == true && t.contains("no daemon answers"),
        "{t}"
    );
    assert!(t.contains("never starts one"), "{t}");
    assert!(
        !r[2]["tools"].as_array().unwrap().is_empty(),
        "still serving"
    );
    assert!(
        std::os::unix::net::UnixStream::connect(env.home.join("daemon.sock")).is_err(),
        "no daemon was started"
    );
}

#[test]
fn inside_an_agent_s_tree_the_server_is_that_agent_and_cannot_read_another_s_logs() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    env.ok(&[
        "start",
        "--kind",
        "agent",
        "--name",
        "other",
        "--",
        "sh",
        "-c",
        "echo other-secret; exec sleep 100000",
    ]);
    let (r, why) = inside_agent(
        &env,
        "helper",
        json!([
            call("whoami", json!({})),
            call("logs", json!({ "app": "other" })),
            call("logs", json!({ "app": "helper" })),
        ]),
    );
    assert_eq!(r[0]["structured"]["actor"], "ai:helper", "{}", r[0]);
    assert_eq!(r[1]["is_error"], true, "{}", r[1]);
    assert!(!r[1]["text"].as_str().unwrap().contains("other-secret"));
    assert_eq!(r[2]["is_error"], false, "its own log: {}", r[2]);
    // A person's socket from inside the agent's tree is refused outright.
    assert!(
        why.contains("refusing --socket") && why.contains("ai:helper"),
        "{why}"
    );
}

#[test]
fn status_names_the_ports_an_app_listens_on() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    // The listener is a child of the app's shell: the app's tree counts.
    let cmd = format!("python3 -m http.server {port} --bind 127.0.0.1; true");
    env.ok(&["start", "--name", "srv", "--", "sh", "-c", &cmd]);
    env.wait(30, "the app to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let r = run(&env, json!([call("status", json!({ "app": "srv" }))]));
    let app = &r[0]["structured"]["apps"][0];
    assert_eq!(app["name"], "srv", "{app}");
    assert_eq!(app["listening"], json!([port]), "{app}");
}

#[test]
fn a_port_opened_after_the_first_status_is_seen_by_the_next() {
    if !have_sdk() {
        return;
    }
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    // Listens only once told to (SIGUSR1), so that one session sees the
    // app first without a port and then with it.
    let cmd = format!(
        "trap 'PYTHONUNBUFFERED=1 python3 -m http.server {port} --bind 127.0.0.1' USR1; \
         while :; do sleep 0.1; done"
    );
    env.ok(&["start", "--name", "late", "--", "sh", "-c", &cmd]);
    env.wait_status("late", "online");
    let r = run(
        &env,
        json!([
            call("status", json!({})),
            call("signal", json!({ "app": "late", "signal": "USR1" })),
            call(
                "wait",
                json!({ "app": "late", "until": "log", "pattern": "Serving HTTP",
                "after": "10m", "timeout_secs": 60 })
            ),
            call("status", json!({ "app": "late" })),
        ]),
    );
    assert_eq!(
        r[0]["structured"]["apps"][0]["listening"],
        json!([]),
        "{}",
        r[0]
    );
    assert_eq!(r[2]["structured"]["reached"], true, "{}", r[2]);
    assert_eq!(
        r[3]["structured"]["apps"][0]["listening"],
        json!([port]),
        "{}",
        r[3]
    );
}

#[test]
fn an_agent_reads_its_inbox_and_writes_its_outbox_through_its_own_lane() {
    if !have_sdk() || crate::harness::shared_lanes() {
        return;
    }
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n");
    crate::lanes::start_agents(&env, &["other"]);
    // A message comes into helper's webhook inbox once its lane is made,
    // while its session waits for one.
    let env = std::sync::Arc::new(env);
    let writer = {
        let env = env.clone();
        std::thread::spawn(move || {
            let mut sys = crate::lanes::host_conn(&env, "sys");
            env.wait(60, "helper's inbox and group", || {
                crate::lanes::run(&mut sys, &["XINFO", "GROUPS", "helper:webhook:inbox"])
                    .is_ok_and(|v| format!("{v:?}").contains("helper"))
            });
            crate::lanes::run(
                &mut sys,
                &[
                    "XADD",
                    "helper:webhook:inbox",
                    "*",
                    "channel",
                    "support",
                    "text",
                    "hello helper",
                ],
            )
            .unwrap();
        })
    };
    let (r, _) = inside_agent(
        &env,
        "helper",
        json!([
            call(
                "lane_read",
                json!({ "source": "webhook", "block_secs": 30 })
            ),
            call("lane_read", json!({ "source": "webhook" })),
            call(
                "lane_send",
                json!({ "source": "webhook", "fields": { "channel": "support", "text": "hi back" } })
            ),
            call("lane_read", json!({ "source": "../other" })),
        ]),
    );
    let got = &r[0]["structured"]["entries"];
    assert_eq!(got.as_array().map(Vec::len), Some(1), "{}", r[0]);
    assert_eq!(got[0]["fields"]["text"], "hello helper");
    assert_eq!(r[0]["structured"]["acked"], true);
    assert_eq!(
        r[1]["structured"]["entries"].as_array().map(Vec::len),
        Some(0),
        "acknowledged, not read twice: {}",
        r[1]
    );
    writer.join().unwrap();
    let mut sys = crate::lanes::host_conn(&env, "sys");
    let id = r[2]["structured"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!id.is_empty(), "{}", r[2]);
    assert_eq!(r[3]["is_error"], true, "{}", r[3]);
    // The entry is in helper's outbox, nowhere else; nothing is pending.
    let out = crate::lanes::run(&mut sys, &["XRANGE", "helper:webhook:outbox", &id, &id]).unwrap();
    assert!(format!("{out:?}").contains("hi back"), "{out:?}");
    let pending =
        crate::lanes::run(&mut sys, &["XPENDING", "helper:webhook:inbox", "helper"]).unwrap();
    assert!(
        format!("{pending:?}").starts_with("array([int(0)"),
        "{pending:?}"
    );
    // Outside an agent there is no lane.
    let r = run(
        &env,
        json!([call("lane_read", json!({ "source": "webhook" }))]),
    );
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert!(
        r[0]["text"].as_str().unwrap().contains("E_NO_LANE"),
        "{}",
        r[0]
    );
}
