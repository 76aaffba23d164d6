//! MULTI/EXEC through a lane, as client libraries send them (pipelined):
//! what a transaction the client is told failed never runs, and a
//! transaction passes none of the lane's bounds.

use super::harness::{ok, Agent, Client, Redis, TestProxy, Value};
use super::{alice, group};

const OUTBOX: &str = "alice:webhook:outbox";
const INBOX: &str = "alice:webhook:inbox";

/// How many entries `key` holds, as `sys` sees it.
fn xlen(redis: &Redis, key: &str) -> i64 {
    match redis.admin().cmd(&["XLEN", key]) {
        Value::Int(n) => n,
        other => panic!("XLEN {key}: {other:?}"),
    }
}

/// Sends every command of `pipeline` at once, then reads their replies.
fn pipelined(c: &mut Client, pipeline: &[&[&str]]) -> Vec<Value> {
    for args in pipeline {
        c.send(args);
    }
    pipeline.iter().map(|_| c.read()).collect()
}

fn queued() -> Value {
    Value::Simple("QUEUED".into())
}

#[test]
fn a_transaction_of_an_xadd_and_an_xack_commits() {
    let (redis, proxy) = alice();
    group(&redis, INBOX, "0");
    redis.bridge().cmd(&["XADD", INBOX, "*", "text", "in"]);
    let mut a = proxy.client("alice");
    let got = a.cmd(&["XREADGROUP", "GROUP", "alice", "c1", "STREAMS", INBOX, ">"]);
    let id = got.strings()[1].clone();
    let r = pipelined(
        &mut a,
        &[
            &["MULTI"],
            &["XADD", OUTBOX, "*", "text", "answer"],
            &["XACK", INBOX, "alice", &id],
            &["EXEC"],
        ],
    );
    assert_eq!(r[..3], [ok(), queued(), queued()], "{r:?}");
    let Value::Array(done) = &r[3] else {
        panic!("EXEC: {r:?}")
    };
    assert!(matches!(done[0], Value::Bulk(_)), "{done:?}");
    assert_eq!(done[1], Value::Int(1));
    assert_eq!(xlen(&redis, OUTBOX), 1);
    let pending = redis.admin().cmd(&["XPENDING", INBOX, "alice"]);
    assert!(
        matches!(&pending, Value::Array(p) if p[0] == Value::Int(0)),
        "{pending:?}"
    );
}

#[test]
fn a_refused_command_discards_the_whole_transaction() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    // What a retrying client would send again: if any of it ran, the
    // message would go out twice.
    for refused in [
        &["XADD", "bob:webhook:outbox", "*", "text", "as bob"][..],
        &["KEYS", "*"],
        &["CLIENT", "SETNAME", "inside"],
        &["INFO"],
        &[
            "XADD", OUTBOX, "MAXLEN", "~", "5", "LIMIT", "1", "*", "n", "x",
        ],
    ] {
        let r = pipelined(
            &mut a,
            &[
                &["MULTI"],
                &["XADD", OUTBOX, "*", "text", "first"],
                refused,
                &["XADD", OUTBOX, "*", "text", "last"],
                &["EXEC"],
            ],
        );
        assert_eq!(r[..2], [ok(), queued()], "{refused:?}: {r:?}");
        assert!(matches!(&r[2], Value::Error(_)), "{refused:?}: {r:?}");
        assert_eq!(r[3], queued(), "{refused:?}: {r:?}");
        assert!(
            r[4].error_starts("EXECABORT Transaction discarded"),
            "{refused:?}: {r:?}"
        );
        assert_eq!(xlen(&redis, OUTBOX), 0, "after {refused:?}");
        assert_eq!(xlen(&redis, "bob:webhook:outbox"), 0);
    }
    // The name set inside the refused transaction was not kept.
    assert_eq!(a.cmd(&["CLIENT", "GETNAME"]), Value::Nil);
    // The connection is out of the transaction and goes on.
    assert!(a.cmd(&["EXEC"]).error_starts("ERR EXEC without MULTI"));
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["XADD", OUTBOX, "*", "text", "ok"], &["EXEC"]],
    );
    assert!(matches!(&r[2], Value::Array(v) if v.len() == 1), "{r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 1);
}

#[test]
fn discard_drops_the_transaction_and_nested_multi_keeps_it() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    let r = pipelined(
        &mut a,
        &[
            &["MULTI"],
            &["XADD", OUTBOX, "*", "text", "dropped"],
            &["MULTI"],
            &["DISCARD"],
            &["EXEC"],
        ],
    );
    assert_eq!(r[..2], [ok(), queued()], "{r:?}");
    assert!(
        r[2].error_starts("ERR MULTI calls can not be nested"),
        "{r:?}"
    );
    assert_eq!(r[3], ok(), "{r:?}");
    assert!(r[4].error_starts("ERR EXEC without MULTI"), "{r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 0);
    // A malformed MULTI opens nothing, in Redis or in the proxy: the
    // refusal that follows does not turn into an EXECABORT.
    let r = pipelined(
        &mut a,
        &[&["MULTI", "x"], &["PING"], &["KEYS", "*"], &["EXEC"]],
    );
    assert!(r[0].error_starts("ERR wrong number"), "{r:?}");
    assert!(r[3].error_starts("ERR EXEC without MULTI"), "{r:?}");
    // A DISCARD of a refused transaction is a plain DISCARD.
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["FLUSHALL"], &["DISCARD"], &["PING"]],
    );
    assert_eq!(r[2], ok(), "{r:?}");
    assert_eq!(r[3], Value::Simple("PONG".into()), "{r:?}");
}

