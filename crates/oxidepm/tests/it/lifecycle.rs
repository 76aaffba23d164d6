//! Layer 1, part 2: limits, cron, health, dependencies, resurrect, and
//! surviving the daemon's own death.

use crate::harness::{alive, kill, read, Env};
use oxidepm_testkit::free_port;
use serde_json::Value;

fn has_event(ev: &[Value], kind: &str, actor: &str) -> bool {
    ev.iter().any(|e| e["kind"] == kind && e["actor"] == actor)
}

#[test]
fn a_memory_hog_is_restarted_by_system_limit_and_counts_toward_max_restarts() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "hog",
        "--max-memory-restart",
        "64M",
        "--max-restarts",
        "1",
        "--",
        "python3",
        "-c",
        "import time\nx = b'x' * (160 * 1024 * 1024)\ntime.sleep(1000)",
    ]);
    env.wait(30, "a restart for the memory limit", || {
        has_event(&env.daemon_events("hog"), "restarted", "system:limit")
    });
    let ev = env.events("hog");
    assert!(has_event(&ev, "memory-limit", "system:limit"), "{ev:?}");
    // The second kill for the limit exceeds max_restarts = 1.
    env.wait(30, "errored after repeated limit kills", || {
        env.daemon_app("hog")["status"] == "errored"
    });
    assert!(has_event(&env.events("hog"), "errored", "system:limit"));
}

#[test]
fn cron_restart_with_seconds_fires_every_second() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "tick",
        "--cron-restart",
        "* * * * * *",
        "--",
        "sleep",
        "1000",
    ]);
    env.wait(15, "two cron restarts", || {
        env.daemon_events("tick")
            .iter()
            .filter(|e| e["kind"] == "restarted" && e["actor"] == "system:cron")
            .count()
            >= 2
    });
    assert_eq!(env.app("tick")["status"], "online");
}

#[test]
fn an_app_failing_its_http_check_is_restarted_by_system_health() {
    let env = Env::new();
    let port = free_port();
    // Healthy until the test makes it sick (a file), then failing: a
    // healthy spell of a few checks would be missed by a busy machine. The
    // start period covers python's start on a busy machine (seconds): the
    // restart comes once it is over.
    let server = env.path("server.py");
    let sick = env.path("sick");
    std::fs::write(
        &server,
        format!(
            "import http.server, os\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(500 if os.path.exists({sick:?}) else 200)\n        self.end_headers()\n    def log_message(self, *a):\n        pass\nhttp.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n",
            sick = sick.display().to_string()
        ),
    )
    .unwrap();
    let cfg = env.path("apps.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[apps]]\nname = \"web\"\nscript = \"python3\"\nargs = [\"{}\"]\n[apps.health]\nhttp = \"http://127.0.0.1:{port}/health\"\ninterval = \"200ms\"\ntimeout = \"1s\"\nretries = 2\nstart_period = \"4s\"\n",
            server.display()
        ),
    )
    .unwrap();
    env.ok(&["start", cfg.to_str().unwrap()]);
    env.wait(20, "healthy", || {
        env.daemon_app("web")["health"] == "healthy"
    });
    let first = env.pid("web");
    std::fs::write(&sick, "").unwrap();
    env.wait(40, "a restart for health", || {
        has_event(&env.daemon_events("web"), "restarted", "system:health")
    });
    assert!(has_event(&env.events("web"), "unhealthy", "system:health"));
    env.wait(10, "a new process", || {
        env.daemon_app("web")["pid"]
            .as_u64()
            .is_some_and(|p| p as u32 != first)
    });
    assert!(!alive(first));
    let show = env.json(&["show", "web"]);
    assert!(show[0]["health"].is_string());
}

