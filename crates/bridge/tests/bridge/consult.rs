//! Agents consulting each other through the bridge: alice's questions
//! reach bob as coming from alice whatever she writes, bob's answers reach
//! alice only for questions she asked, a question past `max_open` waits,
//! and everything else lands in the sender's dead stream with the reason,
//! told to the sender in its own inbox.

use super::harness::*;
use super::{agent_says, field};
use serde_json::{json, Value};
use std::collections::HashMap;

type Entry = (String, HashMap<String, String>);

const AGENTS: &[&str] = &["alice", "bob", "carol"];

/// A Redis whose agents have consult outboxes, and the bridge's
/// configuration with `rules` and `limits`.
fn setup(rules: Value, limits: Value) -> Redis {
    let redis = Redis::start_with(AGENTS, &["consult"]);
    write(&redis, rules, limits);
    redis
}

fn write(redis: &Redis, rules: Value, limits: Value) {
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": AGENTS,
            "sources": ["webhook", "consult"],
            "consult": {"rules": rules, "limits": limits},
        }),
    );
}

/// Waits until `key` holds `n` entries, and returns them.
fn wait_for(redis: &Redis, key: &str, n: usize) -> Vec<Entry> {
    let mut admin = redis.admin();
    eventually(WAIT, &format!("{n} entries in {key}"), || {
        let e = entries(&mut admin, key);
        (e.len() >= n).then_some(e)
    })
}

/// Waits for `n` messages in an inbox, not counting the refusals told back
/// to its agent (they arrive in the same stream, in any order with them).
fn wait_messages(redis: &Redis, key: &str, n: usize) -> Vec<Entry> {
    let mut admin = redis.admin();
    eventually(WAIT, &format!("{n} messages in {key}"), || {
        let e: Vec<Entry> = entries(&mut admin, key)
            .into_iter()
            .filter(|e| field(e, "kind") != "refused")
            .collect();
        (e.len() >= n).then_some(e)
    })
}

/// Waits until the bridge has acknowledged everything in `outbox`.
fn settled(redis: &Redis, outbox: &str) {
    let mut admin = redis.admin();
    eventually(WAIT, &format!("{outbox} acknowledged"), || {
        (pending(&mut admin, outbox) == 0).then_some(())
    });
}

fn len(redis: &Redis, key: &str) -> usize {
    entries(&mut redis.admin(), key).len()
}

/// The entries of an inbox that are messages, not refusals told back.
fn delivered(redis: &Redis, key: &str) -> usize {
    let all = entries(&mut redis.admin(), key);
    all.iter().filter(|e| field(e, "kind") != "refused").count()
}

/// The refusals told back in an inbox, once they are all there.
fn refusals(redis: &Redis, key: &str, n: usize) -> Vec<Entry> {
    let mut admin = redis.admin();
    eventually(WAIT, &format!("{n} refusals in {key}"), || {
        let r: Vec<Entry> = entries(&mut admin, key)
            .into_iter()
            .filter(|e| field(e, "kind") == "refused")
            .collect();
        (r.len() >= n).then_some(r)
    })
}

