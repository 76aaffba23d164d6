//! What one agent's connections can cost the other agents, and the state
//! a refused handshake leaves: attacks through a lane, against a real
//! Redis.

use super::harness::{Agent, Redis, TestProxy, Value};

/// Redis's `used_memory`, as `sys` reads it.
fn used_memory(redis: &Redis) -> u64 {
    let Value::Bulk(info) = redis.admin().cmd(&["INFO", "memory"]) else {
        panic!("INFO memory")
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}

#[test]
fn open_transactions_of_one_agent_do_not_fill_redis_for_the_others() {
    let redis = Redis::start(&["alice", "bob"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice"), Agent::new("bob")],
        r#""limits": {"max_transaction_bytes": 1048576}"#,
        Vec::new(),
    );
    // Room for everything the lanes hold, and 24 MiB more.
    let bound = used_memory(&redis) + (24 << 20);
    let r = redis
        .admin()
        .cmd(&["CONFIG", "SET", "maxmemory", &bound.to_string()]);
    assert_eq!(r, Value::Simple("OK".into()));
    // Alice opens as many connections as her lane takes and in each one
    // queues commands of many one-byte arguments, never to send EXEC:
    // Redis keeps every queued argument as an object of its own.
    let mut ack: Vec<&str> = vec!["XACK", "alice:webhook:inbox", "alice"];
    ack.extend(std::iter::repeat_n("1", 8000));
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut a = proxy.client("alice");
        assert_eq!(a.cmd(&["MULTI"]), Value::Simple("OK".into()));
        loop {
            match a.cmd(&ack) {
                Value::Simple(q) if q == "QUEUED" => {}
                // The transaction's bound, or Redis's memory bound.
                _ => break,
            }
        }
        held.push(a);
    }
    // Bob still gets his message out.
    let mut b = proxy.client("bob");
    let r = b.cmd(&["XADD", "bob:webhook:outbox", "*", "text", "hi"]);
    assert!(matches!(r, Value::Bulk(_)), "bob's XADD: {r:?}");
    drop(held);
}

#[test]
fn a_refused_hello_sets_no_name_and_no_protocol() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let mut a = proxy.client("alice");
    for bad in [
        &["HELLO", "4", "SETNAME", "w"][..],
        &["HELLO", "abc", "SETNAME", "w"],
        &["HELLO", "03", "SETNAME", "w"],
        &["HELLO", "3", "SETNAME"],
        &["HELLO", "3", "SETNAME", "a b"],
    ] {
        let r = a.cmd(bad);
        assert!(matches!(r, Value::Error(_)), "{bad:?}: {r:?}");
        // Redis changed nothing for it: neither does the proxy.
        assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), Value::Nil, "after {bad:?}");
    }
    assert_eq!(a.cmd(&["PING"]), Value::Simple("PONG".into()));
}
