//! Attacks through a lane, against a real Redis: what one agent's
//! connections can cost the other agents (memory, rate), the state a
//! refused handshake leaves, and transactions and RESP3 replies across
//! the proxy's read, batch and reply boundaries.

use super::harness::{Agent, Redis, TestProxy, Value};
use std::time::Duration;

fn wait_for<R: oxidepm_testkit::Ready>(what: &str, ok: impl FnMut() -> R) -> R::Output {
    oxidepm_testkit::eventually(Duration::from_secs(30), what, ok)
}

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

/// `calls` of `cmd` in Redis's command statistics, as `sys` reads them.
fn calls(redis: &Redis, cmd: &str) -> u64 {
    let Value::Bulk(info) = redis.admin().cmd(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats")
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn transaction_commands_do_not_pass_the_rate_limit() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""rate_limit": 5"#)]);
    let mut a = proxy.client("alice");
    // EXEC and DISCARD without a transaction, and a nested MULTI, are
    // plain errors of Redis: each is work for Redis like PING.
    let mut sent: Vec<&[&str]> = Vec::new();
    sent.extend(std::iter::repeat_n(&["EXEC"][..], 40));
    sent.extend(std::iter::repeat_n(&["DISCARD"][..], 40));
    for args in &sent {
        a.send(args);
    }
    let limited = sent
        .iter()
        .filter(|_| a.read().error_starts("OXIDEPM rate"))
        .count();
    assert!(limited >= 70, "{limited} of 80 limited");
    assert!(calls(&redis, "exec") + calls(&redis, "discard") <= 10);
}

#[test]
fn a_command_over_the_rate_limit_discards_its_transaction() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""rate_limit": 3"#)]);
    let mut a = proxy.client("alice");
    let xadd: &[&str] = &["XADD", "alice:webhook:outbox", "*", "n", "x"];
    let sent: Vec<&[&str]> = vec![&["MULTI"], xadd, xadd, xadd, xadd, xadd, &["EXEC"]];
    for args in &sent {
        a.send(args);
    }
    let r: Vec<Value> = sent.iter().map(|_| a.read()).collect();
    assert!(r.iter().any(|v| v.error_starts("OXIDEPM rate")), "{r:?}");
    assert!(r[6].error_starts("EXECABORT"), "{r:?}");
    assert_eq!(
        redis.admin().cmd(&["XLEN", "alice:webhook:outbox"]),
        Value::Int(0)
    );
}

#[test]
fn empty_transactions_wait_for_the_rate_limit() {
    let redis = Redis::start(&["alice"]);
    // One command each two seconds, a burst of one.
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""rate_limit": 0.5"#)]);
    let mut a = proxy.client("alice");
    for _ in 0..3 {
        a.send(&["MULTI"]);
        a.send(&["EXEC"]);
    }
    assert_eq!(a.read(), Value::Simple("OK".into()));
    assert_eq!(a.read(), Value::Array(Vec::new()));
    // The next MULTI waits for its token (this fails wrongly only if
    // reading the statistics takes two seconds)...
    assert_eq!(calls(&redis, "multi"), 1);
    // ... and is then answered, not refused.
    assert_eq!(a.read(), Value::Simple("OK".into()));
    assert_eq!(a.read(), Value::Array(Vec::new()));
}

