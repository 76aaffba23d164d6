//! Layer 1: starting, stopping, restarting, crashing, logging, config files.

use crate::harness::{alive, kill, read, strs, Env};
use oxidepm_testkit::words;
use serde_json::json;

#[test]
fn start_stop_restart_delete_through_the_cli() {
    let env = Env::new();
    let out = env.ok(&[
        "start", "--name", "web", "--tag", "front", "--", "sleep", "1000",
    ]);
    assert!(out.contains("web"), "{out}");
    env.wait_status("web", "online");
    let pid = env.pid("web");
    assert!(alive(pid));
    let a = env.app("web");
    assert_eq!(a["restarts"], 0);
    assert!(a["id"].as_u64().is_some());

    env.ok(&["stop", "web"]);
    assert_eq!(env.app("web")["status"], "stopped");
    assert!(!alive(pid));

    env.ok(&["start", "web"]);
    let pid2 = env.pid("web");
    assert_ne!(pid, pid2);

    env.ok(&["restart", "@front"]);
    let a = env.app("web");
    assert_eq!(a["status"], "online");
    assert_eq!(a["restarts"], 1);
    assert!(!alive(pid2));
    let pid3 = a["pid"].as_u64().unwrap() as u32;

    let id = a["id"].as_u64().unwrap().to_string();
    env.ok(&["delete", &id]);
    assert!(env.status().is_empty());
    assert!(!alive(pid3));

    let err = env.fails(&["stop", "nope"]);
    assert!(err.contains("E_NOT_FOUND"), "{err}");

    let kinds: Vec<String> = env
        .json(&["events", "--limit", "100"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["kind"].as_str().unwrap(),
                e["actor"].as_str().unwrap()
            )
        })
        .collect();
    for k in [
        "defined:human:cli",
        "started:human:cli",
        "stopped:human:cli",
        "restarted:human:cli",
        "deleted:human:cli",
    ] {
        assert!(kinds.iter().any(|x| x == k), "missing {k} in {kinds:?}");
    }
}

