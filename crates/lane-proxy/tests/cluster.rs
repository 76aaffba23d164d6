//! Agents' lanes on a Redis Cluster (three primaries, a replica each) in
//! the tagged key form: each lane is served by the node of its agent's
//! slot, a failover is survived by reconnecting, nothing acknowledged is
//! lost.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod support;

use oxidepm_testkit::cluster::Cluster;
use oxidepm_testkit::{bulk, eventually, words, Client, Value};
use std::time::Duration;
use support::{agent_setuser, inbox, outbox, tagged, ProxyProcess, FAMILIES};

/// Two agent names whose slots are on different primaries.
fn two_agents(c: &Cluster) -> (String, String) {
    let names = [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    ];
    let a = names[0];
    let pa = c.primary_of(&inbox(a, "webhook"));
    let b = names[1..]
        .iter()
        .find(|n| c.primary_of(&inbox(n, "webhook")) != pa)
        .expect("two names on different primaries");
    (a.to_string(), b.to_string())
}

/// The users and groups the daemon provisions, on every node (ACLs are
/// not replicated); `slots`: the users may also ask `CLUSTER SLOTS` (else
/// the proxy finds a lane's node by where its keys redirect).
fn provision(c: &Cluster, agents: &[&str], slots: bool) {
    for n in &c.nodes {
        let mut node = c.node(n.port);
        for a in agents {
            let mut setuser = agent_setuser(a);
            if slots {
                setuser.push("+cluster|slots".into());
            }
            let _: () = redis::cmd("ACL").arg(setuser).query(&mut node).unwrap();
        }
    }
    for a in agents {
        for f in FAMILIES {
            let key = inbox(a, f);
            let _: () = redis::cmd("XGROUP")
                .arg(&["CREATE", &key, a, "0", "MKSTREAM"])
                .query(&mut c.node(c.primary_of(&key)))
                .unwrap();
        }
    }
}

fn on_primary<T: redis::FromRedisValue>(c: &Cluster, key: &str, args: &[&str]) -> T {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(&mut c.node(c.primary_of(key)))
        .unwrap()
}

fn xadd(c: &Cluster, key: &str, text: &str) -> String {
    on_primary(c, key, &["XADD", key, "*", "text", text])
}

/// The entry ids in a stream reply.
fn ids(v: &Value) -> Vec<String> {
    v.strings()
        .into_iter()
        .filter(|x| {
            x.split_once('-')
                .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.parse::<u64>().is_ok())
        })
        .collect()
}

/// Reads and acknowledges everything new in `agent`'s inboxes, in one
/// XREADGROUP over all of them; returns the texts read.
fn read_and_ack(client: &mut Client, agent: &str) -> Vec<String> {
    let keys: Vec<String> = FAMILIES.iter().map(|f| inbox(agent, f)).collect();
    let mut cmd = words(&format!("XREADGROUP GROUP {agent} c1 COUNT 100 STREAMS"));
    cmd.extend(keys);
    cmd.extend(FAMILIES.iter().map(|_| ">".to_string()));
    let got = client.cmd(&cmd);
    assert!(!matches!(got, Value::Error(_)), "{got:?}");
    let Value::Array(streams) = &got else {
        return Vec::new();
    };
    for s in streams {
        let key = s.strings()[0].clone();
        for id in ids(s) {
            assert_eq!(client.cmd(&["XACK", &key, agent, &id]), Value::Int(1));
        }
    }
    got.strings()
        .into_iter()
        .filter(|s| s.starts_with("msg "))
        .collect()
}