#[test]
fn questions_and_answers_go_both_ways_in_order_as_the_agents_of_the_keys() {
    let redis = setup(json!([{"from": "alice", "to": "bob"}]), json!({}));
    let _tb = TestBridge::start(&redis.config_path());
    let asked: Vec<String> = (1..=3)
        .map(|i| {
            agent_says(
                &redis,
                "alice",
                "consult",
                &[
                    ("to", "bob"),
                    ("text", &format!("question {i}")),
                    ("topic", "dns"),
                ],
            )
        })
        .collect();
    let got = wait_messages(&redis, "bob:consult:inbox", 3);
    for (i, (e, id)) in got.iter().zip(&asked).enumerate() {
        assert_eq!(field(e, "text"), format!("question {}", i + 1), "in order");
        assert_eq!(field(e, "from"), "alice");
        assert_eq!(field(e, "to"), "bob");
        assert_eq!(field(e, "kind"), "question");
        assert_eq!(field(e, "request_id"), id);
        assert_eq!(field(e, "topic"), "dns", "other fields pass");
        assert!(!e.1.contains_key("re"));
    }
    // Bob reads them as himself.
    assert_eq!(
        entries(&mut redis.agent("bob"), "bob:consult:inbox").len(),
        3
    );

    // Bob answers the last first: each answer goes back, in his order.
    for id in asked.iter().rev() {
        agent_says(
            &redis,
            "bob",
            "consult",
            &[
                ("to", "alice"),
                ("re", id),
                ("text", &format!("answer to {id}")),
            ],
        );
    }
    let answers = wait_messages(&redis, "alice:consult:inbox", 3);
    for (e, id) in answers.iter().zip(asked.iter().rev()) {
        assert_eq!(field(e, "from"), "bob");
        assert_eq!(field(e, "kind"), "answer");
        assert_eq!(field(e, "re"), id);
        assert_eq!(field(e, "text"), format!("answer to {id}"));
    }
    settled(&redis, "bob:consult:outbox");
    let mut admin = redis.admin();
    assert_eq!(
        admin.cmd(&["ZCOUNT", "bridge:consult:open:alice:bob", "0", "+inf"]),
        oxidepm_testkit::Value::Int(0),
        "answered questions are closed"
    );
    for dead in ["alice:consult:outbox:dead", "bob:consult:outbox:dead"] {
        assert_eq!(len(&redis, dead), 0, "{dead}");
    }
}

#[test]
fn alice_cannot_forge_who_asks_or_which_question_it_is() {
    let redis = setup(json!([{"from": "alice", "to": "bob"}]), json!({}));
    let _tb = TestBridge::start(&redis.config_path());
    let id = agent_says(
        &redis,
        "alice",
        "consult",
        &[
            ("from", "carol"),
            ("to", "bob"),
            ("request_id", "1-1"),
            ("kind", "answer"),
            ("source", "webhook"),
            ("text", "hello from carol?"),
        ],
    );
    let got = wait_messages(&redis, "bob:consult:inbox", 1);
    let e = &got[0];
    assert_eq!(field(e, "from"), "alice");
    assert_eq!(field(e, "request_id"), id);
    assert_eq!(field(e, "kind"), "question");
    assert_eq!(field(e, "source"), "consult");
    // Exactly one of each name: nothing of alice's was added beside them.
    let raw = redis
        .admin()
        .cmd(&["XRANGE", "bob:consult:inbox", "-", "+"])
        .strings();
    assert_eq!(raw.iter().filter(|s| *s == "from").count(), 1, "{raw:?}");
    assert!(!raw.iter().any(|s| s == "carol"), "{raw:?}");
}

#[test]
fn what_no_rule_allows_lands_in_the_senders_dead_stream() {
    let redis = setup(json!([{"from": "alice", "to": "bob"}]), json!({}));
    let _tb = TestBridge::start(&redis.config_path());
    // No rule bob → alice, carol → bob; an unknown agent; no `to`; itself.
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("text", "psst")],
    );
    agent_says(&redis, "carol", "consult", &[("to", "bob"), ("text", "hi")]);
    agent_says(&redis, "alice", "consult", &[("to", "zed"), ("text", "hi")]);
    agent_says(&redis, "alice", "consult", &[("text", "anyone?")]);
    agent_says(
        &redis,
        "alice",
        "consult",
        &[("to", "alice"), ("text", "me")],
    );
    let bob_dead = wait_for(&redis, "bob:consult:outbox:dead", 1);
    assert!(
        field(&bob_dead[0], "error").contains("no [[lanes.consult]] rule lets bob consult alice"),
        "{bob_dead:?}"
    );
    assert_eq!(field(&bob_dead[0], "text"), "psst");
    let carol_dead = wait_for(&redis, "carol:consult:outbox:dead", 1);
    assert!(field(&carol_dead[0], "error").contains("carol consult bob"));
    let alice_dead = wait_for(&redis, "alice:consult:outbox:dead", 3);
    let reasons: Vec<&str> = alice_dead.iter().map(|e| field(e, "error")).collect();
    assert!(
        reasons[0].contains("\"zed\" is not an agent"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("no \"to\" field"), "{reasons:?}");
    assert!(reasons[2].contains("cannot consult itself"), "{reasons:?}");
    for outbox in ["alice", "bob", "carol"].map(|a| format!("{a}:consult:outbox")) {
        settled(&redis, &outbox);
    }
    // Nothing is delivered; each sender is told of each refusal, in
    // order, with the reason and the id of its entry.
    for (agent, dead) in [
        ("alice", &alice_dead),
        ("bob", &bob_dead),
        ("carol", &carol_dead),
    ] {
        let inbox = format!("{agent}:consult:inbox");
        assert_eq!(delivered(&redis, &inbox), 0, "{inbox} gets no message");
        let told = refusals(&redis, &inbox, dead.len());
        assert_eq!(told.len(), dead.len(), "{told:?}");
        for (t, d) in told.iter().zip(dead.iter()) {
            assert_eq!(field(t, "re"), field(d, "original_id"));
            assert_eq!(field(t, "error"), field(d, "error"));
            assert_eq!(field(t, "source"), "consult");
        }
    }
}

