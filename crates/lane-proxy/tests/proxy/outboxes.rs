//! What an agent can make Redis hold: only outboxes of known families,
//! within `maxlen` and `quota`, and within Redis's `maxmemory` for all.

use super::harness::{bulk, ok, Agent, Client, Redis, TestProxy, Value};
use oxidepm_testkit::words;
use std::time::Duration;

fn wait_for<R: oxidepm_testkit::Ready>(what: &str, ok: impl FnMut() -> R) -> R::Output {
    oxidepm_testkit::eventually(Duration::from_secs(30), what, ok)
}

fn is_id(v: &Value) -> bool {
    matches!(v, Value::Bulk(_))
}

/// The bridge reads every new entry of `key` in group `bridge` (made from
/// the start, as the bridge makes it); returns their IDs, left pending.
fn bridge_reads(bridge: &mut Client, key: &str) -> Vec<String> {
    let made = bridge.cmd(&["XGROUP", "CREATE", key, "bridge", "0", "MKSTREAM"]);
    assert!(made == ok() || made.error_starts("BUSYGROUP"), "{made:?}");
    let got = bridge.cmd(&words(&format!(
        "XREADGROUP GROUP bridge b1 COUNT 1000 STREAMS {key} >"
    )));
    let Value::Array(streams) = got else {
        return Vec::new();
    };
    let Value::Array(stream) = &streams[0] else {
        panic!("{streams:?}")
    };
    let Value::Array(entries) = &stream[1] else {
        panic!("{stream:?}")
    };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(e) => e[0].text().unwrap(),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn ids(admin: &mut Client, key: &str) -> Vec<String> {
    let Value::Array(entries) = admin.cmd(&["XRANGE", key, "-", "+"]) else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(e) => e[0].text().unwrap(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn xadd_only_reaches_outboxes_of_known_families() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let mut a = proxy.client("alice");
    for key in [
        "alice:nosuch:outbox",
        "nosuch:outbox",
        "alice:webhook:outbox:dead",
        "alice:webhook:inbox",
        "alice:x1:outbox",
    ] {
        let r = a.cmd(&["XADD", key, "*", "a", "b"]);
        assert!(r.error_starts("NOPERM XADD to"), "{key}: {r:?}");
    }
    // Redis's ACL says the same, on its own: no grant of any other family.
    let r = redis
        .agent("alice")
        .cmd(&["XADD", "alice:nosuch:outbox", "*", "a", "b"]);
    assert!(r.error_starts("NOPERM"), "{r:?}");
    let mut admin = redis.admin();
    for key in ["alice:nosuch:outbox", "nosuch:outbox", "alice:x1:outbox"] {
        assert_eq!(admin.cmd(&["EXISTS", key]), Value::Int(0), "{key}");
    }
    assert!(is_id(&a.cmd(&["XADD", "webhook:outbox", "*", "a", "b"])));
    // Its outboxes stay write-only to it, though its ACL user may measure
    // them (for the proxy).
    for c in [
        &["XLEN", "alice:webhook:outbox"][..],
        &["XINFO", "GROUPS", "alice:webhook:outbox"],
        &["XPENDING", "alice:webhook:outbox", "bridge"],
        &["MEMORY", "USAGE", "alice:webhook:outbox"],
        &["XTRIM", "alice:webhook:outbox", "MAXLEN", "0"],
        &["XRANGE", "alice:webhook:outbox", "-", "+"],
    ] {
        assert!(a.cmd(c).error_starts("NOPERM"), "{c:?}");
    }
    assert_eq!(admin.cmd(&["XLEN", "alice:webhook:outbox"]), Value::Int(1));
}

#[test]
fn xadd_limit_is_refused_and_the_stream_is_untouched() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""maxlen": 5"#)]);
    let mut a = proxy.client("alice");
    for i in 0..3 {
        assert!(is_id(
            &a.cmd(&words(&format!("XADD alice:webhook:outbox * n {i}")))
        ));
    }
    let mut admin = redis.admin();
    let before = ids(&mut admin, "alice:webhook:outbox");
    let r = a.cmd(&words("XADD alice:webhook:outbox MAXLEN ~ 5 LIMIT 1 * n x"));
    assert!(
        r.error_starts("OXIDEPM XADD LIMIT is not accepted"),
        "{r:?}"
    );
    assert_eq!(ids(&mut admin, "alice:webhook:outbox"), before);
    // The connection goes on.
    assert_eq!(a.whoami(), bulk("agent_alice"));
}

#[test]
fn a_full_outbox_refuses_until_the_bridge_acknowledges_and_pending_entries_are_kept() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice").with(r#""maxlen": 3"#)],
        r#""meter_interval_ms": 50"#,
        Vec::new(),
    );
    let key = "alice:webhook:outbox";
    let mut a = proxy.client("alice");
    for i in 0..3 {
        assert!(is_id(&a.cmd(&["XADD", key, "*", "n", &i.to_string()])));
    }
    let full = a.cmd(&["XADD", key, "*", "n", "3"]);
    assert!(
        full.error_starts("OXIDEPM outbox full: alice:webhook:outbox holds 3 entries"),
        "{full:?}"
    );
    // The bridge reads all three and acknowledges the second and third:
    // nothing may go yet, the first is still pending.
    let mut bridge = redis.bridge();
    let read = bridge_reads(&mut bridge, key);
    assert_eq!(read.len(), 3);
    let acked = bridge.cmd(&["XACK", key, "bridge", &read[1], &read[2]]);
    assert_eq!(acked, Value::Int(2));
    // Acknowledging the first frees all three, soon.
    assert_eq!(
        bridge.cmd(&["XACK", key, "bridge", &read[0]]),
        Value::Int(1)
    );
    let id = wait_for("room in the outbox", || {
        let r = a.cmd(&["XADD", key, "*", "n", "3"]);
        is_id(&r).then_some(r)
    });
    let mut admin = redis.admin();
    assert_eq!(ids(&mut admin, key), [id.text().unwrap()]);
    // An entry the bridge read and did not acknowledge is never removed.
    let pending = bridge_reads(&mut bridge, key);
    assert_eq!(pending.len(), 1);
    for i in 0..2 {
        assert!(is_id(&a.cmd(&["XADD", key, "*", "m", &i.to_string()])));
    }
    let mut kept = Vec::new();
    for _ in 0..5 {
        let r = a.cmd(&["XADD", key, "*", "m", "x"]);
        assert!(r.error_starts("OXIDEPM outbox full"), "{r:?}");
        kept = ids(&mut admin, key);
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[0], pending[0]);
    }
    let p = bridge.cmd(&["XPENDING", key, "bridge"]);
    assert_eq!(p.strings()[0], pending[0], "{p:?} / {kept:?}");
}

