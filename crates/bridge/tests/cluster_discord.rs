//! The discord source with two hosts' bridges on a Redis Cluster: only the
//! holder of the gateway lease opens a session (a second IDENTIFY with
//! the bot's token would fight the first); when it dies the other takes
//! the session over; messages in and the agent's answer out work on the
//! cluster, their records in the agent's slot.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use oxidepm_discord_standin::{Msg, StandIn};
use oxidepm_lanes::bridge_config::{DiscordConfig, RouteConfig};
use oxidepm_lanes::StreamKey;
use oxidepm_testkit::cluster::Cluster;
use oxidepm_testkit::{eventually, Sink, SinkMode};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const TOKEN_BOT: &str = "bot-token-for-the-standin";
const CHANNEL: u64 = 1_100_000_000_000_000_001;

fn texts(con: &mut redis::cluster::ClusterConnection, key: &str) -> Vec<String> {
    let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(con)
        .unwrap();
    r.ids
        .iter()
        .map(|e| e.get::<String>("text").unwrap_or_default())
        .collect()
}

#[test]
fn one_gateway_session_across_hosts_and_the_other_takes_over() {
    tagged();
    let c = Cluster::start(false);
    let families = vec!["webhook".to_string(), "discord".to_string()];
    for n in &c.nodes {
        provision(&mut c.node(n.port), &families);
    }
    let alice = agent(0);
    let standin = StandIn::start(TOKEN_BOT).unwrap();
    standin.allow_channel(CHANNEL);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let token_dir = tempfile::tempdir().unwrap();
    let token_file = token_dir.path().join("discord_token");
    std::fs::write(&token_file, TOKEN_BOT).unwrap();
    let with_discord = |cfg: &mut oxidepm_lanes::BridgeConfig| {
        cfg.sources = vec!["webhook".into(), "discord".into()];
        cfg.routes = vec![RouteConfig {
            source: "discord".into(),
            channel: Some(CHANNEL.to_string()),
            guild: None,
            address: None,
            agent: alice.clone(),
        }];
        let mut d = DiscordConfig::new(token_file.clone());
        d.settings.gateway_url = Some(standin.gateway_url());
        d.settings.api_url = Some(standin.api_url());
        cfg.discord = Some(d);
    };
    let url = c.url();
    let agents = std::slice::from_ref(&alice);
    let a = BridgeProc::start(
        &url,
        c.tls_files(),
        "host-a",
        agents,
        &sink.url(),
        with_discord,
    );
    let b = BridgeProc::start(
        &url,
        c.tls_files(),
        "host-b",
        agents,
        &sink.url(),
        with_discord,
    );
    let mut con = c.root();
    assert!(standin.wait_connected(WAIT), "no gateway session");

    let inbox = StreamKey::inbox(&alice, "discord").to_string();
    standin.send_message(&Msg::new(CHANNEL, "hello from discord"));
    eventually(WAIT, "the message in alice's inbox", || {
        texts(&mut con, &inbox).len() == 1
    });
    assert_eq!(texts(&mut con, &inbox), ["hello from discord"]);
    // Both bridges are up and have asked for the lease: one session only.
    assert_eq!(standin.sessions_started(), (1, 0));

    // Alice answers in the channel (her record of it is in her slot).
    redis::cmd("XADD")
        .arg(StreamKey::outbox(&alice, "discord").to_string())
        .arg("*")
        .arg("channel")
        .arg(CHANNEL.to_string())
        .arg("text")
        .arg("hello back")
        .query::<String>(&mut con)
        .unwrap();
    assert!(standin.wait_posts(1, WAIT), "the answer was not posted");
    assert_eq!(standin.post_count(), 1);

    // The holder dies; the other host takes the lease and the session.
    let holder: String = redis::cmd("GET")
        .arg("bridge:discord:gateway")
        .query(&mut con)
        .unwrap();
    let (mut dead, mut alive) = if holder == "host-a" { (a, b) } else { (b, a) };
    dead.kill();
    eventually(WAIT, "the session taken over", || {
        let (identifies, resumes) = standin.sessions_started();
        identifies + resumes >= 2 && standin.connected()
    });
    standin.send_message(&Msg::new(CHANNEL, "after the takeover"));
    eventually(WAIT, "the second message in alice's inbox", || {
        texts(&mut con, &inbox).len() == 2
    });
    assert_eq!(
        texts(&mut con, &inbox),
        ["hello from discord", "after the takeover"]
    );
    let now: String = redis::cmd("GET")
        .arg("bridge:discord:gateway")
        .query(&mut con)
        .unwrap();
    assert_ne!(now, holder);
    alive.check_alive();
    assert!(!alive.log().contains("CROSSSLOT"), "{}", alive.log());
}