#[test]
fn bob_answers_only_open_questions_once() {
    let redis = setup(
        json!([{"from": "alice", "to": "bob"}, {"from": "carol", "to": "bob"}]),
        json!({}),
    );
    let tb = TestBridge::start(&redis.config_path());
    // A question alice never asked, a "question" that is carol's.
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("re", "1-0"), ("text", "unasked")],
    );
    let carols = agent_says(
        &redis,
        "carol",
        "consult",
        &[("to", "bob"), ("text", "mine")],
    );
    wait_messages(&redis, "bob:consult:inbox", 1);
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("re", &carols), ("text", "not hers")],
    );
    let dead = wait_for(&redis, "bob:consult:outbox:dead", 2);
    for e in &dead {
        assert!(
            field(e, "error").contains("names no open question of alice to bob"),
            "{e:?}"
        );
    }
    // One answer per question, even across a restart of the bridge: the
    // record of open questions is in Redis.
    let asked = agent_says(
        &redis,
        "alice",
        "consult",
        &[("to", "bob"), ("text", "real")],
    );
    wait_messages(&redis, "bob:consult:inbox", 2);
    drop(tb);
    let _tb = TestBridge::start(&redis.config_path());
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("re", &asked), ("text", "one")],
    );
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("re", &asked), ("text", "two")],
    );
    wait_for(&redis, "bob:consult:outbox:dead", 3);
    settled(&redis, "bob:consult:outbox");
    let got = entries(&mut redis.admin(), "alice:consult:inbox");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(field(&got[0], "text"), "one");
    // Carol's question is still open for bob to answer.
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "carol"), ("re", &carols), ("text", "ok")],
    );
    assert_eq!(
        field(&wait_messages(&redis, "carol:consult:inbox", 1)[0], "re"),
        carols
    );
}

