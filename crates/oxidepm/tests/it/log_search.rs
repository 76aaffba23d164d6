//! `logs --grep`: the matches of a pattern across current and rotated
//! files, with context, within the caller's read scope.

use crate::harness::{strs, Env};
use oxidepm_testkit::words;
use serde_json::Value;

/// Starts `app`, which writes a needle, enough filler to rotate its log
/// (1 MiB files) three times, a second needle, then sleeps; waits until
/// the second needle is written.
fn rotated_needles(env: &Env, app: &str) {
    let body = "echo needle-old; \
        awk 'BEGIN { for (i = 1; i <= 60000; i++) printf \"filler %06d ..........................................\\n\", i }'; \
        echo needle-new; exec sleep 100000";
    let script = env.script(app, body);
    let spec = serde_json::json!({"apps": [{
        "name": app, "script": script, "log_max_size": 1 << 20, "log_files_kept": 5,
    }]});
    let file = env.path(&format!("{app}.json"));
    std::fs::write(&file, spec.to_string()).unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.wait(60, "the second needle", || {
        env.ok(&["logs", app, "-n", "1"]).contains("needle-new")
    });
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn grep_finds_lines_in_rotated_files_with_their_context() {
    let env = Env::new();
    rotated_needles(&env, "n");
    assert!(
        env.home.join("logs/n-out.log.3").exists(),
        "three rotations"
    );

    let got = json_lines(&env.ok(&["logs", "n", "--grep", "needle", "--json"]));
    let texts: Vec<&str> = got.iter().map(|l| l["line"].as_str().unwrap()).collect();
    assert_eq!(texts, ["needle-old", "needle-new"]);
    assert!(got.iter().all(|l| l["matched"] == true));

    // Context: the filler lines either side, marked as context.
    let got = json_lines(&env.ok(&["logs", "n", "--grep", "needle-new", "-C", "2", "--json"]));
    let shape: Vec<(bool, bool)> = got
        .iter()
        .map(|l| {
            (
                l["matched"] == true,
                l["line"].as_str().unwrap().starts_with("filler"),
            )
        })
        .collect();
    assert_eq!(shape, [(false, true), (false, true), (true, false)]);
    let text = env.ok(&["logs", "n", "--grep", "needle-new", "-C", "1"]);
    assert!(
        text.starts_with("n|out- ") && text.contains(" filler ") && text.contains("n|out| "),
        "{text}"
    );

    // The newest match only: the person is told older ones exist.
    let o = env.run(&["logs", "n", "--grep", "needle", "-n", "1"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("needle-new") && !out.contains("needle-old"),
        "{out}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("older matches were left out"));

    // A regular expression, only when asked for; the stamp is not searched.
    assert_eq!(
        env.ok(&["logs", "n", "--grep", "needle-(old|new)", "--regex"])
            .lines()
            .count(),
        2
    );
    assert_eq!(
        env.ok(&["logs", "n", "--grep", "needle-(old|new)"])
            .lines()
            .count(),
        0
    );
    assert_eq!(
        env.ok(&["logs", "n", "--grep", "T", "-n", "5"])
            .lines()
            .count(),
        0
    );
}

#[test]
fn a_bad_pattern_is_refused_with_what_is_wrong() {
    let env = Env::new();
    env.ok(&strs(&words("start --name a -- sleep 100000")));
    let err = env.fails(&["logs", "a", "--grep", "(", "--regex"]);
    assert!(
        err.contains("E_BAD_REQUEST") && err.contains("not a regular expression"),
        "{err}"
    );
    let err = env.fails(&["logs", "a", "--grep", "x", "-C", "11"]);
    assert!(
        err.contains("at most 10") || err.contains("10 lines"),
        "{err}"
    );
    let mut raw = env.raw("daemon.sock");
    let huge = "x".repeat(5000);
    let r = raw.call(serde_json::json!({"id": 1, "op": "logs", "target": "a", "grep": huge}));
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    // The connection goes on.
    let r = raw.call(serde_json::json!({"id": 2, "op": "ping"}));
    assert!(r["ok"] == true || r.get("result").is_some(), "{r}");
}

#[test]
fn an_agent_searches_only_what_it_may_read_through_its_ops_lane() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"w\"]\n");
    let w = env.script("w", "echo token-w; echo after-w; sleep 100000");
    let vault = env.script("vault", "echo token-vault; sleep 100000");
    env.ok(&["start", "--name", "w", "--", &w]);
    env.ok(&["start", "--name", "vault", "--", &vault]);
    env.wait(20, "both apps' lines", || {
        let all = env.ok(&["logs"]);
        all.contains("after-w") && all.contains("token-vault")
    });
    crate::lanes::start_agents(&env, &["alice"]);
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    let req = serde_json::json!({"op": "logs", "grep": "token", "context": 1});
    let r = crate::ops::ops_answer(&mut alice, "alice", &req.to_string());
    let lines = r["result"].as_array().unwrap_or_else(|| panic!("{r}"));
    let got: Vec<(String, bool)> = lines
        .iter()
        .map(|l| {
            (
                l["line"].as_str().unwrap().to_string(),
                l["matched"] == true,
            )
        })
        .collect();
    assert!(got.iter().any(|(l, m)| l.ends_with("token-w") && *m), "{r}");
    assert!(
        got.iter().any(|(l, m)| l.ends_with("after-w") && !*m),
        "{r}"
    );
    assert!(!r.to_string().contains("token-vault"), "{r}");
    let req = serde_json::json!({"op": "logs", "target": "vault", "grep": "token"});
    let r = crate::ops::ops_answer(&mut alice, "alice", &req.to_string());
    assert!(r["error"]["code"].is_string(), "{r}");
}
