//! Several hosts' bridges on one Redis Cluster (three primaries, three
//! replicas), each the real binary with its own consumer name: agents'
//! outboxes on different primaries are drained in one consumer group, each
//! entry delivered once; a bridge killed mid-delivery loses nothing; a
//! primary failing over loses no acknowledged entry; agents consult each
//! other across slots without CROSSSLOT.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use oxidepm_lanes::consult::{ConsultConfig, ConsultRule};
use oxidepm_lanes::{AgentName, StreamKey};
use oxidepm_testkit::cluster::Cluster;
use oxidepm_testkit::{eventually, Sink, SinkMode};
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// The cluster with the bridges' user on every node, replicas included
/// (ACLs are not replicated).
fn cluster(families: &[&str]) -> Cluster {
    tagged();
    let c = Cluster::start(false);
    let families: Vec<String> = families.iter().map(|f| f.to_string()).collect();
    for n in &c.nodes {
        provision(&mut c.node(n.port), &families);
    }
    c
}

/// Agent `a` writes `text` to its webhook outbox.
fn send(con: &mut redis::cluster::ClusterConnection, a: &AgentName, text: &str) {
    let key = StreamKey::outbox(a, "webhook").to_string();
    redis::cmd("XADD")
        .arg(&key)
        .arg("*")
        .arg("channel")
        .arg("c1")
        .arg("text")
        .arg(text)
        .query::<String>(con)
        .unwrap();
}

/// Entries of `agents`' webhook outboxes read and not yet acknowledged.
fn pending(con: &mut redis::cluster::ClusterConnection, agents: &[AgentName]) -> i64 {
    agents
        .iter()
        .map(|a| {
            let key = StreamKey::outbox(a, "webhook").to_string();
            let v: redis::Value = redis::cmd("XPENDING")
                .arg(&key)
                .arg("bridge")
                .query(con)
                .unwrap_or(redis::Value::Nil);
            match v {
                redis::Value::Array(v) => match v.first() {
                    Some(redis::Value::Int(n)) => *n,
                    _ => 0,
                },
                _ => 0,
            }
        })
        .sum()
}

/// Entries of `agents`' webhook outboxes pending with `consumer`.
fn pending_with(
    con: &mut redis::cluster::ClusterConnection,
    agents: &[AgentName],
    consumer: &str,
) -> usize {
    agents
        .iter()
        .map(|a| {
            let key = StreamKey::outbox(a, "webhook").to_string();
            let v: Vec<redis::Value> = redis::cmd("XPENDING")
                .arg(&key)
                .arg("bridge")
                .arg("-")
                .arg("+")
                .arg(1000)
                .arg(consumer)
                .query(con)
                .unwrap_or_default();
            v.len()
        })
        .sum()
}

/// Agents whose outboxes are on at least two different primaries.
fn spread_agents(c: &Cluster, n: usize) -> Vec<AgentName> {
    let agents: Vec<AgentName> = (0..n).map(agent).collect();
    let primaries: BTreeSet<u16> = agents
        .iter()
        .map(|a| c.primary_of(&StreamKey::outbox(a, "webhook").to_string()))
        .collect();
    assert!(
        primaries.len() >= 2,
        "agents all on one primary: {primaries:?}"
    );
    agents
}

#[test]
fn bridges_on_several_hosts_deliver_each_entry_once_and_survive_one_dying() {
    let c = cluster(&["webhook"]);
    let agents = spread_agents(&c, 6);
    let sink = Sink::start(SinkMode::Ok, Duration::from_millis(20));
    let url = c.url();
    let mut a = BridgeProc::start(&url, c.tls_files(), "host-a", &agents, &sink.url(), |_| {});
    let b = BridgeProc::start(&url, c.tls_files(), "host-b", &agents, &sink.url(), |_| {});
    let c3 = BridgeProc::start(&url, c.tls_files(), "host-c", &agents, &sink.url(), |_| {});
    let mut con = c.root();

    // Three bridges, one group: each entry is delivered by one of them.
    let mut want = Vec::new();
    for i in 0..60 {
        let t = format!("first {i}");
        send(&mut con, &agents[i % agents.len()], &t);
        want.push(t);
    }
    eventually(WAIT, "every entry delivered and acknowledged", || {
        a.check_alive();
        delivered(&sink).len() >= want.len() && pending(&mut con, &agents) == 0
    });
    let got = delivered(&sink);
    assert_eq!(
        got.len(),
        want.len(),
        "an entry was delivered twice: {got:?}"
    );
    assert_each_delivered(&got, &want);

    // One host dies mid-delivery: the others claim what it held.
    let before = got.len();
    let slow = Sink::start(SinkMode::Ok, Duration::from_millis(100));
    drop((b, c3));
    drop(a);
    let sink2 = slow;
    let mut a = BridgeProc::start(&url, c.tls_files(), "host-a", &agents, &sink2.url(), |_| {});
    let mut want2 = Vec::new();
    for i in 0..40 {
        let t = format!("second {i}");
        send(&mut con, &agents[i % agents.len()], &t);
        want2.push(t);
    }
    // Killed while it holds entries it read and has not delivered (each
    // delivery takes the slow sink 100 ms).
    eventually(WAIT, "host-a holding entries mid-delivery", || {
        pending_with(&mut con, &agents, "host-a") >= 2
    });
    a.kill();
    // What the dead host had read and not acknowledged is pending with it;
    // the other host, up now, claims it.
    let held = pending_with(&mut con, &agents, "host-a");
    assert!(held > 0, "host-a held nothing when it died");
    let b = BridgeProc::start(&url, c.tls_files(), "host-b", &agents, &sink2.url(), |_| {});
    eventually(WAIT, "every entry delivered by the survivor", || {
        delivered(&sink2).len() >= want2.len() && pending(&mut con, &agents) == 0
    });
    assert_each_delivered(&delivered(&sink2), &want2);
    assert_eq!(delivered(&sink).len(), before, "the first sink got more");
    drop(b);
}