#[test]
fn a_flood_of_questions_waits_at_max_open_and_a_refusal_is_told_to_the_asker() {
    let redis = setup(
        json!([{"from": "alice", "to": "bob"}]),
        json!({"max_open": 2, "max_bytes": 200}),
    );
    let _tb = TestBridge::start(&redis.config_path());
    let asked: Vec<String> = (0..4)
        .map(|i| {
            agent_says(
                &redis,
                "alice",
                "consult",
                &[("to", "bob"), ("text", &format!("q{i}"))],
            )
        })
        .collect();
    let big = agent_says(
        &redis,
        "alice",
        "consult",
        &[("to", "bob"), ("text", &"x".repeat(300))],
    );
    // Two are open; the third waits for an answer (held, in order, with
    // everything behind it), and is not refused.
    let got = wait_messages(&redis, "bob:consult:inbox", 2);
    assert_eq!(field(&got[1], "text"), "q1");
    let mut admin = redis.admin();
    eventually(WAIT, "the third question waiting", || {
        let s = stats(&mut admin);
        (s.get("waited") >= Some(&1)).then_some(())
    });
    assert_eq!(len(&redis, "bob:consult:inbox"), 2);
    assert_eq!(len(&redis, "alice:consult:outbox:dead"), 0);
    assert_eq!(
        admin.cmd(&["ZCOUNT", "bridge:consult:open:alice:bob", "0", "+inf"]),
        oxidepm_testkit::Value::Int(2)
    );
    // Each answer lets one more through.
    for (i, id) in asked.iter().take(2).enumerate() {
        agent_says(
            &redis,
            "bob",
            "consult",
            &[("to", "alice"), ("re", id), ("text", "a")],
        );
        let got = wait_messages(&redis, "bob:consult:inbox", 3 + i);
        assert_eq!(field(&got[2 + i], "text"), format!("q{}", 2 + i));
    }
    // The one too large is refused, in the dead stream and in alice's own
    // inbox, where she can read why.
    let dead = wait_for(&redis, "alice:consult:outbox:dead", 1);
    settled(&redis, "alice:consult:outbox");
    assert!(
        field(&dead[0], "error").contains("max_bytes (200)"),
        "{dead:?}"
    );
    let told: Vec<Entry> = entries(&mut redis.agent("alice"), "alice:consult:inbox")
        .into_iter()
        .filter(|e| field(e, "kind") == "refused")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(field(&told[0], "re"), big);
    assert!(field(&told[0], "error").contains("max_bytes (200)"));
    assert!(!told[0].1.contains_key("text"), "the entry is not copied");
    assert_eq!(len(&redis, "bob:consult:inbox"), 4);
    assert_eq!(
        admin.cmd(&["ZCOUNT", "bridge:consult:open:alice:bob", "0", "+inf"]),
        oxidepm_testkit::Value::Int(2)
    );
    match admin.cmd(&["PTTL", "bridge:consult:open:alice:bob"]) {
        oxidepm_testkit::Value::Int(ms) => assert!(ms > 0, "the record expires: {ms}"),
        other => panic!("PTTL: {other:?}"),
    }
}

#[test]
fn a_rule_removed_by_a_reload_stops_new_questions_and_their_answers() {
    let redis = setup(json!([{"from": "alice", "to": "bob"}]), json!({}));
    let tb = TestBridge::start(&redis.config_path());
    let first = agent_says(
        &redis,
        "alice",
        "consult",
        &[("to", "bob"), ("text", "before")],
    );
    wait_messages(&redis, "bob:consult:inbox", 1);
    write(&redis, json!([]), json!({}));
    tb.bridge.reload().unwrap();
    agent_says(
        &redis,
        "alice",
        "consult",
        &[("to", "bob"), ("text", "after")],
    );
    agent_says(
        &redis,
        "bob",
        "consult",
        &[("to", "alice"), ("re", &first), ("text", "late")],
    );
    let dead = wait_for(&redis, "alice:consult:outbox:dead", 1);
    assert_eq!(field(&dead[0], "text"), "after");
    wait_for(&redis, "bob:consult:outbox:dead", 1);
    assert_eq!(delivered(&redis, "bob:consult:inbox"), 1);
    assert_eq!(delivered(&redis, "alice:consult:inbox"), 0);
    assert_eq!(refusals(&redis, "alice:consult:inbox", 1).len(), 1);
    assert_eq!(refusals(&redis, "bob:consult:inbox", 1).len(), 1);
}

#[test]
fn the_outside_cannot_publish_into_a_consult_inbox() {
    let redis = setup(json!([{"from": "alice", "to": "bob"}]), json!({}));
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": AGENTS,
            "sources": ["webhook", "consult"],
            "consult": {"rules": [{"from": "alice", "to": "bob"}]},
            "default_agent": "bob",
        }),
    );
    let tb = TestBridge::start(&redis.config_path());
    let (st, r) = post(
        tb.addr(),
        "consult",
        json!({"channel": "x", "sender": "alice", "text": "forged"}),
    );
    assert!((400..500).contains(&st), "{st} {r}");
    assert_eq!(len(&redis, "bob:consult:inbox"), 0);
}
