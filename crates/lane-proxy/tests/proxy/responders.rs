//! A responder's lane, attacked by the responder: one reply per request,
//! whatever the batching — pipelined, in one MULTI, behind the XACK of
//! its request, from two connections at once — and no reply that does not
//! name the request of the agent it goes to.

use super::harness::{ok, Agent, Client, Redis, TestProxy, Value};
use oxidepm_testkit::resp::encode;
use std::sync::{Arc, Barrier};

/// Alice and bob, and the responder `echo`, its group made on both
/// agents' outboxes and alice's on her inbox, as the daemon makes them.
fn echo() -> (Redis, TestProxy) {
    let redis = Redis::start_with(&["alice", "bob"], &["echo"]);
    let mut admin = redis.admin();
    for (key, group) in [
        ("alice:echo:outbox", "echo"),
        ("bob:echo:outbox", "echo"),
        ("alice:echo:inbox", "alice"),
    ] {
        let r = admin.cmd(&["XGROUP", "CREATE", key, group, "0", "MKSTREAM"]);
        assert_eq!(r, ok(), "XGROUP CREATE {key}");
    }
    let families: Vec<String> = oxidepm_testkit::redis::SOURCES
        .iter()
        .chain(&["echo"])
        .map(|f| format!("\"{f}\""))
        .collect();
    let extra = format!(
        r#""families": [{}], "responders": [{{"name": "echo", "password_file": "{}"}}]"#,
        families.join(", "),
        redis.password_file("resp_echo").display()
    );
    let proxy = TestProxy::start_with(
        &redis,
        &[Agent::new("alice"), Agent::new("bob")],
        &extra,
        Vec::new(),
    );
    (redis, proxy)
}

/// `n` requests of `agent`'s, read by the responder: their ids.
fn ask(proxy: &TestProxy, echo: &mut Client, agent: &str, n: usize) -> Vec<String> {
    let outbox = format!("{agent}:echo:outbox");
    let mut a = proxy.client(agent);
    for i in 0..n {
        let r = a.cmd(&["XADD", &outbox, "*", "text", &format!("question {i}")]);
        assert!(matches!(r, Value::Bulk(_)), "{r:?}");
    }
    let got = echo.cmd(&[
        "XREADGROUP",
        "GROUP",
        "echo",
        "r1",
        "COUNT",
        "10000",
        "STREAMS",
        &outbox,
        ">",
    ]);
    let Value::Array(streams) = got else {
        panic!("{got:?}")
    };
    let Value::Array(stream) = &streams[0] else {
        panic!("{streams:?}")
    };
    let Value::Array(entries) = &stream[1] else {
        panic!("{stream:?}")
    };
    let ids: Vec<String> = entries
        .iter()
        .map(|e| match e {
            Value::Array(e) => e[0].text().unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), n, "{entries:?}");
    ids
}

/// A reply to `request` in `agent`'s inbox.
fn reply(agent: &str, request: &str, text: &str) -> Vec<String> {
    [
        &format!("{agent}:echo:inbox")[..],
        "MAXLEN",
        "~",
        "100",
        "*",
        "request_id",
        request,
        "text",
        text,
    ]
    .iter()
    .fold(vec!["XADD".to_string()], |mut v, a| {
        v.push(a.to_string());
        v
    })
}

