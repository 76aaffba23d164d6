//! Bad names in the routing table, through the daemon: a route to an agent
//! that does not exist, a default agent that does not exist, an agent
//! deleted under its routes. The bridge keeps running for everyone, the
//! messages of a parked route wait in `bridge:unrouted`, and `route list`
//! and `delete` say what happened.

use crate::harness::Env;
use oxidepm_lanes::Secret;
use oxidepm_testkit::{free_port, http, Sink, SinkMode};
use serde_json::Value;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// POSTs a message for `channel` to the webhook; returns the status code
/// and the body as JSON.
fn post(port: u16, token: &str, channel: &str) -> (u16, Value) {
    let body = format!(r#"{{"channel":"{channel}","sender":"s","text":"to {channel}"}}"#);
    let (code, text) = http(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "POST",
        "/in/webhook",
        Some(token),
        &body,
    );
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The arguments as the CLI takes them.
fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The route of `route list --json` matching `channel`.
fn route_for(env: &Env, channel: &str) -> Value {
    let list = env.json(&["route", "list"]);
    list["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["channel"] == channel)
        .cloned()
        .unwrap_or_else(|| panic!("no route for {channel}: {list}"))
}

#[test]
fn routes_to_missing_agents_are_parked_and_the_bridge_runs_on() {
    let env = Env::new();
    let port = free_port();
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    // carol and zed are never defined.
    env.daemon_toml(&format!(
        r#"
agents_share_uid = true

[lanes]
sources = ["webhook"]
default_agent = "zed"

[[lanes.routes]]
source = "webhook"
channel = "c1"
agent = "carol"

[lanes.webhook]
listen = "127.0.0.1:{port}"
deliver = {{ "*" = "{}" }}
"#,
        sink.url()
    ));
    for a in ["alice", "bob"] {
        env.ok(&[
            "start", "--kind", "agent", "--name", a, "--", "sleep", "100000",
        ]);
    }
    env.wait(20, "the bridge", || {
        env.daemon_status()
            .iter()
            .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
            && TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let token = Secret::read(&env.home.join("secrets/webhook_token"))
        .unwrap()
        .expose()
        .to_string();
    let bridge = env.pid("oxidepm-bridge");

    // The bridge took its configuration despite carol and zed.
    let (code, r) = post(port, &token, "c1");
    assert_eq!(code, 202, "{r}");
    assert_eq!(r["stream"], "bridge:unrouted", "{r}");
    let c1 = route_for(&env, "c1");
    let why = c1["parked"].as_str().unwrap_or_else(|| panic!("{c1}"));
    assert!(why.contains("\"carol\" is not defined"), "{why}");
    let list = env.json(&["route", "list"]);
    let why = list["default_agent_parked"].as_str().unwrap_or_default();
    assert!(why.contains("\"zed\""), "{list}");
    let text = env.ok(&["route", "list"]);
    assert!(
        text.contains("parked: webhook channel=c1 -> carol"),
        "{text}"
    );
    let lanes = env.ok(&["lanes"]);
    assert!(lanes.contains("parked:"), "{lanes}");

    // route add checks names and conflicts before anything changes.
    let add = |channel: &str, agent: &str| {
        vec![
            "route".to_string(),
            "add".into(),
            "--source".into(),
            "webhook".into(),
            "--channel".into(),
            channel.into(),
            "--agent".into(),
            agent.into(),
        ]
    };
    let err = env.fails(&args(&add("c3", "nobody")));
    assert!(err.contains("no agent named \"nobody\""), "{err}");
    let err = env.fails(&args(&add("c1", "alice")));
    assert!(err.contains("E_CONFLICT") && err.contains("carol"), "{err}");
    let said = env.ok(&args(&add("c2", "bob")));
    assert!(
        said.starts_with("route added: webhook channel=c2 -> bob"),
        "{said}"
    );
    // The bridge takes it up on its reload (SIGHUP).
    env.wait(20, "bob's route in force", || {
        let (code, r) = post(port, &token, "c2");
        assert_eq!(code, 202, "{r}");
        r["routed_to"] == "bob"
    });

    // Deleting bob says what happens to his route.
    let out = env.ok(&["delete", "bob"]);
    assert!(
        out.contains("routes are parked") && out.contains("webhook channel=c2 -> bob"),
        "{out}"
    );
    assert!(out.contains("bridge:unrouted"), "{out}");
    let c2 = route_for(&env, "c2");
    assert!(
        c2["parked"]
            .as_str()
            .is_some_and(|w| w.contains("\"bob\" is not defined")),
        "{c2}"
    );
    // The same bridge, still serving: bob's messages wait in
    // bridge:unrouted rather than going to anyone else.
    env.wait(20, "bob's route parked in the bridge", || {
        let (code, r) = post(port, &token, "c2");
        assert_eq!(code, 202, "{r}");
        r["stream"] == "bridge:unrouted"
    });
    assert_eq!(
        env.pid("oxidepm-bridge"),
        bridge,
        "the bridge was restarted"
    );
    let counters = &env.json(&["route", "list"])["counters"];
    assert!(
        counters["unrouted"].as_i64().unwrap_or(0) >= 2,
        "{counters}"
    );
}