#[test]
fn a_transaction_left_open_gives_its_bounds_back_when_its_connection_ends() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice").with(r#""maxlen": 3"#)],
        r#""limits": {"max_transaction_bytes": 1000}"#,
        Vec::new(),
    );
    let xadd: &[&str] = &["XADD", "alice:webhook:outbox", "*", "n", "x"];
    let transaction = |c: &mut super::harness::Client| {
        for args in [&["MULTI"][..], xadd, xadd, xadd] {
            c.send(args);
        }
        (0..4).map(|_| c.read()).collect::<Vec<_>>()
    };
    // Three ways to leave: QUIT, hanging up, and hanging up halfway
    // through the next command.
    for leave in 0..3 {
        let mut a = proxy.client("alice");
        let r = transaction(&mut a);
        assert!(
            r[1..].iter().all(|v| *v == Value::Simple("QUEUED".into())),
            "{r:?}"
        );
        // While it is open, it holds the bounds.
        let mut b = proxy.client("alice");
        let r = transaction(&mut b);
        assert!(r.iter().any(|v| matches!(v, Value::Error(_))), "{r:?}");
        assert_eq!(b.cmd(&["DISCARD"]), Value::Simple("OK".into()));
        match leave {
            0 => assert_eq!(a.cmd(&["QUIT"]), Value::Simple("OK".into())),
            1 => {}
            _ => a.send_raw(b"*1\r\n$4\r\nEX"),
        }
        drop(a);
        // Another connection's transaction of three fits again: the
        // outbox's in-flight entries and the queued bytes were given back.
        wait_for("the bounds given back", || {
            let mut b = proxy.client("alice");
            let mut r = transaction(&mut b);
            r.push(b.cmd(&["DISCARD"]));
            r.iter().all(|v| !matches!(v, Value::Error(_)))
        });
    }
    assert_eq!(
        redis.admin().cmd(&["XLEN", "alice:webhook:outbox"]),
        Value::Int(0)
    );
}

#[test]
fn transactions_pipelined_across_read_and_batch_boundaries_stay_whole() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let mut a = proxy.client("alice");
    // Values around the proxy's read and batch size (64 KiB), to the
    // shared form of the outbox (rewritten on the way) and to its own;
    // every third transaction has a refused command in the middle.
    let sizes = [1, 30_000, 65_000, 66_000, 100_000, 7];
    let mut out = Vec::new();
    let mut expect = Vec::new();
    for t in 0..24 {
        let mut replies = vec![Value::Simple("OK".into())];
        oxidepm_testkit::resp::encode(&mut out, &["MULTI"]);
        for (i, size) in sizes.iter().enumerate() {
            let key = if i % 2 == 0 {
                "webhook:outbox"
            } else {
                "alice:webhook:outbox"
            };
            let v = "v".repeat(*size + t);
            oxidepm_testkit::resp::encode(&mut out, &["XADD", key, "*", "v", &v]);
            replies.push(Value::Simple("QUEUED".into()));
            if t % 3 == 0 && i == 2 {
                oxidepm_testkit::resp::encode(&mut out, &["KEYS", "*"]);
                replies.push(Value::Error(String::new()));
            }
        }
        oxidepm_testkit::resp::encode(&mut out, &["EXEC"]);
        expect.push((t % 3 == 0, replies));
    }
    let mut w = a.stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        w.write_all(&out).unwrap();
    });
    for (t, (aborted, replies)) in expect.iter().enumerate() {
        for want in replies {
            let got = a.read();
            match want {
                Value::Error(_) => assert!(matches!(got, Value::Error(_)), "{t}: {got:?}"),
                want => assert_eq!(&got, want, "transaction {t}"),
            }
        }
        let exec = a.read();
        if *aborted {
            assert!(exec.error_starts("EXECABORT"), "{t}: {exec:?}");
        } else {
            assert!(
                matches!(&exec, Value::Array(v) if v.len() == sizes.len()),
                "{t}: {exec:?}"
            );
        }
    }
    writer.join().unwrap();
    let Value::Array(all) = redis
        .admin()
        .cmd(&["XRANGE", "alice:webhook:outbox", "-", "+"])
    else {
        panic!("XRANGE")
    };
    assert_eq!(all.len(), 16 * sizes.len());
    // In order, each value whole.
    let lens: Vec<usize> = all
        .iter()
        .map(|e| e.strings().last().map_or(0, |v| v.len()))
        .collect();
    let want: Vec<usize> = (0..24)
        .filter(|t| t % 3 != 0)
        .flat_map(|t| sizes.iter().map(move |s| s + t))
        .collect();
    assert_eq!(lens, want);
}

