//! The files the daemon writes for the proxy and the bridge, read back by
//! their own loaders: they must be what the hand-built JSON of earlier
//! versions was.

use super::admin::{AgentLane, Lanes};
use super::layout::Layout;
use super::settings::LanesSettings;
use crate::paths::Home;
use oxidepm_lanes::{BridgeConfig, ProxyConfig};
use oxidepm_proto::Route;
use serde_json::json;
use std::path::Path;

fn lanes(root: &Path, settings: &str) -> Lanes {
    let settings: LanesSettings = toml::from_str(settings).unwrap();
    settings.check().unwrap();
    let lanes = Lanes::new(
        Layout {
            home: Home::at(root.to_path_buf()),
        },
        settings,
    );
    std::fs::create_dir_all(lanes.layout.redis_dir()).unwrap();
    lanes
}

fn agents() -> Vec<AgentLane> {
    vec![
        AgentLane {
            name: "alice".parse().unwrap(),
            uid: Some(1001),
        },
        AgentLane {
            name: "bob".parse().unwrap(),
            uid: None,
        },
    ]
}

#[test]
fn the_proxy_reads_the_configuration_the_daemon_writes() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let l = lanes(
        root,
        "rate_limit = 50.0\nmaxlen = 1000\nmaxmemory = 67108864\n\
         max_connections = 4\n[limits]\nmax_bulk = 4096\n",
    );
    l.write_proxy_conf(&agents(), &[]).unwrap();
    let got = ProxyConfig::load(&l.layout.proxy_conf()).unwrap();
    let before = json!({
        "upstream": root.join("redis/redis.sock"),
        "lanes_dir": root.join("lanes"),
        "families": ["webhook", "email", "ops"],
        "limits": {"max_bulk": 4096},
        "agents": [
            {"name": "alice", "password_file": root.join("secrets/agent_alice"),
             "uid": 1001, "rate_limit": 50.0, "maxlen": 1000, "quota": 8388608,
             "max_connections": 4},
            {"name": "bob", "password_file": root.join("secrets/agent_bob"),
             "uid": null, "rate_limit": 50.0, "maxlen": 1000, "quota": 8388608,
             "max_connections": 4},
        ],
    });
    assert_eq!(got, serde_json::from_value::<ProxyConfig>(before).unwrap());
    assert_eq!(got.agents[0].socket_mode, 0o600);
}

#[test]
fn the_bridge_reads_the_configuration_the_daemon_writes() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let l = lanes(root, r#"sources = ["webhook", "email", "discord"]"#);
    // Without settings for a source, no bridge runs.
    assert!(!l.write_bridge_conf(&agents(), &[]).unwrap());
    assert!(!l.layout.bridge_conf().exists());

    let l = lanes(
        root,
        r#"
sources = ["webhook", "email", "discord"]
default_agent = "bob"
routes = [{ source = "webhook", channel = "c1", agent = "alice" }]

[webhook]
deliver = { "*" = "http://127.0.0.1:9000/out" }

[email]
maildir = "/var/mail/agents"
smtp = "127.0.0.1:25"
from = { alice = "alice@example.org" }
"#,
    );
    let runtime = Route {
        source: "email".into(),
        channel: None,
        guild: None,
        address: Some("bob@example.org".into()),
        agent: "bob".into(),
    };
    let discord = Route {
        source: "discord".into(),
        channel: Some("d1".into()),
        guild: None,
        address: None,
        agent: "bob".into(),
    };
    let mut routes = l.settings.routes.clone();
    routes.extend([runtime.clone(), discord]);
    assert!(l.write_bridge_conf(&agents(), &routes).unwrap());
    let got = BridgeConfig::load(&l.layout.bridge_conf()).unwrap();
    let before = json!({
        "redis_socket": root.join("redis/redis.sock"),
        "password_file": root.join("bridge/password"),
        "agents": ["alice", "bob"],
        "sources": ["webhook", "email"],
        "routes": [l.settings.routes[0], runtime],
        "default_agent": "bob",
        "webhook": {
            "listen": "127.0.0.1:8787",
            "token_file": root.join("bridge/webhook_token"),
            "deliver": {"*": "http://127.0.0.1:9000/out"},
        },
        "email": {
            "maildir": "/var/mail/agents",
            "smtp": "127.0.0.1:25",
            "from": {"alice": "alice@example.org"},
            "domain": null,
        },
    });
    assert_eq!(got, serde_json::from_value::<BridgeConfig>(before).unwrap());
}