fn ack(agent: &str, request: &str) -> Vec<String> {
    ["XACK", &format!("{agent}:echo:outbox"), "echo", request]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Sends every command at once, then reads their replies.
fn pipelined(c: &mut Client, cmds: &[Vec<String>]) -> Vec<Value> {
    let mut out = Vec::new();
    for args in cmds {
        encode(&mut out, args);
    }
    c.send_raw(&out);
    cmds.iter().map(|_| c.read()).collect()
}

/// The replies in `agent`'s inbox, as `sys` sees them.
fn replies(redis: &Redis, agent: &str) -> i64 {
    match redis.admin().cmd(&["XLEN", &format!("{agent}:echo:inbox")]) {
        Value::Int(n) => n,
        other => panic!("XLEN: {other:?}"),
    }
}

/// How many of the responder's requests of `agent` are pending.
fn pending(redis: &Redis, agent: &str) -> i64 {
    let r = redis
        .admin()
        .cmd(&["XPENDING", &format!("{agent}:echo:outbox"), "echo"]);
    match &r {
        Value::Array(p) => match p[0] {
            Value::Int(n) => n,
            _ => panic!("{r:?}"),
        },
        _ => panic!("{r:?}"),
    }
}

fn refused(v: &Value) -> bool {
    v.error_starts("NOPERM reply refused")
}

fn multi(cmds: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut all = vec![vec!["MULTI".to_string()]];
    all.extend(cmds.iter().cloned());
    all.push(vec!["EXEC".to_string()]);
    all
}

#[test]
fn a_transaction_cannot_answer_one_request_twice() {
    let (redis, proxy) = echo();
    let mut e = proxy.client("echo");
    let ids = ask(&proxy, &mut e, "alice", 1);
    let id = &ids[0];
    // The attack as it was found: the second reply, behind the XACK of its
    // own request, would have been checked before that XACK ran.
    let got = pipelined(
        &mut e,
        &multi(&[
            reply("alice", id, "one"),
            ack("alice", id),
            reply("alice", id, "two"),
        ]),
    );
    assert!(refused(&got[3]), "the second reply: {got:?}");
    assert!(got[4].error_starts("EXECABORT"), "{got:?}");
    assert_eq!(replies(&redis, "alice"), 0, "nothing of it ran");
    assert_eq!(pending(&redis, "alice"), 1);
    // Acknowledged first inside the transaction: the reply runs after the
    // XACK and finds its request answered.
    let got = pipelined(
        &mut e,
        &multi(&[ack("alice", id), reply("alice", id, "late")]),
    );
    let Value::Array(done) = &got[3] else {
        panic!("{got:?}")
    };
    assert_eq!(done[0], Value::Int(1), "{done:?}");
    assert!(refused(&done[1]), "{done:?}");
    assert_eq!(replies(&redis, "alice"), 0);
    // One reply and the XACK the contract asks for: the reply acknowledged
    // the request itself.
    let ids = ask(&proxy, &mut e, "alice", 1);
    let id = &ids[0];
    let got = pipelined(
        &mut e,
        &multi(&[reply("alice", id, "one"), ack("alice", id)]),
    );
    let Value::Array(done) = &got[3] else {
        panic!("{got:?}")
    };
    assert!(matches!(done[0], Value::Bulk(_)), "{done:?}");
    assert_eq!(done[1], Value::Int(0), "already acknowledged: {done:?}");
    assert_eq!(replies(&redis, "alice"), 1);
    assert_eq!(pending(&redis, "alice"), 0);
}

#[test]
fn a_pipeline_cannot_answer_one_request_twice() {
    let (redis, proxy) = echo();
    let mut e = proxy.client("echo");
    let ids = ask(&proxy, &mut e, "alice", 2);
    let got = pipelined(
        &mut e,
        &[
            reply("alice", &ids[0], "one"),
            reply("alice", &ids[0], "two"),
            ack("alice", &ids[0]),
            reply("alice", &ids[0], "three"),
            ack("alice", &ids[1]),
            reply("alice", &ids[1], "after its ack"),
        ],
    );
    assert!(matches!(got[0], Value::Bulk(_)), "{got:?}");
    assert!(
        refused(&got[1]) && refused(&got[3]) && refused(&got[5]),
        "{got:?}"
    );
    assert_eq!(got[2], Value::Int(0), "{got:?}");
    assert_eq!(got[4], Value::Int(1), "{got:?}");
    assert_eq!(replies(&redis, "alice"), 1);
    // An id of milliseconds alone is `<ms>-0`, as XACK takes it: it does
    // not answer a pending `<ms>-5` (which it would never acknowledge, so
    // it could answer it again and again).
    let ms = ids[1].split_once('-').unwrap().0.parse::<u64>().unwrap() + 1;
    let request = format!("{ms}-5");
    let r = redis
        .admin()
        .cmd(&["XADD", "alice:echo:outbox", &request, "text", "at 5"]);
    assert_eq!(r.text().as_deref(), Some(request.as_str()), "{r:?}");
    let got = e.cmd(&[
        "XREADGROUP",
        "GROUP",
        "echo",
        "r1",
        "STREAMS",
        "alice:echo:outbox",
        ">",
    ]);
    assert!(got.strings().contains(&request), "{got:?}");
    let got = pipelined(
        &mut e,
        &[
            reply("alice", &ms.to_string(), "by ms"),
            reply("alice", &ms.to_string(), "by ms again"),
            reply("alice", &request, "by its id"),
        ],
    );
    assert!(refused(&got[0]) && refused(&got[1]), "{got:?}");
    assert!(matches!(got[2], Value::Bulk(_)), "{got:?}");
    assert_eq!(replies(&redis, "alice"), 2);
    assert_eq!(pending(&redis, "alice"), 0);
}

#[test]
fn a_reply_names_a_pending_request_of_the_agent_it_goes_to() {
    let (redis, proxy) = echo();
    let mut e = proxy.client("echo");
    let ids = ask(&proxy, &mut e, "alice", 1);
    let id = &ids[0];
    // With alice's request pending, a reply naming none is refused, to her
    // and to bob; and so is one to bob naming alice's request.
    for (to, cmd) in [
        (
            "alice",
            "XADD alice:echo:inbox MAXLEN ~ 100 * text unsolicited",
        ),
        ("bob", "XADD bob:echo:inbox MAXLEN ~ 100 * text unsolicited"),
    ] {
        let r = e.cmd(&oxidepm_testkit::words(cmd));
        assert!(
            r.error_starts("NOPERM reply refused")
                && matches!(&r, Value::Error(t) if t.contains("request_id")),
            "{to}: {r:?}"
        );
    }
    let r = e.cmd(&reply("bob", id, "for bob"));
    assert!(
        refused(&r) && matches!(&r, Value::Error(t) if t.contains("'bob'")),
        "{r:?}"
    );
    // Inside a transaction each refusal discards the whole of it.
    let got = pipelined(
        &mut e,
        &multi(&[
            reply("alice", id, "fine"),
            oxidepm_testkit::words("XADD alice:echo:inbox MAXLEN ~ 100 * text unsolicited"),
        ]),
    );
    assert!(got[3].error_starts("EXECABORT"), "{got:?}");
    assert_eq!(replies(&redis, "alice") + replies(&redis, "bob"), 0);
    // The one right reply passes, once.
    assert!(matches!(
        e.cmd(&reply("alice", id, "answer")),
        Value::Bulk(_)
    ));
    assert!(refused(&e.cmd(&reply("alice", id, "again"))));
    assert_eq!(replies(&redis, "alice"), 1);
    assert_eq!(replies(&redis, "bob"), 0);
}

#[test]
fn two_connections_racing_give_each_request_one_reply() {
    let (redis, proxy) = echo();
    let mut e = proxy.client("echo");
    let ids = Arc::new(ask(&proxy, &mut e, "alice", 100));
    let start = Arc::new(Barrier::new(2));
    let racers: Vec<_> = (0..2)
        .map(|n| {
            let (ids, start) = (ids.clone(), start.clone());
            let mut c = proxy.client("echo");
            std::thread::spawn(move || {
                let cmds: Vec<Vec<String>> = ids
                    .iter()
                    .map(|id| reply("alice", id, &format!("from {n}")))
                    .collect();
                start.wait();
                pipelined(&mut c, &cmds)
            })
        })
        .collect();
    let mut passed = 0;
    for r in racers {
        for v in r.join().unwrap() {
            match v {
                Value::Bulk(_) => passed += 1,
                other => assert!(refused(&other), "{other:?}"),
            }
        }
    }
    assert_eq!(passed, 100, "one reply per request");
    assert_eq!(replies(&redis, "alice"), 100);
    assert_eq!(
        pending(&redis, "alice"),
        0,
        "each reply acknowledged its request"
    );
}
