//! The lane proxy against a real redis-server, with the ACL the daemon
//! writes. Consumer groups are made by `sys`, as the daemon makes each
//! agent's (an agent may make only its own, named like it); the bridge writes inboxes and
//! reads outboxes with its own rules; `sys` inspects.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod activated;
mod attacks;
mod bounds;
mod consumers;
mod handshakes;
mod harness;
mod lane_commands;
mod outboxes;
mod own_group;
mod protocol;
mod responders;
mod transactions;
mod upstream_config;

use harness::{bulk, ok, send_blocking_read, Agent, Redis, TestProxy, Value};
use oxidepm_testkit::words;

fn alice() -> (Redis, TestProxy) {
    let redis = Redis::start(&["alice", "bob"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    (redis, proxy)
}

/// Makes consumer group `alice` of `stream` from `start`, as the daemon does.
fn group(redis: &Redis, stream: &str, start: &str) {
    let r = redis
        .admin()
        .cmd(&["XGROUP", "CREATE", stream, "alice", start, "MKSTREAM"]);
    assert_eq!(r, ok(), "XGROUP CREATE {stream}");
}

/// The bridge writes `text` to alice's discord inbox (group alice made first).
fn to_inbox(redis: &Redis, text: &str) {
    group(redis, "alice:discord:inbox", "0");
    let id = redis
        .bridge()
        .cmd(&["XADD", "alice:discord:inbox", "*", "text", text]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
}

#[test]
fn agent_sends_and_receives_through_its_lane() {
    let (redis, proxy) = alice();
    let mut bridge = redis.bridge();
    let mut a = proxy.client("alice");
    assert_eq!(a.whoami(), bulk("agent_alice"));
    assert_eq!(a.cmd(&["PING"]), Value::Simple("PONG".into()));

    // Outbound: XADD to its own outbox, seen by the bridge.
    let id = a.cmd(&["XADD", "alice:discord:outbox", "*", "text", "hello out"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    let seen = bridge.cmd(&["XRANGE", "alice:discord:outbox", "-", "+"]);
    assert!(
        seen.strings().contains(&"hello out".to_string()),
        "{seen:?}"
    );

    // Inbound: what the bridge wrote, read with the group, acknowledged.
    to_inbox(&redis, "hello in");
    let got = a.cmd(&words(
        "XREADGROUP GROUP alice c1 COUNT 10 STREAMS alice:discord:inbox >",
    ));
    let strings = got.strings();
    assert!(strings.contains(&"hello in".to_string()), "{got:?}");
    let entry_id = strings[1].clone();
    assert_eq!(
        a.cmd(&["XACK", "alice:discord:inbox", "alice", &entry_id]),
        Value::Int(1)
    );
    let pending = a.cmd(&["XPENDING", "alice:discord:inbox", "alice"]);
    assert_eq!(pending.strings().len(), 0, "{pending:?}");
}

#[test]
fn shared_outbox_form_lands_in_the_agents_outbox() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    let id = a.cmd(&["XADD", "discord:outbox", "*", "text", "hi"]);
    assert!(matches!(id, Value::Bulk(_)), "{id:?}");
    let mut bridge = redis.bridge();
    let seen = bridge.cmd(&["XRANGE", "alice:discord:outbox", "-", "+"]);
    assert_eq!(seen.strings()[1..], ["text".to_string(), "hi".to_string()]);
    assert_eq!(
        redis.admin().cmd(&["EXISTS", "discord:outbox"]),
        Value::Int(0)
    );
}

#[test]
fn other_agents_keys_are_refused_by_redis() {
    let (redis, proxy) = alice();
    let mut bridge = redis.bridge();
    group(&redis, "bob:discord:inbox", "0");
    bridge.cmd(&["XADD", "bob:discord:inbox", "*", "text", "for bob"]);
    let mut a = proxy.client("alice");
    for c in [
        words("XADD bob:discord:outbox * text spoof"),
        words("XREADGROUP GROUP alice c STREAMS bob:discord:inbox >"),
        words("XRANGE bob:discord:inbox - +"),
        words("XLEN bob:discord:inbox"),
        // Its own outbox is write-only.
        words("XRANGE alice:discord:outbox - +"),
    ] {
        let r = a.cmd(&c);
        assert!(r.error_starts("NOPERM"), "{c:?} gave {r:?}");
    }
    assert_eq!(
        redis.admin().cmd(&["EXISTS", "bob:discord:outbox"]),
        Value::Int(0)
    );
}

#[test]
fn commands_off_the_allowlist_are_refused_by_the_proxy() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    for c in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["CONFIG", "GET", "save"],
        &["EVAL", "return redis.call('FLUSHALL')", "0"],
        &["FLUSHALL"],
        &["MONITOR"],
        &["SUBSCRIBE", "news"],
        &["PSUBSCRIBE", "*"],
        &["CLIENT", "KILL", "TYPE", "normal"],
        &["CLIENT", "LIST"],
        &["SELECT", "1"],
        &["DEBUG", "SLEEP", "0"],
        &["XGROUP", "DESTROY", "alice:discord:inbox", "alice"],
    ] {
        let r = a.cmd(c);
        assert!(r.error_starts("NOPERM"), "{c:?} gave {r:?}");
    }
    // The connection is still an ordinary, working one.
    assert_eq!(a.cmd(&["ECHO", "still here"]), bulk("still here"));
    assert_eq!(a.whoami(), bulk("agent_alice"));
    assert_eq!(a.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]), ok());
    // Nothing reached Redis as another user: the host's keys are intact.
    let mut admin = redis.admin();
    admin.cmd(&["SET", "bridge:canary", "1"]);
    assert!(a.cmd(&["FLUSHALL"]).error_starts("NOPERM"));
    assert_eq!(admin.cmd(&["GET", "bridge:canary"]), bulk("1"));
}

