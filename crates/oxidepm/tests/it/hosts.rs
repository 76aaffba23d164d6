//! Several hosts on one Redis Cluster, as a team runs them: two daemons with
//! homes of their own (each its proxy, sockets and bridge), one
//! three-primary cluster with a replica each, started by the test. Agents
//! on different hosts consult each other through the bridges; a route
//! added on one host is every host's, and a webhook arriving at one host
//! reaches an agent of another; a name is one host's; a primary failing
//! over and a daemon killed are survived.

use crate::consult::{fields, Fields};
use crate::harness::{read, shared_lanes, strs, Env};
use crate::lanes::{conn, run, start_agents};
use oxidepm_testkit::cluster::Cluster;
use oxidepm_testkit::shared::{OXIDEPM_PASSWORD, OXIDEPM_USER};
use oxidepm_testkit::{free_port, http, words};
use std::os::unix::fs::PermissionsExt;

/// A host: its own home and daemon, its lanes on `cluster`, its webhook
/// on `port`.
fn host(cluster: &Cluster, id: &str, port: u16) -> Env {
    let env = Env::new();
    let secrets = env.home.join("secrets");
    oxidepm_lanes::secret::ensure_dir(&secrets).unwrap();
    let admin = secrets.join("lanes_admin");
    std::fs::write(&admin, format!("{OXIDEPM_USER}\n{OXIDEPM_PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&admin, std::fs::Permissions::from_mode(0o600)).unwrap();
    env.daemon_toml(&format!(
        "agents_share_uid = true\n\
         [lanes]\n\
         redis_url = \"{url}\"\n\
         host_id = \"{id}\"\n\
         lease_secs = 5\n\
         sources = [\"webhook\"]\n\
         [lanes.webhook]\nlisten = \"127.0.0.1:{port}\"\n\
         [[lanes.consult]]\nfrom = \"alice\"\nto = \"bob\"\n",
        url = cluster.url()
    ));
    env
}

/// XADD through an agent's own lane, retried over a new connection while
/// the lane moves (a failover closes the connections of the old primary).
fn says(env: &Env, agent: &str, fields: &[(&str, &str)]) -> String {
    env.wait(30, &format!("{agent}'s XADD"), || {
        let mut c = conn(&env.home.join(format!("lanes/{agent}.sock")));
        let mut cmd = redis::cmd("XADD");
        cmd.arg("consult:outbox").arg("*");
        for (k, v) in fields {
            cmd.arg(*k).arg(*v);
        }
        cmd.query::<String>(&mut c).ok()
    })
}

/// What `agent` reads (and acknowledges) of its consult inbox with its own
/// group through its lane, until `n` new entries came.
fn reads(env: &Env, agent: &str, n: usize) -> Vec<Fields> {
    let key = format!("{{{agent}}}:consult:inbox");
    let mut got = Vec::new();
    env.wait(60, &format!("{n} entries in {key}"), || {
        let mut c = conn(&env.home.join(format!("lanes/{agent}.sock")));
        let reply: redis::RedisResult<redis::streams::StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(agent)
            .arg("t")
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(500)
            .arg("STREAMS")
            .arg(&key)
            .arg(">")
            .query(&mut c);
        for k in reply.map(|r| r.keys).unwrap_or_default() {
            for e in &k.ids {
                let _: redis::RedisResult<i64> = redis::cmd("XACK")
                    .arg(&key)
                    .arg(agent)
                    .arg(&e.id)
                    .query(&mut c);
                got.push(fields(e));
            }
        }
        got.len() >= n
    });
    got
}

/// The length of `key` as the cluster's root sees it.
fn xlen(cluster: &Cluster, key: &str) -> i64 {
    redis::cmd("XLEN")
        .arg(key)
        .query(&mut cluster.root())
        .unwrap()
}

#[test]
fn agents_on_two_hosts_consult_each_other_on_a_cluster_through_a_failover() {
    if shared_lanes() {
        return; // This test brings its own servers.
    }
    let cluster = Cluster::start(false);
    let port_a = free_port();
    let (a, b) = (
        host(&cluster, "host-a", port_a),
        host(&cluster, "host-b", free_port()),
    );
    start_agents(&a, &["alice"]);
    start_agents(&b, &["bob"]);

    // A name is one host's.
    let refused = b.fails(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "1",
    ]);
    assert!(refused.contains("host-a"), "{refused}");

    // Each host's bridge knows the other host's agent (the daemons pass
    // it on within about a second; a consult to an agent a bridge has not
    // seen yet is tried again only within the retry budget).
    for (env, other) in [(&a, "bob"), (&b, "alice")] {
        let file = env.home.join("bridge/bridge.json");
        env.wait(60, &format!("{other} in the bridge's agents"), || {
            serde_json::from_str::<serde_json::Value>(&read(&file))
                .ok()
                .and_then(|c| c["agents"].as_array().cloned())
                .is_some_and(|l| l.iter().any(|n| n == other))
        });
    }

    // Alice (host A) asks bob (host B); bob answers.
    let q1 = says(&a, "alice", &[("to", "bob"), ("text", "q1")]);
    let got = reads(&b, "bob", 1);
    assert_eq!(got[0]["from"], "alice", "{got:?}");
    assert_eq!(got[0]["request_id"], q1);
    says(&b, "bob", &[("to", "alice"), ("re", &q1), ("text", "a1")]);
    let answer = reads(&a, "alice", 1);
    assert_eq!(answer[0]["from"], "bob", "{answer:?}");
    assert_eq!(answer[0]["text"], "a1");

    // A route added on one host is every host's; a message arriving at
    // host A's webhook reaches bob on host B.
    a.ok(&strs(&words(
        "route add --source webhook --channel ci --agent bob",
    )));
    let has_ci = |env: &Env| {
        let list = env.json(&["route", "list"]);
        list["routes"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["channel"] == "ci" && r["agent"] == "bob")
        })
    };
    assert!(has_ci(&b), "host B does not list host A's route");
    let token = oxidepm_lanes::Secret::read(&a.home.join("secrets/webhook_token")).unwrap();
    let webhook = std::net::SocketAddr::from(([127, 0, 0, 1], port_a));
    let body = r#"{"channel":"ci","sender":"ci-bot","text":"build failed"}"#;
    let mut bob = conn(&b.home.join("lanes/bob.sock"));
    let key = "{bob}:webhook:inbox";
    a.wait(30, "the webhook's message in bob's inbox", || {
        std::net::TcpStream::connect(webhook).is_ok()
            && (200..300)
                .contains(&http(webhook, "POST", "/in/webhook", Some(token.expose()), body).0)
            && run(&mut bob, &["XLEN", key]).is_ok_and(|n| n != redis::Value::Int(0))
    });
    b.ok(&strs(&words(
        "route rm --source webhook --channel ci --agent bob",
    )));
    assert!(!has_ci(&a), "host A still lists the route host B removed");

    // Bob's lane cannot reach alice's keys, through his socket or as his
    // user on any node.
    let mut bob = conn(&b.home.join("lanes/bob.sock"));
    let r = run(&mut bob, &["XRANGE", "{alice}:consult:inbox", "-", "+"]);
    assert!(r.is_err(), "{r:?}");
    let pw = oxidepm_lanes::Secret::read(&b.home.join("secrets/agent_bob")).unwrap();
    for n in &cluster.nodes {
        if let Ok(mut c) = cluster.connect(n.port, "agent_bob", pw.expose()) {
            let r = run(&mut c, &["XRANGE", "{alice}:consult:inbox", "-", "+"]);
            assert!(r.is_err(), "node {}: {r:?}", n.port);
        }
    }

    // Bob's primary fails over; the next question still arrives, and
    // nothing acknowledged is lost.
    let before = xlen(&cluster, "{bob}:consult:inbox");
    cluster.failover(cluster.primary_of("{bob}:consult:inbox"));
    let q2 = says(&a, "alice", &[("to", "bob"), ("text", "q2")]);
    let got = reads(&b, "bob", 1);
    assert_eq!(got[0]["request_id"], q2, "{got:?}");
    assert_eq!(xlen(&cluster, "{bob}:consult:inbox"), before + 1);

    // Host A's daemon dies: host B's agent keeps its lane.
    a.kill_daemon();
    let mut bob = conn(&b.home.join("lanes/bob.sock"));
    let r = run(&mut bob, &["XLEN", "{bob}:consult:inbox"]);
    assert!(r.is_ok(), "{r:?}");
}