#[test]
fn the_bridge_user_must_be_a_plain_user_of_its_own() {
    for ok in ["oxidepm-bridge", "_bridge", "mail2agents", "1234"] {
        let s: LanesSettings = toml::from_str(&format!("bridge_user = {ok:?}")).unwrap();
        assert!(s.check().is_ok(), "{ok}");
    }
    for bad in [
        "root",
        "0",
        "",
        "-o",
        "Bridge",
        "a b",
        "x;y",
        &"a".repeat(33),
    ] {
        let s: LanesSettings = toml::from_str(&format!("bridge_user = {bad:?}")).unwrap();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("lanes.bridge_user"), "{bad}: {e}");
    }
}

#[test]
fn the_bridge_gets_its_bounds_and_routes_to_missing_agents_are_written() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let l = lanes(
        root,
        r#"
sources = ["webhook"]
maxlen = 500
routes = [{ source = "webhook", channel = "c1", agent = "carol" }]

[webhook]

[bridge]
max_entry_bytes = 65536
buffer_bytes = 131072
"#,
    );
    let routes = l.settings.routes.clone();
    assert!(l.write_bridge_conf(&agents(), &routes).unwrap());
    let got = BridgeConfig::load(&l.layout.bridge_conf()).unwrap();
    assert_eq!(got.inbox_maxlen, 500);
    assert_eq!(got.outbox.max_entry_bytes, 65536);
    assert_eq!(got.outbox.buffer_bytes, 131072);
    assert_eq!(got.outbox.dead_maxlen, 1_000);
    // Carol is no agent: the bridge takes the file all the same and parks
    // her route.
    assert_eq!(got.routes.len(), 1);
    assert_eq!(got.route_plan().parked.len(), 1);
    let zero: LanesSettings = toml::from_str("[bridge]\nbuffer_bytes = 0\n").unwrap();
    assert!(zero.check().is_err());
}

#[test]
fn agents_get_a_unix_url_and_the_plain_path_unless_the_old_scheme_is_asked_for() {
    use super::layout::{agent_description, agent_env};
    let layout = Layout {
        home: Home::at("/h".into()),
    };
    let alice = "alice".parse().unwrap();
    let families = ["webhook".to_string()];
    let get = |env: &[(String, String)], k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let default: LanesSettings = toml::from_str("").unwrap();
    let env = agent_env(&layout, &alice, &families, default.lane_url_scheme);
    assert_eq!(get(&env, "OXIDEPM_LANE"), "unix:///h/lanes/alice.sock");
    assert_eq!(get(&env, "OXIDEPM_LANE_SOCKET"), "/h/lanes/alice.sock");
    let desc = agent_description(&layout, &alice, &families, default.lane_url_scheme);
    assert_eq!(desc["lane"], "unix:///h/lanes/alice.sock");
    assert_eq!(desc["socket"], "/h/lanes/alice.sock");

    let old: LanesSettings = toml::from_str("lane_url_scheme = \"redis+unix\"").unwrap();
    let env = agent_env(&layout, &alice, &families, old.lane_url_scheme);
    assert_eq!(
        get(&env, "OXIDEPM_LANE"),
        "redis+unix:///h/lanes/alice.sock"
    );
    assert_eq!(get(&env, "OXIDEPM_LANE_SOCKET"), "/h/lanes/alice.sock");

    for bad in ["redis", "unix://", "UNIX", ""] {
        let e = toml::from_str::<LanesSettings>(&format!("lane_url_scheme = {bad:?}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("use \"unix\""), "{bad}: {e}");
    }
}
