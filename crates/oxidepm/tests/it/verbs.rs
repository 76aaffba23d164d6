//! The daily verbs: reload, signal, reset, scale and `instances = N`,
//! periodic jobs, and an app waiting to restart.

use crate::harness::{alive, read, Env};
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A server that listens with SO_REUSEPORT (so two of it can serve one
/// port) and answers each connection with its pid. It reads `mode` in its
/// directory at start: `good` listens and then writes `ready.<pid>`, which
/// is what its health check asks; anything else never listens. On SIGTERM
/// it serves what is queued before it closes.
const SERVER: &str = r#"
import os, select, signal, socket, sys, time
port, d = int(sys.argv[1]), sys.argv[2]
if open(os.path.join(d, "mode")).read().strip() != "good":
    while True:
        time.sleep(1)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", port))
s.listen(128)
open(os.path.join(d, "ready.%d" % os.getpid()), "w").close()
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while True:
    r, _, _ = select.select([s], [], [], 0.05)
    if r:
        c, _ = s.accept()
        c.settimeout(2)
        try:
            c.recv(1024)
            c.sendall(b"HTTP/1.0 200 OK\r\n\r\n%d" % os.getpid())
        except OSError:
            pass
        c.close()
    elif stop:
        break
s.close()
"#;

/// The server as app `web` on `port`, with a command check that asks the
/// very process checked (`OXIDEPM_PID`) whether it is ready.
fn start_server(env: &Env, port: u16) {
    let dir = env.dir.path().display().to_string();
    std::fs::write(env.path("server.py"), SERVER).unwrap();
    std::fs::write(env.path("mode"), "good").unwrap();
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        format!(
            r#"[[apps]]
name = "web"
script = "python3"
args = ["{dir}/server.py", "{port}", "{dir}"]
kill_timeout = "5s"
[apps.health]
command = ["sh", "-c", "test -f {dir}/ready.$OXIDEPM_PID"]
interval = "100ms"
timeout = "1s"
retries = 3
start_period = "10s"
"#
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.wait(60, "web healthy", || {
        env.daemon_app("web")["health"] == "healthy"
    });
}

/// What a client polling the port saw: the pid of each answer, and how
/// many connections were refused (nothing listening).
#[derive(Default)]
struct Seen {
    pids: Vec<u32>,
    refused: usize,
    other_errors: Vec<String>,
}

/// Polls the port, one connection after the other, until told to stop.
fn poll(port: u16, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    while !stop.load(Ordering::Relaxed) {
        let answer = TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            c.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut s = String::new();
            c.read_to_string(&mut s)?;
            Ok(s)
        });
        let mut seen = seen.lock().unwrap();
        match answer {
            Ok(s) => match s.rsplit("\r\n\r\n").next().and_then(|p| p.parse().ok()) {
                Some(pid) => seen.pids.push(pid),
                None => seen.other_errors.push(format!("answer {s:?}")),
            },
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => seen.refused += 1,
            Err(e) => seen.other_errors.push(e.to_string()),
        }
    }
}

fn count(seen: &Mutex<Seen>, pid: u32) -> usize {
    seen.lock()
        .unwrap()
        .pids
        .iter()
        .filter(|p| **p == pid)
        .count()
}

fn has_event(ev: &[Value], kind: &str, actor: &str, detail: &str) -> bool {
    ev.iter().any(|e| {
        e["kind"] == kind
            && e["actor"] == actor
            && e["detail"].as_str().is_some_and(|d| d.contains(detail))
    })
}

#[test]
fn reload_with_a_health_check_keeps_serving_and_ends_with_a_new_pid() {
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    start_server(&env, port);
    let old = env.pid("web");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let poller = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || poll(port, stop, seen))
    };
    env.wait(60, "answers from the old process", || {
        count(&seen, old) >= 20
    });

    let r = env.json(&["reload", "web"]);
    let new = r[0]["pid"].as_u64().unwrap() as u32;
    assert_eq!(r[0]["how"], "reloaded", "{r}");
    assert_eq!(r[0]["old_pid"], old, "{r}");
    assert_ne!(new, old);
    // The answer comes once the old process is stopped; the new one serves.
    env.wait(60, "answers from the new process", || {
        count(&seen, new) >= 20
    });
    stop.store(true, Ordering::Relaxed);
    poller.join().unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.refused, 0, "a client was refused during the reload");
    assert!(
        !seen.pids.iter().any(|p| *p != old && *p != new),
        "answers from a third process"
    );
    // Resets of a connection queued on the old listener as it closed are
    // possible with SO_REUSEPORT; refusals are not.
    assert!(seen.other_errors.len() <= 2, "{:?}", seen.other_errors);
    env.wait(60, "the old process gone", || !alive(old));
    let app = env.daemon_app("web");
    assert_eq!(app["pid"], new);
    assert_eq!(app["status"], "online");
    let ev = env.events("web");
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {old} keeps serving")
    ));
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {new} is healthy")
    ));
    assert!(has_event(
        &ev,
        "exited",
        "system:reload",
        &format!("pid {old}")
    ));
}

