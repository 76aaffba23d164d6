//! The files the daemon writes for the proxy and the bridge, read back by
//! their own loaders: they must be what the hand-built JSON of earlier
//! versions was.

use super::handle::{AgentLane, Lanes};
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
             "uid": 1001, "rate_limit": 50.0, "maxlen": 1000, "quota": 16777216,
             "max_connections": 4},
            {"name": "bob", "password_file": root.join("secrets/agent_bob"),
             "uid": null, "rate_limit": 50.0, "maxlen": 1000, "quota": 16777216,
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

fn settings_error(text: &str) -> String {
    let s: LanesSettings = match toml::from_str(text) {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    s.check().expect_err(text).to_string()
}

#[test]
fn shared_settings_that_cannot_work_are_refused_with_the_reason() {
    let e = settings_error("redis_url = \"redis+cluster://h:7000\"\nkey_form = \"plain\"");
    assert!(e.contains("Cluster") && e.contains("tagged"), "{e}");
    let e = settings_error("redis_url = \"redis://h:6379\"\ntls_ca_file = \"/ca.pem\"");
    assert!(e.contains("rediss://"), "{e}");
    let e = settings_error("redis_url = \"rediss://h:6379\"\ntls_cert_file = \"/c.pem\"");
    assert!(e.contains("tls_key_file"), "{e}");
    let e = settings_error("redis_url = \"redis://h:6379\"\nhost_id = \"Host A\"");
    assert!(e.contains("host_id"), "{e}");
    let e = settings_error("redis_url = \"redis://h:6379\"\nlease_secs = 1");
    assert!(e.contains("lease_secs"), "{e}");
    let e = settings_error("redis_url = \"redis://u:pw@h:6379\"");
    assert!(e.contains("secrets/lanes_admin"), "{e}");
}

#[test]
fn the_key_form_follows_the_server_unless_set() {
    use oxidepm_lanes::KeyForm;
    let s: LanesSettings = toml::from_str("").unwrap();
    assert_eq!(s.key_form(), KeyForm::Plain);
    let s: LanesSettings = toml::from_str("redis_url = \"rediss://h:6380\"").unwrap();
    assert_eq!(s.key_form(), KeyForm::Tagged);
    let s: LanesSettings =
        toml::from_str("redis_url = \"rediss://h:6380\"\nkey_form = \"plain\"").unwrap();
    assert_eq!(s.key_form(), KeyForm::Plain);
}

#[test]
fn the_default_host_id_is_a_host_id_and_differs_per_home() {
    use super::settings::{default_host_id, is_host_id};
    let a = default_host_id("Build.Example.ORG", Path::new("/home/a/.oxidepm"));
    let b = default_host_id("Build.Example.ORG", Path::new("/home/b/.oxidepm"));
    assert!(is_host_id(&a) && is_host_id(&b), "{a} {b}");
    assert!(a.starts_with("build-example-org-"), "{a}");
    assert_ne!(a, b);
    assert!(is_host_id(&default_host_id("", Path::new("/"))));
    assert!(is_host_id(&default_host_id(
        &"x".repeat(300),
        Path::new("/")
    )));
}

#[test]
fn on_a_shared_server_the_proxy_and_bridge_are_told_where_and_how() {
    let d = tempfile::tempdir().unwrap();
    let l = lanes(
        d.path(),
        "redis_url = \"rediss://redis.example:6380\"\ntls_ca_file = \"/etc/ca.pem\"\n\
         host_id = \"host-a\"\n[webhook]\n",
    );
    l.write_proxy_conf(&agents(), &[]).unwrap();
    let p = ProxyConfig::load(&l.layout.proxy_conf()).unwrap();
    assert_eq!(p.upstream.to_string(), "rediss://redis.example:6380");
    assert_eq!(p.tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(p.key_form, oxidepm_lanes::KeyForm::Tagged);
    assert!(l.write_bridge_conf(&agents(), &[]).unwrap());
    let b = BridgeConfig::load(&l.layout.bridge_conf()).unwrap();
    assert_eq!(b.redis.to_string(), "rediss://redis.example:6380");
    assert_eq!(b.tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(b.key_form, oxidepm_lanes::KeyForm::Tagged);
    assert_eq!(b.user, "bridge@host-a");
    assert_eq!(b.outbox.consumer, "host-a");
    // Per-host users carry the host id; agents' do not.
    assert_eq!(
        l.user_name(&oxidepm_lanes::AclUser::Bridge),
        "bridge@host-a"
    );
    assert_eq!(
        l.user_name(&oxidepm_lanes::AclUser::Responder("ops".into())),
        "resp_ops@host-a"
    );
    assert_eq!(
        l.user_name(&oxidepm_lanes::AclUser::Agent("alice".parse().unwrap())),
        "agent_alice"
    );
}

#[test]
fn an_unknown_lanes_key_lists_the_source_tables_where_they_were() {
    let e = toml::from_str::<LanesSettings>("bogus = 1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "expected one of `backend`, `appendfsync`, `sources`, `responders`, `rate_limit`, \
             `maxlen`, `routes`, `default_agent`, `webhook`, `email`, `bridge_user`, `bridge`, \
             `maxmemory`, `agent_quota`, `max_connections`, `limits`, `lane_url_scheme`, \
             `consult`, `consult_limits`, `responder_inbox_maxlen`, `discord`, \
             `responder_reply_max_bytes`, `redis_url`, `tls_ca_file`, `tls_cert_file`, \
             `tls_key_file`, `key_form`, `host_id`, `lease_secs`"
        ),
        "{e}"
    );
}

#[test]
fn each_source_s_check_names_its_table() {
    let bad = |text: &str| {
        let s: LanesSettings = toml::from_str(text).unwrap();
        s.check().unwrap_err().to_string()
    };
    assert_eq!(
        bad("[webhook.limits]\nbody_ms = 0"),
        "lanes.webhook.limits.body_ms must be positive: 0 would refuse every request"
    );
    assert_eq!(
        bad("[discord]\nenabled = true"),
        "[lanes.discord] is enabled but \"discord\" is not in lanes.sources [\"webhook\", \"email\"]; \
         add it (sources = [\"webhook\", \"email\", \"discord\"])"
    );
    assert_eq!(
        bad("sources = [\"discord\"]\n[discord]\nenabled = true\napi_url = \"ftp://x\""),
        "lanes.discord.api_url \"ftp://x\": use http://host[:port] or https://host[:port] with no path, \
         or leave it out for https://discord.com"
    );
    // A discord table that is off is not checked, as before.
    let off: LanesSettings = toml::from_str("[discord]\napi_url = \"ftp://x\"").unwrap();
    assert!(off.check().is_ok());
}