/// What a client does after `-TRYAGAIN … reconnect`: a new connection,
/// the command again (a few times, while the cluster settles).
fn retry(proxy: &ProxyProcess, agent: &str, cmd: &[&str]) -> (Client, Value) {
    let mut last = None;
    for _ in 0..5 {
        let mut c = proxy.client(agent);
        let r = c.cmd(cmd);
        if !r.error_starts("TRYAGAIN") && !r.error_starts("ERR lane unavailable") {
            return (c, r);
        }
        last = Some(r);
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{cmd:?} kept failing: {last:?}")
}

#[test]
fn lanes_on_a_cluster_follow_their_slot_and_survive_a_failover() {
    tagged();
    let c = Cluster::start(false);
    let (a, b) = two_agents(&c);
    provision(&c, &[&a, &b], false);
    let proxy = ProxyProcess::start(&c.url(), &Default::default(), &[&a, &b]);

    // Both lanes work, each on its own primary.
    let mut ca = proxy.client(&a);
    let mut cb = proxy.client(&b);
    assert_eq!(ca.whoami(), bulk(&format!("agent_{a}")));
    assert_eq!(cb.whoami(), bulk(&format!("agent_{b}")));
    for (client, agent) in [(&mut ca, &a), (&mut cb, &b)] {
        let id = client.cmd(&["XADD", "webhook:outbox", "*", "text", "out"]);
        assert!(matches!(id, Value::Bulk(_)), "{agent}: {id:?}");
        let key = outbox(agent, "webhook");
        assert_eq!(on_primary::<i64>(&c, &key, &["XLEN", &key]), 1);
        xadd(&c, &inbox(agent, "webhook"), "msg 1");
        xadd(&c, &inbox(agent, "email"), "msg 2");
        let mut got = read_and_ack(client, agent);
        got.sort();
        assert_eq!(got, ["msg 1", "msg 2"], "{agent}");
    }

    // Alice's lane is alice's: bob's keys, in any form, and the cluster's
    // own commands are refused, and nothing of bob's changes.
    let bob_in = inbox(&b, "webhook");
    let bob_out = outbox(&b, "webhook");
    let before: i64 = on_primary(&c, &bob_in, &["XLEN", &bob_in]);
    for cmd in [
        words(&format!("XADD {bob_out} * text spoof")),
        words(&format!("XADD {bob_in} * text spoof")),
        words(&format!("XRANGE {bob_in} - +")),
        words(&format!("XREADGROUP GROUP {b} c STREAMS {bob_in} >")),
        words("CLUSTER SLOTS"),
        words("CLUSTER NODES"),
        words("READONLY"),
        words("ASKING"),
    ] {
        let r = ca.cmd(&cmd);
        assert!(matches!(r, Value::Error(_)), "{cmd:?}: {r:?}");
    }
    assert_eq!(on_primary::<i64>(&c, &bob_in, &["XLEN", &bob_in]), before);
    assert_eq!(on_primary::<i64>(&c, &bob_out, &["XLEN", &bob_out]), 1);

    // A read blocked on alice's inbox when her primary fails over.
    let a_in = inbox(&a, "webhook");
    let mut blocked = proxy.client(&a);
    blocked.send(&words(&format!(
        "XREADGROUP GROUP {a} c2 BLOCK 0 STREAMS {a_in} >"
    )));
    // The read is in Redis, blocked, before the failover starts: its
    // primary lists a client blocked in XREADGROUP.
    assert_eq!(ca.cmd(&["PING"]), Value::Simple("PONG".into()));
    let mut primary = c.node(c.primary_of(&a_in));
    eventually(Duration::from_secs(20), "the read blocked in Redis", || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut primary)
            .unwrap_or_default();
        list.lines().any(|l| {
            l.contains("cmd=xreadgroup")
                && l.split(' ')
                    .any(|f| f.starts_with("flags=") && f.contains('b'))
        })
    });
    let old = c.primary_of(&a_in);
    let new = c.failover(old);
    assert_ne!(old, new);
    // Every node's view of the slots follows in a moment.
    eventually(
        Duration::from_secs(20),
        "the new primary in CLUSTER SLOTS",
        || c.primary_of(&a_in) == new,
    );

    // The blocked read gets a plain error (never a cluster address), and
    // its connection closes.
    let r = blocked.read();
    assert!(r.error_starts("TRYAGAIN"), "{r:?}");
    assert!(!format!("{r:?}").contains(&old.to_string()), "{r:?}");
    blocked.assert_closed();

    // The client's retry works, on the new primary: what was acknowledged
    // before is still there, and still acknowledged.
    let (mut again, r) = retry(&proxy, &a, &["XRANGE", &a_in, "-", "+"]);
    assert_eq!(
        r.strings().iter().filter(|s| *s == "msg 1").count(),
        1,
        "{r:?}"
    );
    let pending = again.cmd(&["XPENDING", &a_in, &a]);
    assert_eq!(pending.strings().len(), 0, "{pending:?}");
    xadd(&c, &a_in, "msg 3");
    assert_eq!(read_and_ack(&mut again, &a), ["msg 3"]);
    let id = again.cmd(&["XADD", "webhook:outbox", "*", "text", "after"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    let a_out = outbox(&a, "webhook");
    assert_eq!(on_primary::<i64>(&c, &a_out, &["XLEN", &a_out]), 2);

    // Bob's lane, on another primary, never noticed.
    assert_eq!(cb.cmd(&["PING"]), Value::Simple("PONG".into()));
    xadd(&c, &bob_in, "msg 4");
    assert!(read_and_ack(&mut cb, &b).contains(&"msg 4".to_string()));
}

#[test]
fn lanes_on_a_tls_cluster_reach_the_node_of_their_slot() {
    // Here the proxy learns the whole map from CLUSTER SLOTS.
    tagged();
    let c = Cluster::start(true);
    let (a, b) = two_agents(&c);
    provision(&c, &[&a, &b], true);
    let proxy = ProxyProcess::start(&c.url(), &c.tls_files(), &[&a, &b]);
    for agent in [&a, &b] {
        let mut client = proxy.client(agent);
        assert_eq!(client.whoami(), bulk(&format!("agent_{agent}")));
        let id = client.cmd(&["XADD", "email:outbox", "*", "text", "out"]);
        assert!(matches!(id, Value::Bulk(_)), "{agent}: {id:?}");
        let key = outbox(agent, "email");
        assert_eq!(on_primary::<i64>(&c, &key, &["XLEN", &key]), 1);
        xadd(&c, &inbox(agent, "email"), "msg tls");
        assert_eq!(read_and_ack(&mut client, agent), ["msg tls"]);
    }
}

#[test]
fn a_lane_whose_primary_dies_comes_back_on_the_promoted_replica() {
    tagged();
    let mut c = Cluster::start(false);
    let (a, b) = two_agents(&c);
    provision(&c, &[&a, &b], false);
    let proxy = ProxyProcess::start(&c.url(), &Default::default(), &[&a, &b]);
    let a_in = inbox(&a, "webhook");
    let mut ca = proxy.client(&a);
    xadd(&c, &a_in, "msg 1");
    assert_eq!(read_and_ack(&mut ca, &a), ["msg 1"]);
    // Replication is asynchronous: the test waits until the replica has
    // the acknowledgement, as a crash may otherwise lose it.
    let primary = c.primary_of(&a_in);
    let synced: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut c.node(primary))
        .unwrap();
    assert_eq!(synced, 1);
    c.kill_node(primary);

    // Until the replica is promoted the lane is unavailable (an error,
    // never a hang); then a new connection works, on the new primary.
    let mut back = None;
    eventually(Duration::from_secs(60), "alice's lane back", || {
        let mut client = proxy.client(&a);
        let r = client.cmd(&["XRANGE", &a_in, "-", "+"]);
        let ok = !matches!(r, Value::Error(_));
        if ok {
            back = Some((client, r));
        } else {
            std::thread::sleep(Duration::from_millis(250));
        }
        ok
    });
    let (mut again, all) = back.unwrap();
    assert!(all.strings().contains(&"msg 1".to_string()), "{all:?}");
    let pending = again.cmd(&["XPENDING", &a_in, &a]);
    assert_eq!(pending.strings().len(), 0, "{pending:?}");
    let id = again.cmd(&["XADD", "webhook:outbox", "*", "text", "after"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");

    // Bob's lane, on a primary that lives, works throughout.
    let mut cb = proxy.client(&b);
    assert_eq!(cb.cmd(&["PING"]), Value::Simple("PONG".into()));
}