#[test]
fn resp3_replies_of_every_shape_stay_in_step_with_local_answers() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice")]);
    let inbox = "alice:webhook:inbox";
    let r = redis
        .admin()
        .cmd(&["XGROUP", "CREATE", inbox, "alice", "0", "MKSTREAM"]);
    assert_eq!(r, Value::Simple("OK".into()));
    for i in 0..3 {
        redis
            .bridge()
            .cmd(&["XADD", inbox, "*", "n", &i.to_string()]);
    }
    let mut a = proxy.client("alice");
    assert!(matches!(a.cmd(&["HELLO", "3"]), Value::Map(_)));
    let pipeline: &[&[&str]] = &[
        &[
            "XREADGROUP",
            "GROUP",
            "alice",
            "c",
            "COUNT",
            "2",
            "STREAMS",
            inbox,
            ">",
        ],
        &["CLIENT", "GETNAME"],
        &["XINFO", "STREAM", inbox, "FULL"],
        &["INFO"],
        &["XAUTOCLAIM", inbox, "alice", "d", "0", "0"],
        &["MULTI"],
        &["XPENDING", inbox, "alice"],
        &["KEYS", "*"],
        &["EXEC"],
        &["MULTI"],
        &["XINFO", "GROUPS", inbox],
        &["EXEC"],
        &["PING"],
    ];
    for args in pipeline {
        a.send(args);
    }
    let r: Vec<Value> = pipeline.iter().map(|_| a.read()).collect();
    assert!(matches!(&r[0], Value::Map(m) if m.len() == 2), "{:?}", r[0]);
    assert_eq!(r[1], Value::Nil);
    assert!(matches!(&r[2], Value::Map(_)), "{:?}", r[2]);
    assert!(matches!(&r[3], Value::Bulk(_)), "{:?}", r[3]);
    assert!(
        matches!(&r[4], Value::Array(v) if v.len() == 3),
        "{:?}",
        r[4]
    );
    assert!(r[8].error_starts("EXECABORT"), "{:?}", r[8]);
    assert!(
        matches!(&r[11], Value::Array(v) if v.len() == 1),
        "{:?}",
        r[11]
    );
    assert_eq!(r[12], Value::Simple("PONG".into()));
}

/// Redis's `evicted_clients`: connections it closed to stay within
/// `maxmemory-clients`.
fn evicted_clients(redis: &Redis) -> u64 {
    let Value::Bulk(info) = redis.admin().cmd(&["INFO", "stats"]) else {
        panic!("INFO stats")
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("evicted_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("evicted_clients in INFO")
}

#[test]
fn replies_a_client_never_reads_do_not_fill_redis_for_the_others() {
    let redis = Redis::start(&["alice", "bob"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice"), Agent::new("bob")]);
    let bound = used_memory(&redis) + (64 << 20);
    let r = redis
        .admin()
        .cmd(&["CONFIG", "SET", "maxmemory", &bound.to_string()]);
    assert_eq!(r, Value::Simple("OK".into()));
    // Eighteen bytes each, and some 170 KiB of reply each, that Redis
    // keeps while the proxy does not read them, which it does not while
    // alice does not.
    let mut a = proxy.client("alice");
    for _ in 0..1000 {
        a.send(&["COMMAND", "DOCS"]);
    }
    // Redis ran them all, passed its bound, or closed alice's connection.
    wait_for("the pipeline's end", || {
        calls(&redis, "command|docs") >= 1000
            || used_memory(&redis) > bound
            || evicted_clients(&redis) > 0
    });
    let mut b = proxy.client("bob");
    let r = b.cmd(&["XADD", "bob:webhook:outbox", "*", "text", "hi"]);
    assert!(matches!(r, Value::Bulk(_)), "bob's XADD: {r:?}");
    // Alice's connection is the one closed: what was relayed, then the end
    // (a read that times out is an error, and fails this).
    use std::io::Read;
    let mut sink = vec![0u8; 1 << 20];
    loop {
        match a.stream.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
                break;
            }
        }
    }
}
