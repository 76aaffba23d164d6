//! A bridge on a shared Redis over TLS (`rediss://`, the CA from
//! `[lanes] tls_ca_file`), in the tagged key form: a message posted to its
//! webhook reaches the agent's inbox, and the agent's answer reaches the
//! sink, the outbox read over TLS by the bridge's own reader.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use oxidepm_lanes::bridge_config::RouteConfig;
use oxidepm_lanes::StreamKey;
use oxidepm_testkit::shared::{SharedRedis, ROOT_PASSWORD, ROOT_USER};
use oxidepm_testkit::{eventually, http, Sink, SinkMode};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn one_bridge_round_trip_over_tls() {
    tagged();
    let server = SharedRedis::start(true);
    provision(&mut server.root(), &["webhook".to_string()]);
    let alice = agent(0);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let bridge = BridgeProc::start(
        &server.url(),
        server.tls_files(),
        "host-a",
        std::slice::from_ref(&alice),
        &sink.url(),
        |cfg| {
            cfg.routes = vec![RouteConfig {
                source: "webhook".into(),
                channel: Some("c1".into()),
                guild: None,
                address: None,
                agent: alice.clone(),
            }];
        },
    );
    let (status, body) = http(
        bridge.webhook,
        "POST",
        "/in/webhook",
        Some(TOKEN),
        r#"{"channel":"c1","sender":"someone","text":"hello over tls"}"#,
    );
    assert_eq!(status, 202, "{body}");
    let mut root = server.connect(ROOT_USER, ROOT_PASSWORD).unwrap();
    let inbox = StreamKey::inbox(&alice, "webhook").to_string();
    assert_eq!(inbox, "{agent0}:webhook:inbox");
    let got = eventually(WAIT, "the message in the inbox", || {
        let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&inbox)
            .arg("-")
            .arg("+")
            .query(&mut root)
            .unwrap();
        r.ids.into_iter().next()
    });
    assert_eq!(got.get::<String>("text").as_deref(), Some("hello over tls"));

    let outbox = StreamKey::outbox(&alice, "webhook").to_string();
    let id: String = redis::cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("channel")
        .arg("c1")
        .arg("text")
        .arg("answer over tls")
        .query(&mut root)
        .unwrap();
    eventually(WAIT, "the answer at the sink", || !sink.bodies().is_empty());
    assert_each_delivered(&delivered(&sink), &["answer over tls".to_string()]);
    assert_eq!(delivered(&sink)[0].1, id);
    drop(bridge);
}