#[test]
fn reload_of_a_new_version_that_never_gets_healthy_keeps_the_old_pid() {
    let env = Env::new();
    let port = oxidepm_testkit::free_port();
    start_server(&env, port);
    let old = env.pid("web");
    // The new version on disk is broken: it runs, and never serves.
    std::fs::write(env.path("mode"), "bad").unwrap();

    let err = env.fails(&["reload", "web"]);
    assert!(err.contains("E_CONFLICT"), "{err}");
    assert!(
        err.contains(&format!("the old process (pid {old}) keeps running")),
        "{err}"
    );
    assert!(err.contains("was not healthy within"), "{err}");
    let app = env.daemon_app("web");
    assert_eq!(app["pid"], old);
    assert_eq!(app["status"], "online");
    assert!(alive(old));
    // The broken process was stopped; the old one still answers.
    let ev = env.events("web");
    let new: u32 = ev
        .iter()
        .rev()
        .find(|e| e["kind"] == "restarted")
        .and_then(|e| e["detail"].as_str()?.strip_prefix("pid ")?.parse().ok())
        .expect("the new process was started");
    assert_ne!(new, old);
    env.wait(60, "the broken process gone", || !alive(new));
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    assert!(s.ends_with(&old.to_string()), "{s}");
    assert!(has_event(
        &ev,
        "reload",
        "human:cli",
        &format!("pid {old} kept")
    ));
    env.wait(60, "healthy again", || {
        env.daemon_app("web")["health"] == "healthy"
    });
}

#[test]
fn reload_without_a_health_check_is_a_restart_and_says_so() {
    let env = Env::new();
    env.ok(&["start", "--name", "plain", "--", "sleep", "1000"]);
    let old = env.pid("plain");
    let out = env.ok(&["reload", "plain"]);
    assert!(
        out.contains("restarted (no health check: not zero-downtime)"),
        "{out}"
    );
    let new = env.pid("plain");
    assert_ne!(new, old);
    assert!(out.contains(&format!("pid {old} → {new}")), "{out}");
    assert!(!alive(old));
}

#[test]
fn signal_reaches_the_main_process_by_name_or_number() {
    let env = Env::new();
    let got = env.path("got");
    let ready = env.path("ready");
    let script = env.script(
        "trap.sh",
        &format!(
            "trap 'echo usr1 >> {}' USR1\ntouch {}\nwhile :; do sleep 0.1; done",
            got.display(),
            ready.display()
        ),
    );
    env.ok(&["start", "--name", "trap", "--", &script]);
    let pid = env.pid("trap");
    env.wait(60, "the trap set", || ready.exists());
    // One at a time: a second USR1 pending beside the first is one signal.
    for (n, sig) in ["SIGUSR1", "usr1", "10"].iter().enumerate() {
        let r = env.json(&["signal", sig, "trap"]);
        assert_eq!(r[0]["pid"], pid);
        assert_eq!(r[0]["signal"], "SIGUSR1");
        env.wait(60, "the USR1 trapped", || {
            read(&got).lines().count() == n + 1
        });
    }
    assert_eq!(env.pid("trap"), pid, "the app was not restarted");

    let err = env.fails(&["signal", "SIGFOO", "trap"]);
    assert!(
        err.contains("E_BAD_REQUEST") && err.contains("unknown signal"),
        "{err}"
    );

    // SIGKILL is allowed; the exit is handled as any other (restarted).
    env.ok(&["signal", "KILL", "trap"]);
    env.wait(60, "a new process", || {
        env.daemon_app("trap")["pid"]
            .as_u64()
            .is_some_and(|p| p != u64::from(pid))
    });
    let ev = env.events("trap");
    assert!(has_event(
        &ev,
        "signal",
        "human:cli",
        &format!("SIGKILL to pid {pid}")
    ));
    assert!(has_event(&ev, "exited", "system:crash", "SIGKILL"));

    env.ok(&["stop", "trap"]);
    let err = env.fails(&["signal", "USR1", "trap"]);
    assert!(
        err.contains("E_CONFLICT") && err.contains("trap (stopped) is not running"),
        "{err}"
    );
}

#[test]
fn reset_clears_counters_and_the_errored_state() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "crash",
        "--max-restarts",
        "2",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    env.wait_status("crash", "errored");
    assert!(env.daemon_app("crash")["restarts"].as_u64().unwrap() > 0);
    let r = env.json(&["reset", "crash"]);
    assert_eq!(r[0]["status"], "stopped");
    assert!(r[0]["restarts_before"].as_u64().unwrap() > 0);
    let app = env.daemon_app("crash");
    assert_eq!(app["status"], "stopped");
    assert_eq!(app["restarts"], 0);
}

