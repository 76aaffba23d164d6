//! `reload-daemon-config` and SIGHUP: daemon.toml read again by a running
//! daemon, every app left running.

use crate::harness::{kill, Env};
use serde_json::{json, Value};

const BASE: &str = "[lanes]\nbackend = \"off\"\n";

/// The tier the daemon gives a client claiming to be `ai:bot`.
fn ai_tier(env: &Env) -> Value {
    let r = env
        .raw("daemon.sock")
        .call(json!({"id": 1, "op": "whoami", "claim": "ai:bot"}));
    r["result"]["tier"].clone()
}

fn started(env: &Env) -> u32 {
    env.daemon_toml(BASE);
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.wait_status("web", "online");
    env.pid("web")
}

#[test]
fn a_lowered_ai_tier_applies_at_once_and_no_app_restarts() {
    let env = Env::new();
    let pid = started(&env);
    assert_eq!(ai_tier(&env), "control");
    env.daemon_toml(&format!(
        "agent_socket = false\nrestart_rate = 50\n{BASE}[tiers]\nai = \"read\"\n"
    ));
    let r = env.json(&["reload-daemon-config"]);
    assert_eq!(r["applied"], json!(["restart_rate", "tiers.ai"]), "{r}");
    assert_eq!(r["not_applied"][0]["key"], "agent_socket", "{r}");
    assert!(r["not_applied"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("next daemon start"));
    // The agent that could restart web a moment ago no longer can.
    assert_eq!(ai_tier(&env), "read");
    let refused = env
        .raw("daemon.sock")
        .call(json!({"id": 2, "op": "restart", "target": "web", "claim": "ai:bot"}));
    assert_eq!(refused["error"]["code"], "E_POLICY_DENIED", "{refused}");
    assert_eq!(env.pid("web"), pid, "a reload restarted an app");
    // agent.sock is not closed by a reload: it waits for the next start.
    assert!(env.home.join("agent.sock").exists());
    let audit = env.json(&["audit", "--limit", "20"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["op"] == "reload-daemon-config"
                && a["outcome"] == "ok"
                && a["actor"].as_str().unwrap().starts_with("human:")),
        "{audit}"
    );
}

#[test]
fn a_broken_file_changes_nothing_and_names_its_line() {
    let env = Env::new();
    let pid = started(&env);
    env.daemon_toml(&format!("restart_rate = 0\n{BASE}[tiers]\nai = \"read\"\n"));
    let e = env.fails(&["reload-daemon-config"]);
    assert!(e.contains("restart_rate must be at least 1"), "{e}");
    assert!(e.contains("nothing was changed"), "{e}");
    env.daemon_toml(&format!("{BASE}[tiers\nai = \"read\"\n"));
    let e = env.fails(&["reload-daemon-config"]);
    assert!(e.contains("line 3"), "{e}");
    // The old policy stays: the ai class keeps its tier.
    assert_eq!(ai_tier(&env), "control");
    assert_eq!(env.pid("web"), pid);
    // Fixed, it applies.
    env.daemon_toml(&format!("{BASE}[tiers]\nai = \"read\"\n"));
    env.ok(&["reload-daemon-config"]);
    assert_eq!(ai_tier(&env), "read");
}

#[test]
fn sighup_to_the_daemon_reloads_and_is_audited() {
    let env = Env::new();
    let pid = started(&env);
    // A broken file first: audited as failed, and nothing changes.
    env.daemon_toml(&format!("{BASE}[tiers]\nai = \"sudo\"\n"));
    kill(env.daemon_pid(), libc::SIGHUP);
    env.wait(10, "the failed SIGHUP reload in the audit", || {
        env.json(&["audit", "--limit", "20"])
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["op"] == "reload-daemon-config" && a["outcome"] == "E_BAD_REQUEST")
    });
    assert_eq!(ai_tier(&env), "control");
    env.daemon_toml(&format!("{BASE}[tiers]\nai = \"read\"\n"));
    kill(env.daemon_pid(), libc::SIGHUP);
    env.wait(10, "the SIGHUP reload", || ai_tier(&env) == "read");
    assert_eq!(env.pid("web"), pid);
    let audit = env.json(&["audit", "--limit", "20"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["op"] == "reload-daemon-config"
                && a["actor"].as_str().unwrap().contains("SIGHUP")
                && a["message"].as_str().unwrap().contains("tiers.ai")),
        "{audit}"
    );
}

#[test]
fn reload_never_starts_a_daemon() {
    let env = Env::new();
    let e = env.fails(&["reload-daemon-config"]);
    assert!(e.contains("no daemon"), "{e}");
    assert!(!env.home.join("daemon.sock").exists());
}

#[test]
fn an_agent_may_not_make_the_daemon_reload_its_policy() {
    let env = Env::new();
    let pid = started(&env);
    env.daemon_toml(&format!("{BASE}[tiers]\nai = \"read\"\n"));
    let r = env
        .raw("daemon.sock")
        .call(json!({"id": 1, "op": "reload_daemon_config", "claim": "ai:bot"}));
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
    assert_eq!(ai_tier(&env), "control", "the refused reload applied");
    assert_eq!(env.pid("web"), pid);
}