#[test]
fn a_primary_failing_over_loses_no_acknowledged_entry_and_consult_crosses_slots() {
    let c = cluster(&["webhook", "consult"]);
    let agents = spread_agents(&c, 4);
    let sink = Sink::start(SinkMode::Ok, Duration::from_millis(10));
    let url = c.url();
    let rules = vec![ConsultRule {
        from: agents[0].clone(),
        to: agents[1].clone(),
    }];
    let with_consult = |cfg: &mut oxidepm_lanes::BridgeConfig| {
        cfg.sources = vec!["webhook".into(), "consult".into()];
        cfg.consult = Some(ConsultConfig {
            rules: rules.clone(),
            ..Default::default()
        });
    };
    let mut a = BridgeProc::start(
        &url,
        c.tls_files(),
        "host-a",
        &agents,
        &sink.url(),
        with_consult,
    );
    let b = BridgeProc::start(
        &url,
        c.tls_files(),
        "host-b",
        &agents,
        &sink.url(),
        with_consult,
    );
    let mut con = c.root();

    let mut want = Vec::new();
    for i in 0..20 {
        let t = format!("before {i}");
        send(&mut con, &agents[i % agents.len()], &t);
        want.push(t);
    }
    let primary = c.primary_of(&StreamKey::outbox(&agents[0], "webhook").to_string());
    c.failover(primary);
    let mut con = c.root();
    for i in 0..20 {
        let t = format!("after {i}");
        send(&mut con, &agents[i % agents.len()], &t);
        want.push(t);
    }
    eventually(WAIT, "every entry delivered across the failover", || {
        a.check_alive();
        delivered(&sink).len() >= want.len() && pending(&mut con, &agents) == 0
    });
    assert_each_delivered(&delivered(&sink), &want);

    // agent0 asks agent1 (another slot), agent1 answers: no CROSSSLOT.
    let (asker, answerer) = (&agents[0], &agents[1]);
    redis::cmd("XADD")
        .arg(StreamKey::outbox(asker, "consult").to_string())
        .arg("*")
        .arg("to")
        .arg(answerer.as_str())
        .arg("text")
        .arg("what time is it?")
        .query::<String>(&mut con)
        .unwrap();
    let inbox = StreamKey::inbox(answerer, "consult").to_string();
    let question = eventually(WAIT, "the question in the answerer's inbox", || {
        let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&inbox)
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        r.ids.into_iter().next()
    });
    let rid: String = question.get("request_id").unwrap();
    redis::cmd("XADD")
        .arg(StreamKey::outbox(answerer, "consult").to_string())
        .arg("*")
        .arg("to")
        .arg(asker.as_str())
        .arg("re")
        .arg(&rid)
        .arg("text")
        .arg("noon")
        .query::<String>(&mut con)
        .unwrap();
    let back = StreamKey::inbox(asker, "consult").to_string();
    let answer = eventually(WAIT, "the answer in the asker's inbox", || {
        let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&back)
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap();
        r.ids.into_iter().next()
    });
    assert_eq!(answer.get::<String>("text").as_deref(), Some("noon"));
    assert_eq!(
        answer.get::<String>("from").as_deref(),
        Some(answerer.as_str())
    );
    // The question is closed: its record in the asker's slot is empty.
    let open = oxidepm_lanes::consult::open_key(asker, answerer);
    assert!(open.starts_with(&format!("{{{asker}}}:")), "{open}");
    let n: i64 = redis::cmd("ZCOUNT")
        .arg(&open)
        .arg(0)
        .arg("+inf")
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 0);
    for log in [a.log(), b.log()] {
        assert!(!log.contains("CROSSSLOT"), "{log}");
    }
    a.check_alive();
}