#[test]
fn watch_is_for_the_agents_own_keys_and_works_on_them() {
    let (redis, proxy) = alice();
    let mut a = proxy.client("alice");
    for key in [
        "bob:webhook:inbox",
        "alice:webhook:inbox:x",
        "alice:nope:inbox",
    ] {
        let r = a.cmd(&["WATCH", INBOX, key]);
        assert!(r.error_starts("NOPERM WATCH"), "{key}: {r:?}");
    }
    // Nothing was watched: a change to alice's inbox does not abort.
    redis.bridge().cmd(&["XADD", INBOX, "*", "text", "x"]);
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["XADD", OUTBOX, "*", "n", "1"], &["EXEC"]],
    );
    assert!(matches!(&r[2], Value::Array(_)), "{r:?}");
    assert_eq!(a.cmd(&["WATCH", INBOX]), ok());
    redis.bridge().cmd(&["XADD", INBOX, "*", "text", "y"]);
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["XADD", OUTBOX, "*", "n", "2"], &["EXEC"]],
    );
    assert_eq!(r[2], Value::Nil, "the watched key changed: {r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 1);
    assert_eq!(a.cmd(&["UNWATCH"]), ok());
    // Its own outbox may be watched too.
    assert_eq!(a.cmd(&["WATCH", OUTBOX, INBOX]), ok());
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["XADD", OUTBOX, "*", "n", "3"], &["EXEC"]],
    );
    assert!(matches!(&r[2], Value::Array(v) if v.len() == 1), "{r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 2);
}

#[test]
fn a_transaction_cannot_pass_the_outbox_bound() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start(&redis, &[Agent::new("alice").with(r#""maxlen": 3"#)]);
    let mut a = proxy.client("alice");
    let mut many: Vec<&[&str]> = vec![&["MULTI"]];
    many.extend(std::iter::repeat_n(
        &["XADD", OUTBOX, "*", "n", "x"][..],
        10,
    ));
    many.push(&["EXEC"]);
    let r = pipelined(&mut a, &many);
    assert!(r[11].error_starts("EXECABORT"), "{r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 0);

    // Three queued XADDs count while their transaction is open: another
    // connection's XADD is refused, and the EXEC then stays in the bound.
    let r = pipelined(
        &mut a,
        &[
            &["MULTI"],
            &["XADD", OUTBOX, "*", "n", "1"],
            &["XADD", OUTBOX, "*", "n", "2"],
            &["XADD", OUTBOX, "*", "n", "3"],
        ],
    );
    assert_eq!(r, [ok(), queued(), queued(), queued()]);
    let mut b = proxy.client("alice");
    let r = b.cmd(&["XADD", OUTBOX, "*", "n", "other"]);
    assert!(r.error_starts("OXIDEPM outbox full"), "{r:?}");
    assert!(matches!(a.cmd(&["EXEC"]), Value::Array(v) if v.len() == 3));
    assert_eq!(xlen(&redis, OUTBOX), 3);
}

#[test]
fn a_transaction_is_bounded_in_commands_and_bytes() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"max_transaction_commands": 4, "max_transaction_bytes": 2000}"#,
        Vec::new(),
    );
    let mut a = proxy.client("alice");
    let xadd: &[&str] = &["XADD", OUTBOX, "*", "n", "x"];
    let r = pipelined(
        &mut a,
        &[&["MULTI"], xadd, xadd, xadd, xadd, xadd, &["EXEC"]],
    );
    assert_eq!(r[4], queued(), "four fit: {r:?}");
    assert!(
        r[5].error_starts("OXIDEPM transaction: more than 4 commands"),
        "{r:?}"
    );
    assert!(r[6].error_starts("EXECABORT"), "{r:?}");
    let big = "v".repeat(3000);
    let r = pipelined(
        &mut a,
        &[&["MULTI"], &["XADD", OUTBOX, "*", "n", &big], &["EXEC"]],
    );
    assert!(
        r[1].error_starts("OXIDEPM transaction: more than 2000 bytes"),
        "{r:?}"
    );
    assert!(r[2].error_starts("EXECABORT"), "{r:?}");
    assert_eq!(xlen(&redis, OUTBOX), 0);
    // Outside a transaction the same command is fine.
    assert!(matches!(
        a.cmd(&["XADD", OUTBOX, "*", "n", &big]),
        Value::Bulk(_)
    ));
}

#[test]
fn the_consumer_bound_holds_inside_a_transaction() {
    let redis = Redis::start(&["alice"]);
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice")],
        r#""limits": {"max_consumers": 2}"#,
        Vec::new(),
    );
    group(&redis, INBOX, "0");
    let mut a = proxy.client("alice");
    let create =
        |c: &'static str| -> [&'static str; 5] { ["XGROUP", "CREATECONSUMER", INBOX, "alice", c] };
    let (c1, c2, c3) = (create("c1"), create("c2"), create("c3"));
    let r = pipelined(&mut a, &[&["MULTI"], &c1, &c2, &c3, &["EXEC"]]);
    assert!(r[3].error_starts("OXIDEPM consumers"), "{r:?}");
    assert!(r[4].error_starts("EXECABORT"), "{r:?}");
    let none = redis.admin().cmd(&["XINFO", "CONSUMERS", INBOX, "alice"]);
    assert_eq!(none, Value::Array(Vec::new()));
    let r = pipelined(&mut a, &[&["MULTI"], &c1, &c2, &["EXEC"]]);
    assert_eq!(
        r[3],
        Value::Array(vec![Value::Int(1), Value::Int(1)]),
        "{r:?}"
    );
}
