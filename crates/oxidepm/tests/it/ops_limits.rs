//! What one agent can do to the `ops` responder that everyone shares: a
//! poisoned entry, a slow request, a huge log. None of it may stop or
//! delay the others, nor bloat the daemon.

use crate::harness::Env;
use crate::lanes::{conn, host_conn, start_agents};
use crate::ops::ops_answer;
use serde_json::Value;

/// A connection to the lanes' Redis as the daemon's own admin user: what
/// the tests use to set up a state no agent could make on its own.
fn admin(env: &Env) -> redis::Connection {
    host_conn(env, "sys")
}

/// The replies in `agent`'s ops inbox: (request id, response, truncated).
fn replies(c: &mut redis::Connection, agent: &str) -> Vec<(String, Value, Option<String>)> {
    let got: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(format!("{agent}:ops:inbox"))
        .arg("-")
        .arg("+")
        .query(c)
        .unwrap();
    got.ids
        .iter()
        .map(|e| {
            let rid: String = e.get("request_id").unwrap();
            let resp: String = e.get("response").unwrap();
            (
                rid,
                serde_json::from_str(&resp).unwrap(),
                e.get("truncated"),
            )
        })
        .collect()
}

/// Waits for the reply to outbox entry `id` of `agent`.
fn reply_to(env: &Env, c: &mut redis::Connection, agent: &str, id: &str) -> Value {
    env.wait(60, &format!("a reply to {agent}'s {id}"), || {
        replies(c, agent)
            .into_iter()
            .find(|(rid, _, _)| rid == id)
            .map(|(_, r, _)| r)
    })
}

/// Entries of `agent`'s outbox that the responder has read but not acknowledged.
fn pending(c: &mut redis::Connection, agent: &str) -> i64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(format!("{agent}:ops:outbox"))
        .arg("ops")
        .query(c)
        .unwrap();
    match v {
        redis::Value::Array(a) => match a.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => panic!("XPENDING: {a:?}"),
        },
        v => panic!("XPENDING: {v:?}"),
    }
}