#[test]
fn the_quota_refuses_with_a_clear_error_and_frees_as_the_bridge_delivers() {
    let redis = Redis::start(&["alice", "bob"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[
            Agent::new("alice").with(r#""quota": 200000"#),
            Agent::new("bob").with(r#""quota": 200000"#),
        ],
        r#""meter_interval_ms": 50"#,
        Vec::new(),
    );
    let key = "alice:email:outbox";
    let value = "v".repeat(20_000);
    let mut a = proxy.client("alice");
    let mut accepted = 0;
    let refusal = loop {
        let r = a.cmd(&["XADD", key, "*", "body", &value]);
        if is_id(&r) {
            accepted += 1;
            assert!(accepted < 20, "the quota never refused");
            continue;
        }
        break r;
    };
    assert!(
        refusal.error_starts("OXIDEPM quota: agent 'alice' has about"),
        "{refusal:?}"
    );
    let Value::Error(text) = &refusal else {
        unreachable!()
    };
    assert!(text.contains("quota of 200000 bytes"), "{text}");
    assert!((5..=10).contains(&accepted), "{accepted} accepted");
    let mut admin = redis.admin();
    assert_eq!(admin.cmd(&["XLEN", key]), Value::Int(accepted));
    // The quota is alice's: bob writes on.
    let mut b = proxy.client("bob");
    assert!(is_id(
        &b.cmd(&words(&format!("XADD bob:email:outbox * body {value}")))
    ));
    // Delivered and acknowledged, the entries go, and alice writes again.
    let mut bridge = redis.bridge();
    let read = bridge_reads(&mut bridge, key);
    let mut ack = vec!["XACK", key, "bridge"];
    ack.extend(read.iter().map(String::as_str));
    assert_eq!(bridge.cmd(&ack), Value::Int(accepted));
    wait_for("the quota to free up", || {
        is_id(&a.cmd(&["XADD", key, "*", "body", &value]))
    });
    assert_eq!(admin.cmd(&["XLEN", key]), Value::Int(1));
}

#[test]
fn writing_until_maxmemory_gets_the_writer_oom_while_another_agent_reads() {
    let redis = Redis::start(&["alice", "bob"]);
    let mut admin = redis.admin();
    // As the daemon configures it: a bound, and no eviction.
    assert_eq!(admin.cmd(&["CONFIG", "SET", "maxmemory", "8mb"]), ok());
    let made = admin.cmd(&words("XGROUP CREATE bob:webhook:inbox bob 0 MKSTREAM"));
    assert_eq!(made, ok());
    redis
        .bridge()
        .cmd(&["XADD", "bob:webhook:inbox", "*", "text", "for bob"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice"), Agent::new("bob")]);
    let mut a = proxy.client("alice");
    let value = vec![b'v'; 512 << 10];
    let mut written = 0;
    let oom = loop {
        let r = a.cmd(&[&b"XADD"[..], b"alice:webhook:outbox", b"*", b"v", &value]);
        if is_id(&r) {
            written += 1;
            assert!(written < 64, "maxmemory never refused");
            continue;
        }
        break r;
    };
    assert!(oom.error_starts("OOM command not allowed"), "{oom:?}");
    // alice's connection stays usable; bob reads his inbox.
    assert_eq!(a.whoami(), bulk("agent_alice"));
    let mut b = proxy.client("bob");
    let got = b.cmd(&words("XREADGROUP GROUP bob c STREAMS bob:webhook:inbox >"));
    assert!(got.strings().contains(&"for bob".to_string()), "{got:?}");
    assert_eq!(
        admin.cmd(&["XLEN", "alice:webhook:outbox"]),
        Value::Int(written)
    );
}

/// An agent's quota is its share of a budget that shrinks as agents are
/// added: a reload that lowers it holds the connections already open to
/// it, not only new ones.
#[test]
fn a_lower_quota_holds_for_connections_already_open() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""quota": 1000000"#)]);
    let mut a = proxy.client("alice");
    let value = "v".repeat(20_000);
    assert!(is_id(&a.cmd(&[
        "XADD",
        "alice:webhook:outbox",
        "*",
        "v",
        &value
    ])));
    let report = proxy.reconfigure(&[Agent::new("alice").with(r#""quota": 10000"#)]);
    assert!(report.failed.is_empty(), "{report}");
    let r = a.cmd(&["XADD", "alice:webhook:outbox", "*", "v", &value]);
    assert!(
        r.error_starts("OXIDEPM quota: agent 'alice'")
            && matches!(&r, Value::Error(t) if t.contains("quota of 10000 bytes")),
        "{r:?}"
    );
}
