//! The read commands as people use them: `status APP` exit codes, `logs`
//! of every app merged by time, time windows, JSON with the time as a
//! field, `show` in human units, `audit` by class and age, and `stop`,
//! `restart`, `delete` of an app file.

use crate::harness::{bin, read, strs, Env};
use oxidepm_testkit::words;
use serde_json::Value;

#[test]
fn status_of_an_app_exits_like_systemctl() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    env.wait_status("web", "online");
    env.ok(&["stop", "idle"]);
    let code = |args: &[&str]| env.run(args).status.code();
    assert_eq!(code(&["status", "web"]), Some(0));
    assert_eq!(code(&["status", "idle"]), Some(3));
    assert_eq!(code(&["status", "web", "idle"]), Some(3));
    assert_eq!(code(&["status", "nope"]), Some(4));
    assert_eq!(code(&["status"]), Some(0), "the whole list is not a check");
    // The table lists only the apps asked for.
    let out = env.ok(&["status", "web"]);
    assert!(out.contains("web") && !out.contains("idle"), "{out}");
    let one = env.run(&["status", "idle", "--json"]);
    let v: Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["status"], "stopped");
    // An app that exited on its own is not running either.
    env.ok(&strs(&words("start --name done --restart never -- true")));
    env.wait_status("done", "stopped");
    assert_eq!(code(&["status", "done"]), Some(3));
}

/// An app that prints `<name><i>` each time the file `<dir>/<name><i>`
/// appears, for i in 1..=n.
fn stepper(env: &Env, name: &str, n: u32, stderr: bool) -> String {
    let dir = env.dir.path().display().to_string();
    let redirect = if stderr { " >&2" } else { "" };
    env.script(
        name,
        &format!(
            "i=1; while [ $i -le {n} ]; do \
               while [ ! -e {dir}/{name}$i ]; do sleep 0.02; done; \
               echo {name}$i{redirect}; i=$((i+1)); done; sleep 100000"
        ),
    )
}