#[test]
fn a_poisoned_entry_gets_an_error_and_stops_no_one_even_after_a_restart() {
    let env = Env::new();
    // First a daemon without the responder: the state a daemon that
    // read a poisoned entry and died before answering leaves behind.
    env.daemon_toml("[lanes]\nresponders = []\n");
    start_agents(&env, &["alice", "bob"]);
    let mut sys = admin(&env);
    for agent in ["alice", "bob"] {
        redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(format!("{agent}:ops:outbox"))
            .arg("ops")
            .arg("0")
            .arg("MKSTREAM")
            .query::<()>(&mut sys)
            .unwrap();
    }
    let left: String = redis::cmd("XADD")
        .arg("alice:ops:outbox")
        .arg("*")
        .arg(&b"\xc3("[..])
        .arg(&b"\xff"[..])
        .query(&mut sys)
        .unwrap();
    let queued: String = redis::cmd("XADD")
        .arg("bob:ops:outbox")
        .arg("*")
        .arg("request")
        .arg(r#"{"op":"ping"}"#)
        .query(&mut sys)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("ops")
        .arg("oxidepmd")
        .arg("STREAMS")
        .arg("alice:ops:outbox")
        .arg(">")
        .query(&mut sys)
        .unwrap();
    assert_eq!(pending(&mut sys, "alice"), 1);
    drop(sys);
    env.ok(&["kill"]);

    // The next daemon serves ops; it finds the poisoned entry pending.
    std::fs::remove_file(env.home.join("daemon.toml")).unwrap();
    env.ok(&["ping"]);
    let mut sys = admin(&env);
    let r = reply_to(&env, &mut sys, "alice", &left);
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    assert_eq!(
        pending(&mut sys, "alice"),
        0,
        "the poisoned entry is acknowledged"
    );
    let r = reply_to(&env, &mut sys, "bob", &queued);
    assert_eq!(r["ok"], true, "{r}");

    // Alice writes an entry whose field name is not UTF-8, through her lane.
    env.ok(&["start", "alice"]);
    env.ok(&["start", "bob"]);
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let mut bob = conn(&env.home.join("lanes/bob.sock"));
    let poisoned: String = redis::cmd("XADD")
        .arg("alice:ops:outbox")
        .arg("*")
        .arg(&b"\xff\xfeop"[..])
        .arg("ping")
        .query(&mut alice)
        .unwrap();
    let r = reply_to(&env, &mut sys, "alice", &poisoned);
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    // Her lane and bob's still work.
    let r = ops_answer(&mut alice, "alice", r#"{"op":"whoami"}"#);
    assert_eq!(r["result"]["actor"], "ai:alice", "{r}");
    let r = ops_answer(&mut bob, "bob", r#"{"op":"whoami"}"#);
    assert_eq!(r["result"]["actor"], "ai:bob", "{r}");
    assert_eq!(pending(&mut sys, "alice"), 0);
}

#[test]
fn a_slow_request_of_one_agent_does_not_hold_up_another() {
    let env = Env::new();
    env.daemon_toml("ops_timeout_secs = 3\n[agents.alice]\napps = [\"slow\"]\n");
    // An app that ignores SIGTERM: stopping it waits out its kill timeout.
    let slow = env.script("slow.sh", "trap '' TERM\nwhile :; do sleep 1; done");
    env.ok(&[
        "start",
        "--name",
        "slow",
        "--kill-timeout",
        "15s",
        "--",
        &slow,
    ]);
    start_agents(&env, &["alice", "bob"]);
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let mut bob = conn(&env.home.join("lanes/bob.sock"));
    ops_answer(&mut bob, "bob", r#"{"op":"ping"}"#);
    let before = env.pid("slow");

    let restart: String = redis::cmd("XADD")
        .arg("alice:ops:outbox")
        .arg("*")
        .arg("request")
        .arg(r#"{"op":"restart","target":"slow"}"#)
        .query(&mut alice)
        .unwrap();
    let whoami: String = redis::cmd("XADD")
        .arg("alice:ops:outbox")
        .arg("*")
        .arg("request")
        .arg(r#"{"op":"whoami"}"#)
        .query(&mut alice)
        .unwrap();
    // Wait until the restart is under way (the old process is stopping).
    env.wait(30, "slow to be stopping", || {
        env.app("slow")["status"] == "stopping"
    });
    // Bob is answered while alice's restart is still waiting.
    let r = ops_answer(&mut bob, "bob", r#"{"op":"status"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(env.app("slow")["status"], "stopping");
    assert!(
        !replies(&mut alice, "alice")
            .iter()
            .any(|(id, _, _)| *id == restart),
        "bob was answered only after alice's slow restart"
    );
    // Alice's slow request gets a timeout reply, and her next one is
    // answered in order, after it.
    let r = reply_to(&env, &mut alice, "alice", &restart);
    assert_eq!(r["error"]["code"], "E_TIMEOUT", "{r}");
    let r = reply_to(&env, &mut alice, "alice", &whoami);
    assert_eq!(r["result"]["actor"], "ai:alice", "{r}");
    let order: Vec<String> = replies(&mut alice, "alice")
        .into_iter()
        .map(|(id, _, _)| id)
        .filter(|id| *id == restart || *id == whoami)
        .collect();
    assert_eq!(order, [restart, whoami]);
    // The restart itself still completes.
    env.wait(60, "slow to run again", || {
        let a = env.app("slow");
        a["status"] == "online" && a["pid"].as_u64() != Some(before as u64)
    });
}

#[test]
fn answers_an_agent_never_reads_do_not_pile_up_in_redis() {
    let env = Env::new();
    start_agents(&env, &["alice"]);
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    // 600 requests, and not one answer read.
    let mut last = String::new();
    for _ in 0..600 {
        last = redis::cmd("XADD")
            .arg("alice:ops:outbox")
            .arg("*")
            .arg("request")
            .arg(r#"{"op":"ping"}"#)
            .query(&mut alice)
            .unwrap();
    }
    let mut admin = admin(&env);
    reply_to(&env, &mut admin, "alice", &last);
    let len: u64 = redis::cmd("XLEN")
        .arg("alice:ops:inbox")
        .query(&mut admin)
        .unwrap();
    // MAXLEN ~ 100 trims whole nodes: a little over 100 may stay, never 600.
    assert!(len <= 300, "{len} answers kept");
}