#[test]
fn instances_in_a_file_and_scale_up_and_down() {
    let env = Env::new();
    let dir = env.dir.path().display().to_string();
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        format!(
            "[[apps]]\nname = \"web\"\nscript = \"sh\"\nargs = [\"-c\", \"echo $$ > {dir}/i.$OXIDEPM_INSTANCE; exec sleep 1000\"]\ninstances = 3\n"
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    let pids: Vec<u32> = (0..3).map(|i| env.pid(&format!("web-{i}"))).collect();
    for (i, pid) in pids.iter().enumerate() {
        let p = env.path(&format!("i.{i}"));
        env.wait(60, "the instance's file", || {
            read(&p).trim() == pid.to_string()
        });
    }
    assert_eq!(env.status().len(), 3);

    let r = env.json(&["scale", "web", "5"]);
    let names: Vec<&str> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web-3", "web-4"]);
    let p4 = env.pid("web-4");
    env.wait(60, "instance 4's file", || {
        read(&env.path("i.4")).trim() == p4.to_string()
    });

    env.ok(&["scale", "@web", "1"]);
    let left: Vec<String> = env
        .status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, ["web-0"]);
    assert_eq!(env.pid("web-0"), pids[0]);
    for p in &pids[1..] {
        assert!(!alive(*p));
    }
    assert!(!alive(p4));

    // The group's name selects its instances.
    env.ok(&["scale", "web", "2"]);
    env.ok(&["stop", "web"]);
    for a in env.status() {
        assert_eq!(a["status"], "stopped", "{a}");
    }
    let err = env.fails(&["scale", "web", "0"]);
    assert!(err.contains("scale to 0"), "{err}");
    let err = env.fails(&["scale", "web", "300"]);
    assert!(err.contains("at most 256"), "{err}");
    // An app that only has an instance's name is never redefined.
    env.ok(&["start", "--name", "web-2", "--", "sleep", "1000"]);
    let other = env.pid("web-2");
    let err = env.fails(&["scale", "web", "3"]);
    assert!(
        err.contains("web-2 is the name of an app that is not an instance of web"),
        "{err}"
    );
    assert_eq!(env.pid("web-2"), other);
    env.ok(&["start", "--name", "single", "--", "sleep", "1000"]);
    let err = env.fails(&["scale", "single", "3"]);
    assert!(
        err.contains("single is one app, not a group of instances"),
        "{err}"
    );
}

#[test]
fn cluster_mode_is_refused_and_nothing_is_defined() {
    let env = Env::new();
    for (n, field) in [
        ("a", "exec_mode = \"cluster\""),
        ("b", "instances = \"max\""),
    ] {
        let file = env.path(&format!("{n}.toml"));
        std::fs::write(
            &file,
            format!("[[apps]]\nname = \"web\"\nscript = \"sleep\"\nargs = [\"1000\"]\n{field}\n"),
        )
        .unwrap();
        let err = env.fails(&["start", file.to_str().unwrap()]);
        assert!(err.contains("oxidepm runs separate processes"), "{err}");
        assert!(err.contains("SO_REUSEPORT"), "{err}");
    }
    assert!(!env.home.join("daemon.sock").exists() || env.status().is_empty());
}

