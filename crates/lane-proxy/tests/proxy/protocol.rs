//! What the proxy accepts on the wire, and what it does with the rest.

use super::harness::{bulk, ok, send_blocking_read, Agent, Redis, TestProxy, Value};
use oxidepm_testkit::eventually;
use oxidepm_testkit::words;
use std::time::Duration;

fn lane() -> (Redis, TestProxy) {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"max_bulk": 1048576}"#,
        Vec::new(),
    );
    (redis, proxy)
}

#[test]
fn malformed_input_gets_an_error_and_a_close() {
    let (_redis, proxy) = lane();
    // Over a limit: said so, with the key that sets it.
    for (bytes, why) in [
        (
            &b"*2\r\n$4\r\nECHO\r\n$2000000\r\n"[..],
            "argument of 2000000 bytes; at most 1048576 bytes are accepted (lanes.limits.max_bulk)",
        ),
        (
            b"*2000000\r\n",
            "at most 16384 are accepted (lanes.limits.max_elements)",
        ),
    ] {
        let mut c = proxy.client("alice");
        c.send_raw(bytes);
        let r = c.read();
        assert!(
            matches!(&r, Value::Error(e) if e.starts_with("OXIDEPM too large") && e.contains(why)),
            "{bytes:?} gave {r:?}"
        );
        c.assert_closed();
    }
    let cases: &[(&[u8], &str)] = &[
        (b"*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\nx\r\n", "nested array"),
        (b"*2\r\n$4\r\nECHO\r\n:1\r\n", "an integer"),
        (b"*0\r\n", "count >= 1"),
        (b"*1\r\n$-1\r\n", "bulk string header"),
        (b"*1\r\n$4\r\nPINGxx", "not terminated"),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00", "inline"),
        (b"GET x\r\n", "inline"),
        (b"\r\n", "inline"),
    ];
    for (bytes, why) in cases {
        let mut c = proxy.client("alice");
        c.send_raw(bytes);
        let r = c.read();
        assert!(
            matches!(&r, Value::Error(e) if e.starts_with("ERR protocol error") && e.contains(why)),
            "{bytes:?} gave {r:?}"
        );
        c.assert_closed();
    }
}

#[test]
fn replies_before_a_violation_are_delivered_in_order() {
    let (_redis, proxy) = lane();
    let mut c = proxy.client("alice");
    let mut out = Vec::new();
    oxidepm_testkit::resp::encode(&mut out, &["ECHO", "one"]);
    oxidepm_testkit::resp::encode(&mut out, &["KEYS", "*"]);
    oxidepm_testkit::resp::encode(&mut out, &["ECHO", "two"]);
    out.extend_from_slice(b"*1\r\n*0\r\n");
    oxidepm_testkit::resp::encode(&mut out, &["ECHO", "never"]);
    c.send_raw(&out);
    assert_eq!(c.read(), bulk("one"));
    assert!(c.read().error_starts("NOPERM"));
    assert_eq!(c.read(), bulk("two"));
    assert!(c.read().error_starts("ERR protocol error"));
    c.assert_closed();
}

#[test]
fn commands_split_across_many_writes_are_reassembled() {
    let (_redis, proxy) = lane();
    let mut c = proxy.client("alice");
    let mut out = Vec::new();
    let value = "v".repeat(100_000);
    oxidepm_testkit::resp::encode(&mut out, &["ECHO", &value]);
    oxidepm_testkit::resp::encode(&mut out, &["PING"]);
    for piece in out.chunks(997) {
        c.send_raw(piece);
    }
    assert_eq!(c.read(), bulk(&value));
    assert_eq!(c.read(), Value::Simple("PONG".into()));
}

#[test]
fn resp3_replies_are_relayed_whole() {
    let (redis, proxy) = lane();
    // The group is the daemon's to make, the entry the bridge's to write.
    let made = redis
        .admin()
        .cmd(&words("XGROUP CREATE alice:discord:inbox alice 0 MKSTREAM"));
    assert_eq!(made, ok());
    redis
        .bridge()
        .cmd(&["XADD", "alice:discord:inbox", "*", "text", "resp3"]);
    let mut c = proxy.client("alice");
    let hello = c.cmd(&["HELLO", "3"]);
    assert!(hello.strings().contains(&"proto".to_string()), "{hello:?}");
    // Pipelined, so that reply boundaries matter.
    let mut out = Vec::new();
    for args in [
        words("XINFO STREAM alice:discord:inbox"),
        words("XREADGROUP GROUP alice c STREAMS alice:discord:inbox >"),
        words("XPENDING alice:discord:inbox alice - + 10"),
        words("XINFO GROUPS alice:discord:inbox"),
        words("KEYS *"),
        words("ECHO end"),
    ] {
        oxidepm_testkit::resp::encode(&mut out, &args);
    }
    c.send_raw(&out);
    let info = c.read();
    assert!(matches!(info, Value::Map(_)), "{info:?}");
    let read = c.read();
    assert!(matches!(read, Value::Map(_)), "{read:?}");
    assert!(read.strings().contains(&"resp3".to_string()));
    assert!(matches!(c.read(), Value::Array(_)));
    assert!(matches!(c.read(), Value::Array(_)));
    assert!(c.read().error_starts("NOPERM"));
    assert_eq!(c.read(), bulk("end"));
    assert_eq!(c.whoami(), bulk("agent_alice"));
}

#[test]
fn the_client_closing_early_frees_its_upstream_connection() {
    let (redis, proxy) = lane();
    // The daemon's user makes the group and watches the clients; the
    // bridge writes.
    let mut admin = redis.admin();
    let made = admin.cmd(&words("XGROUP CREATE alice:discord:inbox alice $ MKSTREAM"));
    assert_eq!(made, ok());
    let mut bridge = redis.bridge();
    {
        let mut c = proxy.client("alice");
        send_blocking_read(&mut c, "gone");
        assert_eq!(proxy.client("alice").whoami(), bulk("agent_alice"));
        // The read must be blocked in Redis before the client goes, or the
        // wait below could pass before it ever arrived.
        eventually(Duration::from_secs(20), "the read to block", || {
            admin
                .cmd(&["CLIENT", "LIST"])
                .strings()
                .join("")
                .contains("cmd=xreadgroup")
        });
    }
    // The abandoned read must not take the next message: Redis sees its
    // client go, as if the agent had been connected directly.
    eventually(
        Duration::from_secs(20),
        "Redis to drop the abandoned read",
        || {
            !admin
                .cmd(&["CLIENT", "LIST"])
                .strings()
                .join("")
                .contains("cmd=xreadgroup")
        },
    );
    bridge.cmd(&["XADD", "alice:discord:inbox", "*", "text", "later"]);
    let mut c = proxy.client("alice");
    let got = c.cmd(&words(
        "XREADGROUP GROUP alice next STREAMS alice:discord:inbox >",
    ));
    assert!(got.strings().contains(&"later".to_string()), "{got:?}");
}
