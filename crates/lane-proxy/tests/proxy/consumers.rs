//! What an agent can make Redis hold in consumers: names of at most
//! `max_consumer_name` bytes, at most `max_consumers` of them per lane,
//! across its connections and across proxy restarts.

use super::harness::{Agent, Client, Redis, TestProxy, Value};
use super::{alice, group};
use oxidepm_testkit::words;
use std::time::Duration;

const INBOX: &str = "alice:discord:inbox";
const MAX: usize = 32;

fn wait_for<R: oxidepm_testkit::Ready>(what: &str, ok: impl FnMut() -> R) -> R::Output {
    oxidepm_testkit::eventually(Duration::from_secs(30), what, ok)
}

/// The consumers Redis holds in alice's discord inbox group `alice`, as `sys`
/// sees them.
fn in_redis(redis: &Redis) -> Vec<String> {
    let Value::Array(list) = redis.admin().cmd(&["XINFO", "CONSUMERS", INBOX, "alice"]) else {
        panic!("XINFO CONSUMERS");
    };
    let mut names: Vec<String> = list
        .iter()
        .map(|c| match c {
            Value::Array(kv) => kv
                .chunks(2)
                .find(|kv| kv[0].text().as_deref() == Some("name"))
                .and_then(|kv| kv[1].text())
                .unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    names.sort();
    names
}

/// Makes group `alice` of alice's discord inbox and has the bridge write
/// `n` entries to it: Redis creates a consumer when it has something to
/// give it.
fn inbox_with(redis: &Redis, n: usize) {
    group(redis, INBOX, "0");
    let mut bridge = redis.bridge();
    for i in 0..n {
        let id = bridge.cmd(&["XADD", INBOX, "*", "n", &i.to_string()]);
        assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    }
}

/// A non-blocking read of alice's discord inbox as `consumer`.
fn read_as(c: &mut Client, consumer: &str) -> Value {
    c.cmd(&words(&format!(
        "XREADGROUP GROUP alice {consumer} COUNT 1 STREAMS {INBOX} >"
    )))
}

fn served(v: &Value) -> bool {
    !matches!(v, Value::Error(_))
}

fn refused_for_count(v: &Value) -> bool {
    v.error_starts("OXIDEPM consumers: at most 32 consumer names per agent")
}

/// Alice reads as `c0` … `c31`; each is served.
fn fill(c: &mut Client) {
    for i in 0..MAX {
        let r = read_as(c, &format!("c{i}"));
        assert!(served(&r), "c{i}: {r:?}");
    }
}

#[test]
fn a_consumer_name_over_the_bound_is_refused_on_every_command() {
    let (redis, proxy) = alice();
    inbox_with(&redis, 200);
    let mut a = proxy.client("alice");
    let long = "n".repeat(65);
    for cmd in [
        words(&format!("XREADGROUP GROUP alice {long} STREAMS {INBOX} >")),
        words(&format!(
            "XREADGROUP COUNT 1 GROUP alice {long} BLOCK 0 STREAMS {INBOX} >"
        )),
        words(&format!("XCLAIM {INBOX} alice {long} 0 0-1")),
        words(&format!("XAUTOCLAIM {INBOX} alice {long} 0 0")),
        words(&format!("XGROUP CREATECONSUMER {INBOX} alice {long}")),
    ] {
        let r = a.cmd(&cmd);
        assert!(
            r.error_starts("OXIDEPM consumer name: 65 bytes is longer than the 64 bytes"),
            "{:?}: {r:?}",
            &cmd[..2]
        );
    }
    assert!(in_redis(&redis).is_empty());
    // The connection goes on, and a name of 64 bytes is one.
    let fits = "n".repeat(64);
    assert!(served(&read_as(&mut a, &fits)));
    assert_eq!(in_redis(&redis), [fits]);
}

#[test]
fn the_33rd_name_is_refused_while_the_first_32_keep_working() {
    let (redis, proxy) = alice();
    inbox_with(&redis, 200);
    let mut a = proxy.client("alice");
    fill(&mut a);
    let r = read_as(&mut a, "c32");
    assert!(refused_for_count(&r), "{r:?}");
    // Every command that would create one is refused alike, on another
    // connection of the lane too.
    let mut b = proxy.client("alice");
    for cmd in [
        words(&format!("XREADGROUP GROUP alice other STREAMS {INBOX} >")),
        words(&format!("XCLAIM {INBOX} alice other 0 0-1")),
        words(&format!("XAUTOCLAIM {INBOX} alice other 0 0")),
        words(&format!("XGROUP CREATECONSUMER {INBOX} alice other")),
    ] {
        let r = b.cmd(&cmd);
        assert!(refused_for_count(&r), "{:?}: {r:?}", &cmd[..2]);
    }
    for i in 0..MAX {
        let r = read_as(&mut b, &format!("c{i}"));
        assert!(served(&r), "c{i}: {r:?}");
    }
    assert_eq!(in_redis(&redis).len(), MAX);
}

#[test]
fn connections_racing_with_new_names_stay_within_the_bound() {
    let (redis, proxy) = alice();
    inbox_with(&redis, 200);
    let mut clients: Vec<Client> = (0..4).map(|_| proxy.client("alice")).collect();
    // Each connection pipelines 20 new names, all sent before any is read.
    for (k, c) in clients.iter_mut().enumerate() {
        for i in 0..20 {
            let name = format!("k{k}-{i}");
            c.send(&words(&format!(
                "XREADGROUP GROUP alice {name} COUNT 1 STREAMS {INBOX} >"
            )));
        }
    }
    let mut admitted = 0;
    for c in &mut clients {
        for _ in 0..20 {
            let r = c.read();
            if served(&r) {
                admitted += 1;
            } else {
                assert!(refused_for_count(&r), "{r:?}");
            }
        }
    }
    assert_eq!(admitted, MAX);
    assert_eq!(in_redis(&redis).len(), MAX);
}

#[test]
fn a_deleted_consumer_frees_its_name() {
    let (redis, proxy) = alice();
    inbox_with(&redis, 200);
    let mut a = proxy.client("alice");
    fill(&mut a);
    assert!(refused_for_count(&read_as(&mut a, "new")));
    // Alice frees a name herself (her ACL allows DELCONSUMER on her own
    // inboxes); the name is freed once Redis no longer has it.
    let del = a.cmd(&["XGROUP", "DELCONSUMER", INBOX, "alice", "c0"]);
    assert_eq!(del, Value::Int(1), "c0 had the one entry it read pending");
    assert_eq!(in_redis(&redis).len(), MAX - 1);
    // The lane reads Redis again before it refuses (at most once a second).
    wait_for("the freed name taken by a new one", || {
        let r = read_as(&mut a, "new");
        assert!(served(&r) || refused_for_count(&r), "{r:?}");
        served(&r)
    });
    assert!(refused_for_count(&read_as(&mut a, "newer")));
    let names = in_redis(&redis);
    assert_eq!(names.len(), MAX);
    assert!(names.contains(&"new".to_string()) && !names.contains(&"c0".to_string()));
}

#[test]
fn after_a_restart_the_proxy_counts_the_names_redis_holds() {
    let redis = Redis::start(&["alice"]);
    inbox_with(&redis, 200);
    {
        let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
        fill(&mut proxy.client("alice"));
    }
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let mut a = proxy.client("alice");
    let r = read_as(&mut a, "c32");
    assert!(refused_for_count(&r), "{r:?}");
    assert!(served(&read_as(&mut a, "c7")));
    assert_eq!(in_redis(&redis).len(), MAX);
}