#[test]
fn identity_cannot_be_changed_from_the_lane() {
    let (_redis, proxy) = alice();
    let bridge_pw = &harness::password("bridge");
    let mut a = proxy.client("alice");
    for c in [
        &["AUTH", "bridge", bridge_pw][..],
        &["AUTH", bridge_pw],
        &["AUTH", "default", "x"],
        &["HELLO", "3", "AUTH", "bridge", bridge_pw],
        &["RESET"],
    ] {
        let r = a.cmd(c);
        assert!(r.error_starts("NOPERM"), "{c:?} gave {r:?}");
        assert_eq!(a.whoami(), bulk("agent_alice"), "after {c:?}");
    }
    // A transaction cannot smuggle an AUTH in: it is refused, and so is
    // the whole transaction.
    assert_eq!(a.cmd(&["MULTI"]), ok());
    assert!(a.cmd(&["AUTH", "bridge", bridge_pw]).error_starts("NOPERM"));
    assert!(a.cmd(&["EXEC"]).error_starts("EXECABORT"));
    assert_eq!(a.whoami(), bulk("agent_alice"));
    // Plain HELLO negotiates the protocol and keeps the identity.
    let hello = a.cmd(&["HELLO", "3"]);
    assert!(matches!(hello, Value::Map(_)), "{hello:?}");
    assert_eq!(a.whoami(), bulk("agent_alice"));

    // An inline command is refused and the connection closed.
    let mut b = proxy.client("alice");
    b.send_raw(format!("AUTH bridge {bridge_pw}\r\n").as_bytes());
    assert!(b.read().error_starts("ERR protocol error: inline"));
    b.assert_closed();
    assert_eq!(proxy.client("alice").whoami(), bulk("agent_alice"));
}