#[test]
fn a_killed_app_is_restarted_and_credited_to_system_crash() {
    let env = Env::new();
    env.ok(&["start", "--name", "w", "--", "sleep", "1000"]);
    let pid = env.pid("w");
    kill(pid, libc::SIGKILL);
    env.wait(10, "a new pid", || {
        let a = env.daemon_app("w");
        a["status"] == "online" && a["pid"].as_u64().is_some_and(|p| p as u32 != pid)
    });
    assert_eq!(env.app("w")["restarts"], 1);
    let ev = env.events("w");
    let restarted = ev
        .iter()
        .find(|e| e["kind"] == "restarted")
        .expect("restarted event");
    assert_eq!(restarted["actor"], "system:crash");
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "exited" && e["actor"] == "system:crash"));
    assert!(restarted["at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn a_crash_loop_ends_errored_after_max_restarts() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "bad",
        "--max-restarts",
        "3",
        "--restart-delay",
        "0",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    env.wait_status("bad", "errored");
    let a = env.app("bad");
    assert_eq!(a["restarts"], 3);
    assert_eq!(a["pid"], serde_json::Value::Null);
    assert_eq!(a["last_exit_code"], 3);
    let ev = env.events("bad");
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "errored" && e["actor"] == "system:crash"));
    // It stays errored: no restart after the limit. A second app with the
    // same limits crash-looping to its end is the sign that the daemon had
    // time to restart the first again, had it meant to.
    env.ok(&[
        "start",
        "--name",
        "witness",
        "--max-restarts",
        "3",
        "--restart-delay",
        "0",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    env.wait_status("witness", "errored");
    assert_eq!(env.app("bad")["restarts"], 3);
    assert_eq!(env.app("bad")["status"], "errored");
}

#[test]
fn restart_policies_on_failure_and_never() {
    let env = Env::new();
    env.ok(&strs(&words(
        "start --name ok --restart on-failure -- true",
    )));
    env.ok(&[
        "start",
        "--name",
        "once",
        "--restart",
        "never",
        "--",
        "sh",
        "-c",
        "exit 1",
    ]);
    env.wait_status("ok", "stopped");
    env.wait_status("once", "errored");
    assert_eq!(env.app("ok")["restarts"], 0);
    assert_eq!(env.app("once")["restarts"], 0);
}

#[test]
fn stop_kills_grandchildren_and_processes_that_ignore_sigterm() {
    let env = Env::new();
    let pidfile = env.path("pids");
    let script = env.script(
        "tree.sh",
        &format!(
            "trap '' TERM\n(trap '' TERM; sleep 1000 & echo $! >> {p}; wait) &\nsh -c 'trap \"\" TERM; echo $$ >> {p}; while true; do sleep 1; done' &\nwait",
            p = pidfile.display()
        ),
    );
    env.ok(&[
        "start",
        "--name",
        "tree",
        "--kill-timeout",
        "500",
        "--",
        &script,
    ]);
    env.wait(10, "the tree's pids", || {
        read(&pidfile).lines().count() >= 2
    });
    let main = env.pid("tree");
    let pids: Vec<u32> = read(&pidfile)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(pids.iter().all(|p| alive(*p)));
    env.ok(&["stop", "tree"]);
    assert!(!alive(main));
    for p in pids {
        assert!(!alive(p), "descendant {p} survived the stop");
    }
    assert_eq!(env.app("tree")["status"], "stopped");
    let ev = env.events("tree");
    let stopped = ev.iter().rev().find(|e| e["kind"] == "stopped").unwrap();
    assert!(
        stopped["detail"].as_str().unwrap().contains("kill"),
        "{stopped}"
    );
}

#[test]
fn a_million_lines_are_all_logged_in_order() {
    let env = Env::new();
    let n = 1_000_000u64;
    env.ok(&[
        "start",
        "--name",
        "flood",
        "--restart",
        "never",
        "--",
        "sh",
        "-c",
        &format!("seq 0 {}", n - 1),
    ]);
    env.wait(120, "the flood to end", || {
        env.daemon_app("flood")["status"] == "stopped"
    });
    let log = env.home.join("logs/flood-out.log");
    let mut expected = 0u64;
    env.wait(60, "every line in the log", || {
        read(&log).lines().count() as u64 == n
    });
    for line in read(&log).lines() {
        let (ts, rest) = line.split_once(' ').expect("timestamp prefix");
        assert!(ts.ends_with('Z'), "{line}");
        assert_eq!(
            rest.parse::<u64>().unwrap(),
            expected,
            "line out of order or torn"
        );
        expected += 1;
    }
    assert_eq!(expected, n);
    // The control plane answered throughout.
    assert_eq!(env.json(&["ping"])["pong"], true);
}

#[test]
fn logs_lines_and_flush() {
    let env = Env::new();
    env.ok(&[
        "start",
        "--name",
        "talk",
        "--",
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; sleep 1000",
    ]);
    env.wait(10, "output", || {
        read(&env.home.join("logs/talk-err.log")).lines().count() == 5
    });
    let out = env.ok(&["logs", "talk", "--lines", "2", "--out"]);
    assert!(
        out.contains("out4") && out.contains("out5") && !out.contains("out3"),
        "{out}"
    );
    assert!(!out.contains("err"), "{out}");
    let all = env.ok(&["logs", "talk", "--lines", "100"]);
    assert!(all.contains("err1") && all.contains("out1"));
    env.ok(&["flush", "talk"]);
    assert_eq!(read(&env.home.join("logs/talk-out.log")), "");
}

#[test]
fn the_same_apps_from_toml_yaml_and_json() {
    let env = Env::new();
    let toml = env.path("apps.toml");
    std::fs::write(
        &toml,
        "[[apps]]\nname = \"a\"\nscript = \"sleep\"\nargs = [\"1000\"]\ntags = [\"t\"]\n\n\
         [[apps]]\nname = \"b\"\nscript = \"sleep\"\nargs = \"1000\"\nenv = { X = \"1\" }\n\n\
         [[apps]]\nname = \"c\"\nscript = \"sleep\"\nargs = [\"1000\"]\nautorestart = false\n",
    )
    .unwrap();
    let yaml = env.path("apps.yaml");
    std::fs::write(
        &yaml,
        "apps:\n  - name: a\n    script: sleep\n    args: [\"1000\"]\n    tags: [t]\n  - name: b\n    script: sleep\n    args: \"1000\"\n    env:\n      X: 1\n  - name: c\n    script: sleep\n    args: [\"1000\"]\n    autorestart: false\n",
    )
    .unwrap();
    let jsonf = env.path("ecosystem.config.json");
    std::fs::write(
        &jsonf,
        json!({"apps": [
            {"name": "a", "script": "sleep", "args": ["1000"], "tags": ["t"]},
            {"name": "b", "script": "sleep", "args": "1000", "env": {"X": 1}},
            {"name": "c", "script": "sleep", "args": ["1000"], "autorestart": false}
        ]})
        .to_string(),
    )
    .unwrap();
    let mut specs = Vec::new();
    for f in [&toml, &yaml, &jsonf] {
        env.ok(&["start", f.to_str().unwrap()]);
        let st = env.status();
        assert_eq!(st.len(), 3, "{f:?}");
        assert!(st.iter().all(|a| a["status"] == "online"), "{st:?}");
        let show = env.json(&["show", "all"]);
        let s: Vec<_> = show
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let mut sp = a["spec"].clone();
                sp.as_object_mut().unwrap().remove("cwd");
                sp
            })
            .collect();
        specs.push(s);
        env.ok(&["delete", "all"]);
    }
    assert_eq!(specs[0], specs[1], "TOML and YAML differ");
    assert_eq!(specs[0], specs[2], "TOML and JSON differ");
    assert_eq!(specs[0][2]["restart"], "never");
    assert_eq!(specs[0][1]["env"]["X"], "1");
}

