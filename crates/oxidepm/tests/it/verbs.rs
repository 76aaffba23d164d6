//! The daily verbs: signal, reset, scale and `instances = N`, periodic
//! jobs, an app waiting to restart, and who may use them (`reload` is in
//! `reload.rs`).

use crate::harness::{alive, read, strs, Env};
use oxidepm_testkit::words;
use serde_json::{json, Value};

pub fn has_event(ev: &[Value], kind: &str, actor: &str, detail: &str) -> bool {
    ev.iter().any(|e| {
        e["kind"] == kind
            && e["actor"] == actor
            && e["detail"].as_str().is_some_and(|d| d.contains(detail))
    })
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
    // A second job on the same schedule counts the ticks (the decision of
    // each tick is supervise::automation's, tested there).
    let ticks = env.path("ticks");
    let witness = env.path("witness.toml");
    std::fs::write(
        &witness,
        format!(
            "[[apps]]\nname = \"witness\"\nscript = \"sh\"\nargs = [\"-c\", \"echo tick >> {}\"]\nautorestart = false\ncron_restart = \"* * * * * *\"\n",
            ticks.display()
        ),
    )
    .unwrap();
    env.ok(&["start", witness.to_str().unwrap()]);
    // Its first run is the start; three more are three ticks.
    env.wait(60, "three ticks of the schedule", || {
        read(&ticks).lines().count() >= 4
    });
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

    // `restart` cuts the wait short too.
    env.ok(&[
        "start",
        "--name",
        "w2",
        "--restart-delay",
        "60s",
        "--",
        "sh",
        "-c",
        "exit 4",
    ]);
    env.wait(60, "w2 waiting", || {
        env.daemon_app("w2")["waiting"].is_object()
    });
    let before = env.daemon_events("w2").len();
    let r = env.json(&["restart", "w2"]);
    assert!(r[0]["pid"].is_u64(), "{r}");
    let ev = env.daemon_events("w2");
    assert!(ev[before..]
        .iter()
        .any(|e| e["kind"] == "started" && e["actor"] == "human:cli"));
}

#[test]
fn an_ai_cannot_signal_reload_reset_or_scale_a_protected_app() {
    let env = Env::new();
    env.ok(&strs(&words("start --name db --protected -- sleep 1000")));
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
    env.ok(&strs(&words("start --name db --protected -- sleep 100000")));
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
