//! One bad name in the configuration does not stop the bridge: a route or
//! default agent naming an agent the bridge does not have is parked, the
//! rest works, and the bridge starts and reloads as usual.

use super::field;
use super::harness::*;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::net::SocketAddr;

#[test]
fn a_route_to_an_unknown_agent_is_parked_and_the_bridge_keeps_running() {
    let redis = Redis::start(&["alice"]);
    let port = free_port();
    let cfg = redis.config_path();
    let members = |agents: Value| {
        json!({
            "agents": agents,
            "routes": [
                {"source": "webhook", "channel": "c1", "agent": "alice"},
                {"source": "webhook", "channel": "c2", "agent": "carol"},
            ],
            "default_agent": "zed",
            "webhook": {"listen": format!("127.0.0.1:{port}")},
        })
    };
    redis.write_config(&cfg, members(json!(["alice"])));
    let log = redis.dir.path().join("bridge.log");
    // The real binary: a configuration it refused would end it here.
    let bridge = BridgeProcess::spawn(&cfg, &log);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let send = |channel: &str| {
        post(
            addr,
            "webhook",
            json!({"channel": channel, "sender": "s", "text": format!("to {channel}")}),
        )
    };
    let (st, r) = eventually(WAIT, "the listener", || {
        std::net::TcpStream::connect(addr).ok()?;
        Some(send("c1"))
    });
    assert_eq!((st, r["routed_to"].clone()), (202, json!("alice")), "{r}");
    let (st, r) = send("c2");
    assert_eq!(
        (st, r["stream"].clone()),
        (202, json!("bridge:unrouted")),
        "{r}"
    );
    assert_eq!(r["routed_to"], Value::Null);
    let (st, r) = send("c9");
    assert_eq!(
        (st, r["stream"].clone()),
        (202, json!("bridge:unrouted")),
        "{r}"
    );

    let mut admin = redis.admin();
    let unrouted = entries(&mut admin, "bridge:unrouted");
    assert_eq!(unrouted.len(), 2);
    let why = field(&unrouted[0], "unrouted_reason");
    assert!(why.contains("\"carol\" is not defined"), "{why}");
    let why = field(&unrouted[1], "unrouted_reason");
    assert!(
        why.contains("default_agent parked") && why.contains("\"zed\""),
        "{why}"
    );
    let text = bridge.log();
    assert!(text.contains("is parked"), "{text}");
    assert!(bridge.child.id() > 0);

    // Carol becomes an agent of the bridge: her route is in force after a
    // reload, without a restart.
    redis.write_config(&cfg, members(json!(["alice", "carol"])));
    bridge.signal(Signal::SIGHUP);
    let r = eventually(WAIT, "carol's route in force", || {
        let (st, r) = send("c2");
        assert_eq!(st, 202, "{r}\n{}", bridge.log());
        (r["routed_to"] == "carol").then_some(r)
    });
    assert_eq!(r["stream"], "carol:webhook:inbox");
    // Alice's route never stopped working.
    let (_, r) = send("c1");
    assert_eq!(r["routed_to"], "alice", "{r}");

    // A configuration the bridge cannot take: it keeps the one it has,
    // and says so where the daemon looks.
    std::fs::write(&cfg, "{ not json").unwrap();
    bridge.signal(Signal::SIGHUP);
    let status = |admin: &mut oxidepm_testkit::Client| {
        admin.cmd(&["HGET", "bridge:status", "reload_error"]).text()
    };
    let why = eventually(WAIT, "the failed reload recorded", || status(&mut admin));
    assert!(why.contains("not a valid configuration"), "{why}");
    let (_, r) = send("c2");
    assert_eq!(r["routed_to"], "carol", "{r}");
    redis.write_config(&cfg, members(json!(["alice", "carol"])));
    bridge.signal(Signal::SIGHUP);
    eventually(WAIT, "the failure cleared", || {
        status(&mut admin).is_none().then_some(())
    });
}