#[test]
fn a_bad_config_file_names_file_line_and_field_and_starts_nothing() {
    let env = Env::new();
    let f = env.path("bad.toml");
    std::fs::write(
        &f,
        "[[apps]]\nname = \"good\"\nscript = \"sleep\"\nargs = [\"1000\"]\n\n[[apps]]\nname = \"oops\"\nscirpt = \"sleep\"\n",
    )
    .unwrap();
    let err = env.fails(&["start", f.to_str().unwrap()]);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(err.contains("scirpt"), "{err}");
    assert!(err.contains(":8"), "line 8 expected in {err}");
    env.ok(&["ping"]);
    assert!(env.status().is_empty(), "nothing may start");
}

#[test]
fn a_second_daemon_is_refused_and_a_stale_socket_is_replaced() {
    let env = Env::new();
    let pid = env.daemon_pid();
    let o = std::process::Command::new(crate::harness::bin("oxidepmd"))
        .args(["--foreground", "--home"])
        .arg(&env.home)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("another oxidepmd") && err.contains(&pid.to_string()),
        "{err}"
    );
    assert_eq!(env.daemon_pid(), pid, "the first daemon is unaffected");

    // A daemon killed outright leaves its socket file behind. Waited for
    // until its socket refuses too: its last thread can outlive its main
    // one, and a ping then meets a reset (seen on a loaded machine).
    env.kill_daemon();
    assert!(!alive(pid));
    assert!(env.home.join("daemon.sock").exists());
    let pid2 = env.daemon_pid();
    assert_ne!(pid, pid2);
}

#[test]
fn bad_requests_get_clear_errors_and_the_connection_lives_on() {
    let env = Env::new();
    env.daemon_pid();
    let mut raw = env.raw("daemon.sock");
    raw.send("this is not json");
    let r = raw.recv().unwrap();
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST");
    let r = raw.call(json!({"id": 5, "op": "frobnicate"}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST");
    let r =
        raw.call(json!({"id": 6, "op": "define", "apps": [{"name": "../x", "command": "true"}]}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST");
    let r = raw.call(json!({"id": 7, "op": "ping"}));
    assert_eq!(r["id"], 7);
    assert_eq!(r["result"]["pong"], true);
}

#[test]
fn apps_get_an_explicit_environment() {
    let env = Env::new();
    let dump = env.path("env.txt");
    let o = env
        .cmd()
        .env("SECRET_OF_THE_SHELL", "x")
        .args([
            "start",
            "--name",
            "e",
            "--env",
            "A=1",
            "--restart",
            "never",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("env > {}", dump.display()))
        .output()
        .unwrap();
    assert!(o.status.success());
    env.wait(10, "env dump", || read(&dump).contains("A=1"));
    let text = read(&dump);
    assert!(!text.contains("SECRET_OF_THE_SHELL"), "{text}");
    // The daemon's address is given, so a nested CLI reaches this daemon.
    assert!(
        text.contains(&format!("OXIDEPM_HOME={}", env.home.display())),
        "{text}"
    );
    assert!(text.contains("PATH="), "{text}");
}

/// Under memory pressure the kernel kills an app rather than the daemon
/// that restarts it: the daemon lowers its own `oom_score_adj` where it
/// may and starts its apps (and what they fork) at the default, else
/// starts them above its own.
#[test]
fn the_daemon_is_the_last_thing_the_kernel_kills() {
    let env = Env::new();
    let body = "sleep 100000 & exec sleep 100000";
    env.ok(&["start", "--name", "web", "--", "sh", "-c", body]);
    let adj = |pid: u32| -> i32 {
        read(std::path::Path::new(&format!("/proc/{pid}/oom_score_adj")))
            .trim()
            .parse()
            .unwrap()
    };
    let daemon = adj(env.daemon_pid());
    let web = env.pid("web");
    let child = env.wait(20, "web's child", || {
        read(std::path::Path::new(&format!(
            "/proc/{web}/task/{web}/children"
        )))
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
    });
    // Lowered where the daemon may (root with CAP_SYS_RESOURCE, which a
    // container may not give), else the apps raised above it.
    if daemon == -900 {
        assert_eq!((adj(web), adj(child)), (0, 0));
    } else {
        assert_eq!(adj(web), (daemon + 100).min(1000));
        assert_eq!(adj(child), adj(web));
    }
    assert!(adj(web) > daemon);
}