#[test]
fn quit_is_answered_by_the_proxy() {
    let (_redis, proxy) = alice();
    let mut a = proxy.client("alice");
    a.send(&["PING"]);
    a.send(&["QUIT"]);
    a.send(&["PING"]);
    assert_eq!(a.read(), Value::Simple("PONG".into()));
    assert_eq!(a.read(), ok());
    a.assert_closed();
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let (_redis, proxy) = alice();
    let mut a = proxy.client("alice");
    const N: usize = 10_000;
    let mut out = Vec::new();
    for i in 0..N {
        if i % 97 == 0 {
            oxidepm_testkit::resp::encode(&mut out, &["KEYS", "*"]);
        } else {
            oxidepm_testkit::resp::encode(&mut out, &["ECHO", &i.to_string()]);
        }
    }
    // One write, from another thread: the proxy applies backpressure, so
    // the replies must be read meanwhile.
    let mut w = a.stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        w.write_all(&out).unwrap();
    });
    for i in 0..N {
        let r = a.read();
        if i % 97 == 0 {
            assert!(r.error_starts("NOPERM"), "reply {i}: {r:?}");
        } else {
            assert_eq!(r, bulk(&i.to_string()), "reply {i}");
        }
    }
    writer.join().unwrap();
    assert_eq!(a.whoami(), bulk("agent_alice"));
}

#[test]
fn a_client_that_never_reads_is_held_back_not_buffered() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"max_pipeline": 8}"#,
        Vec::new(),
    );
    let mut a = proxy.client("alice");
    // 32 MiB of ECHOs: far more than the socket buffers and the proxy's
    // 8 outstanding commands can hold.
    let big = "x".repeat(1000);
    let mut out = Vec::new();
    let mut n = 0;
    while out.len() < (32 << 20) {
        oxidepm_testkit::resp::encode(&mut out, &["ECHO", &big]);
        n += 1;
    }
    let mut w = a.stream.try_clone().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        w.write_all(&out).unwrap();
        done_tx.send(()).unwrap();
    });
    // The writer stays blocked while nobody reads (this can only pass
    // wrongly on a very slow machine, never fail wrongly).
    assert!(done_rx
        .recv_timeout(std::time::Duration::from_millis(500))
        .is_err());
    for _ in 0..n {
        assert_eq!(a.read(), bulk(&big));
    }
    writer.join().unwrap();
}

#[test]
fn a_blocking_read_does_not_hold_up_other_connections() {
    let (redis, proxy) = alice();
    let mut bridge = redis.bridge();
    group(&redis, "alice:discord:inbox", "$");
    let mut blocked = proxy.client("alice");
    send_blocking_read(&mut blocked, "c1");
    let mut other = proxy.client("alice");
    for i in 0..50 {
        let id = other.cmd(&["XADD", "alice:discord:outbox", "*", "n", &i.to_string()]);
        assert!(matches!(id, Value::Bulk(_)));
    }
    assert_eq!(other.whoami(), bulk("agent_alice"));
    bridge.cmd(&["XADD", "alice:discord:inbox", "*", "text", "wake up"]);
    let got = blocked.read();
    assert!(got.strings().contains(&"wake up".to_string()), "{got:?}");
}

#[test]
fn large_values_round_trip() {
    // Values far above the default 1 MiB, where configured.
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"max_bulk": 16777216, "max_command": 17825792, "lane_buffer": 33554432}"#,
        Vec::new(),
    );
    let mut a = proxy.client("alice");
    let big: Vec<u8> = (0..10 << 20).map(|i: u32| (i % 251) as u8).collect();
    // Both directions at once.
    assert_eq!(a.cmd(&[b"ECHO".as_slice(), &big]), Value::Bulk(big.clone()));
    // Up: into the outbox, checked by the bridge.
    let id = a.cmd(&[&b"XADD"[..], b"alice:discord:outbox", b"*", b"data", &big]);
    assert!(matches!(id, Value::Bulk(_)));
    let mut bridge = redis.bridge();
    let seen = bridge.cmd(&["XRANGE", "alice:discord:outbox", "-", "+"]);
    let Value::Array(entries) = seen else {
        panic!()
    };
    let Value::Array(entry) = &entries[0] else {
        panic!()
    };
    assert_eq!(
        entry[1],
        Value::Array(vec![bulk("data"), Value::Bulk(big.clone())])
    );
    // Down: from the inbox, read through the lane.
    group(&redis, "alice:discord:inbox", "0");
    bridge.cmd(&[&b"XADD"[..], b"alice:discord:inbox", b"*", b"data", &big]);
    let got = a.cmd(&words(
        "XREADGROUP GROUP alice c STREAMS alice:discord:inbox >",
    ));
    let Value::Array(streams) = got else {
        panic!("{got:?}")
    };
    let Value::Array(stream) = &streams[0] else {
        panic!()
    };
    let Value::Array(entries) = &stream[1] else {
        panic!()
    };
    let Value::Array(entry) = &entries[0] else {
        panic!()
    };
    assert_eq!(entry[1], Value::Array(vec![bulk("data"), Value::Bulk(big)]));
}