#[test]
fn a_periodic_job_runs_again_on_schedule_until_a_person_stops_it() {
    let env = Env::new();
    let runs = env.path("runs");
    let file = env.path("job.toml");
    std::fs::write(
        &file,
        format!(
            "[[apps]]\nname = \"job\"\nscript = \"sh\"\nargs = [\"-c\", \"echo run >> {}\"]\nautorestart = false\ncron_restart = \"* * * * * *\"\n",
            runs.display()
        ),
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.wait(60, "three runs", || read(&runs).lines().count() >= 3);
    let ev = env.events("job");
    assert!(has_event(&ev, "cron", "system:cron", "scheduled by"));
    assert!(has_event(&ev, "started", "system:cron", "pid"));

    env.ok(&["stop", "job"]);
    env.wait_status("job", "stopped");
    let before = read(&runs).lines().count();
    // Three ticks of the schedule: a job a person stopped stays stopped.
    std::thread::sleep(Duration::from_millis(3200));
    assert_eq!(read(&runs).lines().count(), before);
    assert_eq!(env.daemon_app("job")["status"], "stopped");
}

#[test]
fn waiting_shows_reason_and_time_left_and_start_cuts_it_short() {
    let env = Env::new();
    let flag = env.path("flag");
    let script = env.script(
        "once.sh",
        &format!(
            "if [ -f {f} ]; then exec sleep 1000; fi\ntouch {f}\nexit 3",
            f = flag.display()
        ),
    );
    env.ok(&[
        "start",
        "--name",
        "w",
        "--restart-delay",
        "60s",
        "--",
        &script,
    ]);
    env.wait(60, "waiting", || env.daemon_app("w")["waiting"].is_object());
    let app = env.daemon_app("w");
    assert_eq!(app["status"], "starting");
    assert_eq!(app["waiting"]["reason"], "after exit code 3");
    let left = app["waiting"]["due_in_ms"].as_u64().unwrap();
    assert!(left > 30_000 && left <= 60_000, "{left}");
    let out = env.ok(&["status"]);
    assert!(
        out.contains("waiting (restarting in") && out.contains("after exit code 3"),
        "{out}"
    );

    let r = env.json(&["start", "w"]);
    assert_eq!(r[0]["action"], "started", "{r}");
    let app = env.daemon_app("w");
    assert_eq!(app["status"], "online");
    assert!(app["waiting"].is_null());
    assert_eq!(app["pid"], r[0]["pid"]);
}

#[test]
fn an_ai_cannot_signal_reload_reset_or_scale_a_protected_app() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "db",
        "--protected",
        "--",
        "sleep",
        "1000",
    ]);
    env.ok(&["start", "--name", "web", "--", "sleep", "1000"]);
    let db = env.pid("db");
    let as_ai = |args: &[&str]| {
        env.cmd()
            .env("OXIDEPM_ACTOR", "ai:assistant")
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        &["signal", "KILL", "db"][..],
        &["reload", "db"],
        &["reset", "db"],
        &["signal", "TERM", "all"],
    ] {
        let o = as_ai(args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("E_PROTECTED") && err.contains("db"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(env.pid("db"), db);
    assert!(env
        .events("db")
        .iter()
        .all(|e| e["kind"] != "signal" && e["kind"] != "reload"));
    // The same through agent.sock, as an agent's program would ask.
    let r = env
        .raw("agent.sock")
        .call(json!({"id": 1, "op": "signal", "target": "db", "signal": "KILL"}));
    assert_eq!(r["error"]["code"], "E_PROTECTED", "{r}");
    assert_eq!(env.pid("db"), db);
    // An unprotected app: signal is at restart's tier, which an ai has;
    // scale defines apps, which it has not.
    assert!(as_ai(&["signal", "USR2", "web"]).status.success());
    let o = as_ai(&["scale", "web", "2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("E_POLICY_DENIED"));
    let audit = env.json(&["audit", "--actor", "ai:assistant"]);
    let rows: Vec<String> = audit
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
    for want in [
        "signal E_PROTECTED",
        "reload E_PROTECTED",
        "reset E_PROTECTED",
        "signal ok",
    ] {
        assert!(rows.iter().any(|r| r == want), "{want} not in {rows:?}");
    }
}

#[test]
fn an_agent_uses_the_verbs_through_its_ops_lane_as_on_a_socket() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"web\", \"db\"]\n");
    env.ok(&[
        "start",
        "--name",
        "db",
        "--protected",
        "--",
        "sleep",
        "100000",
    ]);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    crate::lanes::start_agents(&env, &["alice"]);
    let db = env.pid("db");
    let web = env.pid("web");
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    let ask = |c: &mut redis::Connection, req: &str| crate::ops::ops_answer(c, "alice", req);

    for req in [
        r#"{"op":"signal","target":"db","signal":"KILL"}"#,
        r#"{"op":"reload","target":"db"}"#,
        r#"{"op":"reset","target":"db"}"#,
    ] {
        let r = ask(&mut alice, req);
        assert_eq!(r["error"]["code"], "E_PROTECTED", "{req}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("ai:alice"));
    }
    assert_eq!(env.pid("db"), db);
    // A stream entry's fields, the number as the lane reads it.
    let id: String = redis::cmd("XADD")
        .arg("alice:ops:outbox")
        .arg("*")
        .arg("op")
        .arg("signal")
        .arg("target")
        .arg("web")
        .arg("signal")
        .arg("18")
        .query(&mut alice)
        .unwrap();
    assert!(!id.is_empty());
    env.wait(60, "SIGCONT reported", || {
        env.daemon_events("web").iter().any(|e| {
            e["kind"] == "signal"
                && e["actor"] == "ai:alice"
                && e["detail"] == format!("SIGCONT to pid {web}")
        })
    });
    let r = ask(&mut alice, r#"{"op":"reload","target":"web"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        r["result"][0]["how"],
        "restarted (no health check: not zero-downtime)"
    );
    assert_ne!(env.pid("web"), web);
    let r = ask(&mut alice, r#"{"op":"scale","target":"web","instances":2}"#);
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
}