/// Lines of `logs --json` for `args`.
fn json_lines(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut a = args.to_vec();
    a.push("--json");
    env.ok(&a)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Makes `app` print its next line, waits until that line is in the log,
/// and until the clock has moved past its stamp (so the next line's
/// stamp is later); returns the stamp.
fn step(env: &Env, app: &str, line: &str) -> String {
    std::fs::write(env.path(line), "").unwrap();
    let at = env.wait(20, line, || {
        json_lines(env, &["logs", app, "-n", "50"])
            .into_iter()
            .find(|l| l["line"] == line)
            .map(|l| l["at"].as_str().unwrap().to_string())
    });
    let ms = chrono::DateTime::parse_from_rfc3339(&at)
        .unwrap()
        .timestamp_millis();
    env.wait(5, "the clock to pass the stamp", || {
        chrono::Utc::now().timestamp_millis() > ms + 1
    });
    at
}

#[test]
fn logs_with_no_target_interleave_the_apps_by_time() {
    let env = Env::new();
    let a = stepper(&env, "a", 3, false);
    let b = stepper(&env, "b", 3, true);
    env.ok(&["start", "--name", "a", "--", &a]);
    env.ok(&["start", "--name", "b", "--", &b]);
    for line in ["a1", "b1", "b2", "a2", "b3", "a3"] {
        step(&env, &line[..1], line);
    }
    let got: Vec<String> = json_lines(&env, &["logs"])
        .iter()
        .map(|l| l["line"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ["a1", "b1", "b2", "a2", "b3", "a3"]);
    // As text: each line with its app and stream.
    let text = env.ok(&["logs"]);
    let tags: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        tags,
        ["a|out|", "b|err|", "b|err|", "a|out|", "b|err|", "a|out|"]
    );
    // --raw: the lines alone, as pm2's --raw and journalctl -o cat.
    let raw = env.ok(&["logs", "--raw"]);
    assert_eq!(
        raw.lines().collect::<Vec<_>>(),
        ["a1", "b1", "b2", "a2", "b3", "a3"]
    );
    // --since today: midnight has passed for every line just written.
    assert_eq!(
        env.ok(&["logs", "--raw", "--since", "today"])
            .lines()
            .count(),
        6
    );
    assert_eq!(env.ok(&["logs", "--since", "now", "--until", "now"]), "");
    // -n: the last lines of each stream, still merged.
    let got: Vec<String> = json_lines(&env, &["logs", "-n", "1"])
        .iter()
        .map(|l| l["line"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, ["b3", "a3"]);
}

#[test]
fn since_and_until_select_the_lines_of_a_window() {
    let env = Env::new();
    let a = stepper(&env, "w", 4, false);
    env.ok(&["start", "--name", "w", "--", &a]);
    let t1 = step(&env, "w", "w1");
    let t2 = step(&env, "w", "w2");
    let t3 = step(&env, "w", "w3");
    let t4 = step(&env, "w", "w4");
    let lines = |args: &[&str]| -> Vec<String> {
        json_lines(&env, args)
            .iter()
            .map(|l| l["line"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(lines(&["logs", "w", "--since", &t2]), ["w2", "w3", "w4"]);
    assert_eq!(lines(&["logs", "w", "--until", &t2]), ["w1", "w2"]);
    assert_eq!(
        lines(&["logs", "w", "--since", &t2, "--until", &t3]),
        ["w2", "w3"]
    );
    assert_eq!(lines(&["logs", "w", "--since", &t4]), ["w4"]);
    assert!(lines(&["logs", "w", "--until", "2000-01-01"]).is_empty());
    // Durations ago: everything of the last hour, nothing of the future.
    assert_eq!(lines(&["logs", "w", "--since", "1h"]).len(), 4);
    // -n with a window: the last of the window's lines.
    assert_eq!(
        lines(&["logs", "w", "--since", &t1, "-n", "2"]),
        ["w3", "w4"]
    );
    // JSON carries the time as its own field, the line without it.
    let first = &json_lines(&env, &["logs", "w", "-n", "1"])[0];
    assert_eq!(first["at"], t4.as_str());
    assert_eq!(first["line"], "w4");
    // Text keeps the line as stored, stamp first.
    let text = env.ok(&["logs", "w", "-n", "1"]);
    assert_eq!(text.trim_end(), format!("w|out| {t4} w4"));
    // A time the daemon cannot read is refused, nothing printed.
    let r = env.raw("daemon.sock").call(serde_json::json!({
        "id": 1, "op": "logs", "target": "w", "since": "soon"
    }));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
}

#[test]
fn show_speaks_in_human_units_and_ends_with_the_last_lines() {
    let env = Env::new();
    let app = env.script(
        "talk",
        "i=1; while [ $i -le 30 ]; do echo said $i; i=$((i+1)); done; sleep 100000",
    );
    env.ok(&[
        "start",
        "--name",
        "web",
        "--max-memory-restart",
        "200M",
        "--kill-timeout",
        "5s",
        "--",
        &app,
    ]);
    env.wait(20, "the app's lines", || {
        env.ok(&["logs", "web", "-n", "1"]).contains("said 30")
    });
    let out = env.ok(&["show", "web"]);
    for want in [
        "max memory      200 MiB",
        "kill timeout    5s",
        "uptime ",
        "(since 20",
        "said 30",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    // The last 10 lines by default, as many as asked with -n, none with 0.
    let said = |o: &str| o.lines().filter(|l| l.contains("said ")).count();
    assert_eq!(said(&out), 10);
    assert!(!out.contains("said 20\n"), "{out}");
    assert_eq!(said(&env.ok(&["show", "web", "-n", "3"])), 3);
    assert_eq!(said(&env.ok(&["show", "web", "-n", "0"])), 0);
    // JSON stays the daemon's answer.
    let v = env.json(&["show", "web"]);
    assert_eq!(v[0]["spec"]["max_memory_bytes"], 200 * 1024 * 1024);
}

#[test]
fn audit_by_class_and_age() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let as_ai = |label: &str, args: &[&str]| {
        env.cmd()
            .env("OXIDEPM_ACTOR", format!("ai:{label}"))
            .args(args)
            .output()
            .unwrap()
    };
    assert!(as_ai("assistant", &["restart", "web"]).status.success());
    assert!(as_ai("helper", &["restart", "web"]).status.success());
    let rows = env.json(&["audit", "--actor", "ai", "--since", "1h"]);
    let actors: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["actor"].as_str().unwrap())
        .collect();
    assert!(
        actors.contains(&"ai:assistant") && actors.contains(&"ai:helper"),
        "{rows}"
    );
    assert!(actors.iter().all(|a| a.starts_with("ai:")), "{rows}");
    // A label still narrows; a class of which there is none finds none.
    let one = env.json(&["audit", "--actor", "ai:helper"]);
    assert!(one
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["actor"] == "ai:helper"));
    assert!(env
        .json(&["audit", "--actor", "adapter"])
        .as_array()
        .unwrap()
        .is_empty());
    // A window in the past has none of it; until now has all of it.
    let past = env.json(&["audit", "--actor", "ai", "--until", "2000-01-01"]);
    assert!(past.as_array().unwrap().is_empty());
    let until_now = env.json(&["audit", "--actor", "ai", "--until", "0s"]);
    assert_eq!(until_now.as_array().unwrap().len(), actors.len());
}

#[test]
fn stop_restart_and_delete_of_an_app_file_act_on_its_apps() {
    let env = Env::new();
    let file = env.path("apps.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"api\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n\
         [[apps]]\nname = \"worker\"\nscript = \"sleep\"\nargs = [\"100000\"]\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    env.ok(&["start", f]);
    env.ok(&["start", "--name", "other", "--", "sleep", "100000"]);
    env.wait_status("api", "online");
    env.wait_status("worker", "online");
    let other = env.pid("other");

    env.ok(&["stop", f]);
    assert_eq!(env.app("api")["status"], "stopped");
    assert_eq!(env.app("worker")["status"], "stopped");
    assert_eq!(
        env.pid("other"),
        other,
        "an app not in the file is untouched"
    );

    env.ok(&["restart", f]);
    env.wait_status("api", "online");
    env.wait_status("worker", "online");

    env.ok(&["delete", f]);
    let names: Vec<String> = env
        .status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["other"]);
    assert_eq!(env.pid("other"), other);

    // A file that is not an app file is a name like any other.
    let err = env.fails(&["stop", env.script("run.sh", "sleep 1").as_str()]);
    assert!(err.contains("E_NOT_FOUND"), "{err}");
    assert_eq!(env.pid("other"), other);
}

#[test]
fn events_since_a_time() {
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.wait_status("web", "online");
    let all = env.json(&["events", "web"]);
    let n = all.as_array().unwrap().len();
    assert!(n > 0);
    assert_eq!(
        env.json(&["events", "--since", "1h"])
            .as_array()
            .unwrap()
            .len(),
        n
    );
    let last = all.as_array().unwrap().last().unwrap()["at"]
        .as_str()
        .unwrap()
        .to_string();
    let since_last = env.json(&["events", "web", "--since", &last]);
    assert!(since_last
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["at"].as_str().unwrap() >= last.as_str()));
    assert!(!since_last.as_array().unwrap().is_empty());
    // The future has no events yet.
    let future = env.json(&["events", "--since", "2999-01-01"]);
    assert!(future.as_array().unwrap().is_empty());
}

#[test]
fn logs_with_no_target_are_the_apps_the_caller_may_read() {
    let env = Env::new();
    env.daemon_toml("[adapters.chat]\ntier = \"read\"\napps = [\"web\"]\n");
    let web = env.script("web", "echo web-line; sleep 100000");
    let vault = env.script("vault", "echo vault-secret; sleep 100000");
    env.ok(&["start", "--name", "web", "--", &web]);
    env.ok(&["start", "--name", "vault", "--", &vault]);
    env.wait(20, "both apps' lines", || {
        let all = env.ok(&["logs"]);
        all.contains("web-line") && all.contains("vault-secret")
    });
    // The adapter's own CLI, inside its process tree, is the adapter.
    let out = env.path("chat.out");
    let err = env.path("chat.err");
    let script = format!(
        "OXIDEPM_HOME={} {} logs > {} 2> {}; echo done >> {}; sleep 100000",
        env.home.display(),
        bin("oxidepm").display(),
        out.display(),
        err.display(),
        err.display()
    );
    env.ok(&[
        "start", "--name", "chat", "--kind", "adapter", "--", "sh", "-c", &script,
    ]);
    env.wait(20, "the adapter's logs", || read(&err).contains("done"));
    let seen = read(&out);
    assert!(seen.contains("web-line"), "{seen} {}", read(&err));
    assert!(!seen.contains("vault-secret"), "{seen}");
    // Naming every app is still refused to it whole.
    let script = format!(
        "OXIDEPM_HOME={} {} logs all 2> {}; sleep 100000",
        env.home.display(),
        bin("oxidepm").display(),
        env.path("all.err").display()
    );
    env.ok(&["delete", "chat"]);
    env.ok(&[
        "start", "--name", "chat", "--kind", "adapter", "--", "sh", "-c", &script,
    ]);
    env.wait(20, "the refusal", || {
        read(&env.path("all.err")).contains("E_POLICY_DENIED")
    });
}

#[test]
fn an_agent_reads_a_window_and_its_apps_through_its_ops_lane() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"w\"]\n");
    let w = stepper(&env, "w", 3, false);
    let vault = env.script("vault", "echo vault-secret; sleep 100000");
    env.ok(&["start", "--name", "w", "--", &w]);
    env.ok(&["start", "--name", "vault", "--", &vault]);
    step(&env, "w", "w1");
    let t2 = step(&env, "w", "w2");
    let t3 = step(&env, "w", "w3");
    crate::lanes::start_agents(&env, &["alice"]);
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    let lines = |r: &Value| -> Vec<String> {
        r["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|l| l["line"].as_str().unwrap().to_string())
            .collect()
    };
    let ask = |alice: &mut redis::Connection, req: Value| {
        crate::ops::ops_answer(alice, "alice", &req.to_string())
    };
    let r = ask(
        &mut alice,
        serde_json::json!({"op": "logs", "target": "w", "since": t2}),
    );
    let got = lines(&r);
    assert!(
        got.len() == 2 && got[0].ends_with(" w2") && got[1].ends_with(" w3"),
        "{r}"
    );
    let r = ask(
        &mut alice,
        serde_json::json!({"op": "logs", "target": "w", "since": t2, "until": t2}),
    );
    assert_eq!(lines(&r).len(), 1, "{r}");
    let r = ask(
        &mut alice,
        serde_json::json!({"op": "logs", "target": "w", "until": t3}),
    );
    assert_eq!(lines(&r).len(), 3, "{r}");
    // No target: its own lines and its grant's, not vault's.
    let r = ask(&mut alice, serde_json::json!({"op": "logs"}));
    let text = r.to_string();
    assert!(
        text.contains(" w3") && !text.contains("vault-secret"),
        "{r}"
    );
    // A time it cannot read is refused.
    let r = ask(
        &mut alice,
        serde_json::json!({"op": "logs", "target": "w", "since": "soon"}),
    );
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
}

#[test]
fn a_file_wins_over_an_app_of_the_same_name_and_the_id_names_the_app() {
    let env = Env::new();
    std::fs::write(
        env.path("x.toml"),
        "[[apps]]\nname = \"inner\"\nscript = \"sleep\"\nargs = [\"100000\"]\n",
    )
    .unwrap();
    let here = |args: &[&str]| {
        let o = env
            .cmd()
            .current_dir(env.dir.path())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
    };
    here(&["start", "x.toml"]);
    env.ok(&["start", "--name", "x.toml", "--", "sleep", "100000"]);
    env.wait_status("inner", "online");
    env.wait_status("x.toml", "online");
    let app = env.pid("x.toml");
    // In the directory that holds the file, `x.toml` is the file (as pm2).
    here(&["stop", "x.toml"]);
    assert_eq!(env.app("inner")["status"], "stopped");
    assert_eq!(env.pid("x.toml"), app);
    // Elsewhere it is the app.
    env.ok(&["stop", "x.toml"]);
    assert_eq!(env.app("x.toml")["status"], "stopped");
    // And its id names it anywhere.
    env.ok(&["start", "x.toml"]);
    env.wait_status("x.toml", "online");
    let id = env.app("x.toml")["id"].to_string();
    here(&["stop", &id]);
    assert_eq!(env.app("x.toml")["status"], "stopped");
}

/// `--until` with `-n`: the last lines of the window, as journalctl's
/// `-n 1 --until T` gives the last entry before T; the newest lines of
/// the log are after the window and must not hide it. The same through
/// an agent's ops lane, whose `lines` has a default.
#[test]
fn a_window_that_ended_gives_its_own_last_lines() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"w\"]\n");
    let w = stepper(&env, "w", 3, false);
    env.ok(&["start", "--name", "w", "--", &w]);
    let t1 = step(&env, "w", "w1");
    let t2 = step(&env, "w", "w2");
    step(&env, "w", "w3");
    let text = |args: &[&str]| -> Vec<String> {
        json_lines(&env, args)
            .iter()
            .map(|l| l["line"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(text(&["logs", "w", "--until", &t1, "-n", "1"]), ["w1"]);
    assert_eq!(text(&["logs", "w", "--until", &t2, "-n", "1"]), ["w2"]);
    assert_eq!(
        text(&["logs", "w", "--since", &t1, "--until", &t2, "-n", "5"]),
        ["w1", "w2"]
    );
    crate::lanes::start_agents(&env, &["alice"]);
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    let req = serde_json::json!({"op": "logs", "target": "w", "until": t1, "lines": 1});
    let r = crate::ops::ops_answer(&mut alice, "alice", &req.to_string());
    let got: Vec<&str> = r["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{r}");
    assert!(got[0].ends_with(" w1"), "{r}");
}