#[test]
fn agents_come_and_go_without_disturbing_others() {
    let (redis, proxy) = alice();
    let mut bridge = redis.bridge();
    group(&redis, "alice:discord:inbox", "$");
    let mut blocked = proxy.client("alice");
    send_blocking_read(&mut blocked, "c1");
    // Make sure the read is parked in Redis before the reload.
    assert_eq!(proxy.client("alice").whoami(), bulk("agent_alice"));

    let report = proxy.reconfigure(&[Agent::new("alice"), Agent::new("bob")]);
    assert_eq!(report.added, ["bob"]);
    assert_eq!(report.kept, ["alice"]);
    let mut b = proxy.client("bob");
    assert_eq!(b.whoami(), bulk("agent_bob"));
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(proxy.socket("bob")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
    }

    bridge.cmd(&["XADD", "alice:discord:inbox", "*", "text", "after reload"]);
    let got = blocked.read();
    assert!(
        got.strings().contains(&"after reload".to_string()),
        "{got:?}"
    );

    // Bob goes: his socket disappears and his connection is closed.
    let report = proxy.reconfigure(&[Agent::new("alice")]);
    assert_eq!(report.removed, ["bob"]);
    assert!(!proxy.socket("bob").exists());
    b.assert_closing();
    assert_eq!(blocked.whoami(), bulk("agent_alice"));
    assert_eq!(proxy.proxy.agents(), ["alice"]);

    // A broken file changes nothing.
    std::fs::write(&proxy.config, "{ not json").unwrap();
    assert!(proxy.proxy.reload().is_err());
    assert_eq!(proxy.client("alice").whoami(), bulk("agent_alice"));
}

#[test]
fn caps_rate_and_stream_length_when_configured() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(
        &redis,
        &[Agent::new("alice").with(r#""maxlen": 5, "rate_limit": 1000"#)],
    );
    let mut a = proxy.client("alice");
    // The cap is backpressure: entries past it are refused, none of the
    // earlier ones is trimmed, whatever MAXLEN the agent asks for.
    let mut refused = 0;
    for i in 0..20 {
        let r = a.cmd(&words(&format!(
            "XADD alice:discord:outbox MAXLEN = 100 * n {i}"
        )));
        if i < 5 {
            assert!(matches!(r, Value::Bulk(_)), "{i}: {r:?}");
        } else {
            assert!(r.error_starts("OXIDEPM outbox full"), "{i}: {r:?}");
            refused += 1;
        }
    }
    assert_eq!(refused, 15);
    let mut admin = redis.admin();
    let kept = admin.cmd(&["XRANGE", "alice:discord:outbox", "-", "+"]);
    let n: Vec<String> = kept.strings().into_iter().skip(2).step_by(3).collect();
    assert_eq!(n, ["0", "1", "2", "3", "4"], "{kept:?}");
    // 1000/s with a burst of 1000: a pipeline of 5000 hits the limit.
    let mut out = Vec::new();
    for _ in 0..5000 {
        oxidepm_testkit::resp::encode(&mut out, &["PING"]);
    }
    let mut w = a.stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        w.write_all(&out).unwrap();
    });
    let limited = (0..5000)
        .filter(|_| {
            a.read()
                .error_starts("OXIDEPM rate: agent 'alice' sends more than its 1000 commands")
        })
        .count();
    writer.join().unwrap();
    assert!(limited > 0);
}

#[test]
fn upstream_refusal_is_reported_to_the_client() {
    // Redis knows no agent_carol: AUTH fails, the lane says why.
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("carol")]);
    let mut c = proxy.client("carol");
    let r = c.read();
    assert!(
        r.error_starts("ERR lane unavailable: Redis refused AUTH as agent_carol"),
        "{r:?}"
    );
    c.assert_closed();
}
