//! Routes shared through Redis: a route written to `oxidepm:routes` (what
//! `oxidepm route add` does on one host with `[lanes] redis_url`) is taken
//! up by the bridges of every host without a restart, and its removal too.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use oxidepm_lanes::bridge_config::RouteConfig;
use oxidepm_lanes::shared_routes::{encode, field, SHARED_ROUTES_KEY};
use oxidepm_lanes::stream_key::UNROUTED_KEY;
use oxidepm_lanes::StreamKey;
use oxidepm_testkit::shared::{SharedRedis, ROOT_PASSWORD, ROOT_USER};
use oxidepm_testkit::{eventually, http, Sink, SinkMode};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn xlen(con: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("XLEN").arg(key).query(con).unwrap()
}

/// Posts a message of channel `c` to `bridge`'s webhook.
fn post(bridge: &BridgeProc, c: &str, text: &str) {
    let body = format!(r#"{{"channel":"{c}","sender":"someone","text":"{text}"}}"#);
    let (status, answer) = http(bridge.webhook, "POST", "/in/webhook", Some(TOKEN), &body);
    assert_eq!(status, 202, "{answer}");
}

#[test]
fn a_route_added_on_one_host_reaches_every_bridge() {
    tagged();
    let server = SharedRedis::start(false);
    provision(&mut server.root(), &["webhook".to_string()]);
    let agents = vec![agent(0), agent(1)];
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let shared = |cfg: &mut oxidepm_lanes::BridgeConfig| cfg.shared_routes = true;
    let a = BridgeProc::start(
        &server.url(),
        server.tls_files(),
        "host-a",
        &agents,
        &sink.url(),
        shared,
    );
    let b = BridgeProc::start(
        &server.url(),
        server.tls_files(),
        "host-b",
        &agents,
        &sink.url(),
        shared,
    );
    let mut root = server.connect(ROOT_USER, ROOT_PASSWORD).unwrap();
    let inbox = StreamKey::inbox(&agents[1], "webhook").to_string();

    // No route yet: unrouted, whichever host takes it.
    post(&a, "ops", "before");
    eventually(WAIT, "the unrouted message", || {
        xlen(&mut root, UNROUTED_KEY) == 1
    });
    assert_eq!(xlen(&mut root, &inbox), 0);

    // "oxidepm route add" on some host: every bridge routes by it.
    let route = RouteConfig {
        source: "webhook".into(),
        channel: Some("ops".into()),
        guild: None,
        address: None,
        agent: agents[1].clone(),
    };
    redis::cmd("HSET")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(&route))
        .arg(encode(&route))
        .query::<()>(&mut root)
        .unwrap();
    // Each bridge, once it has the route, puts the message in the inbox.
    for (i, bridge) in [&a, &b].into_iter().enumerate() {
        eventually(WAIT, "the route taken up", || {
            post(bridge, "ops", &format!("probe {i}"));
            xlen(&mut root, &inbox) > i
        });
    }
    let unrouted = xlen(&mut root, UNROUTED_KEY);
    let routed = xlen(&mut root, &inbox);
    post(&a, "ops", "routed by a");
    post(&b, "ops", "routed by b");
    assert_eq!(xlen(&mut root, &inbox), routed + 2);
    assert_eq!(xlen(&mut root, UNROUTED_KEY), unrouted);

    // Removed on some host: gone from every bridge.
    redis::cmd("HDEL")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(&route))
        .query::<()>(&mut root)
        .unwrap();
    for bridge in [&a, &b] {
        eventually(WAIT, "the route dropped", || {
            let before = xlen(&mut root, UNROUTED_KEY);
            post(bridge, "ops", "after removal");
            xlen(&mut root, UNROUTED_KEY) > before
        });
    }

    // A malformed entry stops no bridge, and the routes in force stay.
    redis::cmd("HSET")
        .arg(SHARED_ROUTES_KEY)
        .arg("webhook:channel:x")
        .arg("{not json")
        .query::<()>(&mut root)
        .unwrap();
    redis::cmd("HSET")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(&route))
        .arg(encode(&route))
        .query::<()>(&mut root)
        .unwrap();
    let before = xlen(&mut root, &inbox);
    eventually(WAIT, "the good route taken up beside a bad one", || {
        post(&a, "ops", "again");
        xlen(&mut root, &inbox) > before
    });
    let mut a = a;
    a.check_alive();
    drop(b);
}