#[test]
fn a_tcp_check_and_a_dependency_chain_start_in_order() {
    let env = Env::new();
    let port = free_port();
    let cfg = env.path("apps.toml");
    // Listed dependents first: the order must come from depends_on.
    std::fs::write(
        &cfg,
        format!(
            r#"
[[apps]]
name = "web"
script = "sleep"
args = ["1000"]
depends_on = [{{ app = "db", condition = "healthy" }}]

[[apps]]
name = "db"
script = "python3"
args = ["-m", "http.server", "--bind", "127.0.0.1", "{port}"]
depends_on = [{{ app = "migrate", condition = "completed" }}]
[apps.health]
tcp = "127.0.0.1:{port}"
interval = "100ms"
# A busy machine may take seconds to start python: failures before it
# listens are no reason to restart it.
start_period = "60s"

[[apps]]
name = "migrate"
script = "sh"
args = ["-c", "sleep 0.3"]
restart = "never"
"#
        ),
    )
    .unwrap();
    env.ok(&["start", cfg.to_str().unwrap()]);
    env.wait(90, "web online", || {
        env.daemon_app("web")["status"] == "online"
    });
    assert_eq!(env.app("db")["health"], "healthy");
    assert_eq!(env.app("migrate")["status"], "stopped");
    let all = env.json(&["events", "--limit", "1000"]);
    let started: Vec<(String, u64)> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "started")
        .map(|e| {
            (
                e["app"].as_str().unwrap().to_string(),
                e["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    let seq = |n: &str| started.iter().find(|(a, _)| a == n).unwrap().1;
    assert!(
        seq("migrate") < seq("db") && seq("db") < seq("web"),
        "{started:?}"
    );
    // Stopping all stops dependents first.
    env.ok(&["stop", "all"]);
    let all = env.json(&["events", "--limit", "1000"]);
    let stopped: Vec<(String, u64)> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "stopped")
        .map(|e| {
            (
                e["app"].as_str().unwrap().to_string(),
                e["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    let sq = |n: &str| stopped.iter().rev().find(|(a, _)| a == n).unwrap().1;
    assert!(sq("web") < sq("db"), "{stopped:?}");
}

#[test]
fn a_dependency_cycle_is_refused_with_its_names() {
    let env = Env::new();
    let cfg = env.path("cycle.toml");
    std::fs::write(
        &cfg,
        "[[apps]]\nname = \"a\"\nscript = \"sleep\"\nargs = [\"1000\"]\ndepends_on = [\"b\"]\n\n\
         [[apps]]\nname = \"b\"\nscript = \"sleep\"\nargs = [\"1000\"]\ndepends_on = [\"a\"]\n",
    )
    .unwrap();
    let err = env.fails(&["start", cfg.to_str().unwrap()]);
    assert!(
        err.contains("cycle") && err.contains("a -> b -> a") || err.contains("b -> a -> b"),
        "{err}"
    );
    assert!(env.status().is_empty());
}

#[test]
fn resurrect_after_a_clean_daemon_stop_and_by_snapshot() {
    let env = Env::new();
    env.daemon_toml("resurrect = true\n");
    env.ok(&["start", "--name", "keep", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "off", "--", "sleep", "1000"]);
    env.ok(&["stop", "off"]);
    env.ok(&["save", "snap"]);
    env.ok(&["kill"]);
    env.ok(&["ping"]);
    assert_eq!(
        env.app("keep")["status"],
        "online",
        "restored at daemon start"
    );
    assert_eq!(
        env.app("off")["status"],
        "stopped",
        "stopped apps stay stopped"
    );
    assert!(has_event(
        &env.events("keep"),
        "started",
        "system:resurrect"
    ));

    env.ok(&["delete", "all"]);
    env.ok(&["resurrect", "snap"]);
    assert_eq!(env.app("keep")["status"], "online");
    assert!(env.status().iter().all(|a| a["name"] != "off"));
    // An empty or unknown snapshot never wipes anything.
    env.ok(&["stop", "all"]);
    env.ok(&["save", "empty"]);
    let err = env.fails(&["resurrect", "empty"]);
    assert!(err.contains("E_CONFLICT"), "{err}");
    assert!(env.fails(&["resurrect", "nope"]).contains("E_NOT_FOUND"));
    assert_eq!(env.status().len(), 1);
}

fn numbers(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split_once(' ').and_then(|(_, n)| n.trim().parse().ok()))
        .collect()
}

#[test]
fn apps_outlive_a_killed_daemon_and_are_adopted_again() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "writer",
        "--",
        "sh",
        "-c",
        "i=0; while :; do echo $i; i=$((i+1)); sleep 0.01; done",
    ]);
    env.ok(&["start", "--name", "b", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "c", "--", "sleep", "1000"]);
    let pids: Vec<u32> = ["writer", "b", "c"].iter().map(|n| env.pid(n)).collect();
    env.kill_daemon();
    let log = env.home.join("logs/writer-out.log");
    let before = numbers(&read(&log)).len();
    // The writer goes on logging with no daemon: a positive sign that time
    // passed for the apps too, after which each must still be alive.
    env.wait(10, "the writer to keep logging with no daemon", || {
        numbers(&read(&log)).len() > before + 5
    });
    for p in &pids {
        assert!(alive(*p), "app {p} died with the daemon");
    }

    // A new daemon (started by the CLI) adopts the same processes.
    env.ok(&["ping"]);
    let st = env.status();
    for (n, p) in ["writer", "b", "c"].iter().zip(&pids) {
        let a = st.iter().find(|a| a["name"] == *n).unwrap();
        assert_eq!(a["status"], "online", "{a}");
        assert_eq!(a["pid"].as_u64().unwrap() as u32, *p);
    }
    assert!(has_event(&env.events("b"), "adopted", "system:adopt"));
    // Lines written after the adoption arrive too.
    let adopted_at = numbers(&read(&log)).len();
    env.wait(10, "lines written after the adoption", || {
        numbers(&read(&log)).len() > adopted_at.max(20)
    });
    let nums = numbers(&read(&log));
    assert!(nums.len() > 20);
    for (i, n) in nums.iter().enumerate() {
        assert_eq!(*n, i as u64, "a line is missing or out of order");
    }
    // Still supervised: a crash is noticed and the policy applied.
    kill(pids[1], libc::SIGKILL);
    env.wait(10, "b restarted", || {
        env.daemon_app("b")["pid"]
            .as_u64()
            .is_some_and(|p| p as u32 != pids[1])
    });
    assert!(has_event(&env.events("b"), "restarted", "system:crash"));
    // And a stop of an adopted app works.
    env.ok(&["stop", "c"]);
    assert!(!alive(pids[2]));
}

#[test]
fn an_app_that_died_without_a_daemon_is_restarted_and_a_reused_pid_is_not_adopted() {
    let env = Env::new();
    env.ok(&["start", "--name", "gone", "--", "sleep", "1000"]);
    env.ok(&["start", "--name", "fake", "--", "sleep", "1000"]);
    let gone = env.pid("gone");
    let fake_pid = env.pid("fake");
    env.kill_daemon();
    kill(gone, libc::SIGKILL);
    kill(fake_pid, libc::SIGKILL);
    env.wait(5, "apps to die", || !alive(gone) && !alive(fake_pid));
    // Another process now sits at the pid saved for `fake`.
    let mut imposter = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let db = rusqlite::Connection::open(env.home.join("state.db")).unwrap();
    db.execute(
        "UPDATE apps SET pid = ?1 WHERE name = 'fake'",
        [imposter.id() as i64],
    )
    .unwrap();
    drop(db);

    env.ok(&["ping"]);
    let st = env.status();
    let g = st.iter().find(|a| a["name"] == "gone").unwrap();
    let f = st.iter().find(|a| a["name"] == "fake").unwrap();
    assert_eq!(g["status"], "online");
    assert_ne!(g["pid"].as_u64().unwrap() as u32, gone);
    assert_ne!(
        f["pid"].as_u64().unwrap() as u32,
        imposter.id(),
        "a reused pid was adopted"
    );
    assert!(has_event(&env.events("gone"), "restarted", "system:crash"));
    assert!(alive(imposter.id()), "the imposter is not ours to touch");
    let _ = imposter.kill();
    let _ = imposter.wait();
}

#[test]
fn startup_prints_a_notify_unit_that_keeps_apps() {
    let env = Env::new();
    let unit = env.ok(&["startup"]);
    assert!(unit.contains("Type=notify"), "{unit}");
    assert!(unit.contains("KillMode=process"), "{unit}");
    assert!(unit.contains("Delegate=yes"), "{unit}");
    assert!(unit.contains("--foreground"), "{unit}");
    // Installing it is tested in startup.rs.
}
