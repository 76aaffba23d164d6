//! Review of responders as apps and agents consulting each other, as an
//! attacker: each test is what an agent or a responder sends to get past a
//! rule or a bound, and asserts what the others see (their streams).

use crate::harness::{test_user, Env};
use crate::lanes::{host_conn, run, start_agents};
use crate::responders::{ids, lane, start};
use std::collections::HashMap;

type Fields = HashMap<String, String>;

fn fields(e: &redis::streams::StreamId) -> Fields {
    e.map
        .iter()
        .map(|(k, v)| (k.clone(), redis::from_redis_value(v).unwrap_or_default()))
        .collect()
}

/// A stream as the daemon's admin user reads it.
fn range(env: &Env, key: &str) -> Vec<Fields> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut host_conn(env, "sys"))
        .unwrap();
    reply.ids.iter().map(fields).collect()
}

/// Alice puts a question to bob with the router's own fields again in
/// other cases (`From carol`, `KIND answer`, `Request_Id`, `TO carol`):
/// bob's entry names alice, once, whatever case a reader folds to.
#[test]
fn a_consult_question_cannot_carry_the_routers_fields_in_another_case() {
    let env = Env::new();
    env.daemon_toml(
        "agents_share_uid = true\n[lanes]\nappendfsync = \"everysec\"\n\
         [[lanes.consult]]\nfrom = \"alice\"\nto = \"bob\"\n",
    );
    start_agents(&env, &["alice", "bob", "carol"]);
    let mut alice = lane(&env, "alice");
    let id: String = redis::cmd("XADD")
        .arg("alice:consult:outbox")
        .arg("*")
        .arg("to")
        .arg("bob")
        .arg("text")
        .arg("q")
        .arg("From")
        .arg("carol")
        .arg("KIND")
        .arg("answer")
        .arg("Request_Id")
        .arg("1-1")
        .arg("TO")
        .arg("carol")
        .arg("Received_At")
        .arg("yesterday")
        .arg("topic")
        .arg("dns")
        .query(&mut alice)
        .unwrap();
    let got = env.wait(30, "alice's question in bob's inbox", || {
        let r = range(&env, "bob:consult:inbox");
        (!r.is_empty()).then_some(r)
    });
    let e = &got[0];
    assert_eq!(e["from"], "alice", "{e:?}");
    assert_eq!(e["kind"], "question", "{e:?}");
    assert_eq!(e["request_id"], id, "{e:?}");
    assert_eq!(e["topic"], "dns", "the sender's own fields pass: {e:?}");
    for own in ["from", "to", "kind", "request_id", "received_at", "re"] {
        let named: Vec<&String> = e.keys().filter(|k| k.eq_ignore_ascii_case(own)).collect();
        assert!(named.len() <= 1, "{own} given more than once: {e:?}");
    }
    assert!(!e.values().any(|v| v == "carol"), "{e:?}");
}

/// A responder holding alice's request pending replies with a whole
/// command's worth of bytes: refused, alice's inbox stays empty; a reply
/// within `lanes.responder_reply_max_bytes` passes.
#[test]
fn a_responder_cannot_fill_an_agents_inbox_with_huge_replies() {
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let mut alice = lane(&env, "alice");
    let id: String = redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg("hi")
        .query(&mut alice)
        .unwrap();
    let mut resp = lane(&env, "echo");
    run(
        &mut resp,
        &[
            "XREADGROUP",
            "GROUP",
            "echo",
            "r1",
            "STREAMS",
            "alice:echo:outbox",
            ">",
        ],
    )
    .unwrap();
    let big = "x".repeat(1000 << 10);
    for (field, value) in [("text", big.as_str()), (big.as_str(), "x")] {
        let e = run(
            &mut resp,
            &[
                "XADD",
                "alice:echo:inbox",
                "MAXLEN",
                "~",
                "1000",
                "*",
                "request_id",
                &id,
                field,
                value,
            ],
        )
        .unwrap_err();
        assert!(e.contains("responder_reply_max_bytes"), "{e}");
    }
    assert!(ids(&env, "alice:echo:inbox").is_empty());
    let small = "y".repeat(1 << 10);
    run(
        &mut resp,
        &[
            "XADD",
            "alice:echo:inbox",
            "MAXLEN",
            "~",
            "1000",
            "*",
            "request_id",
            &id,
            "text",
            &small,
        ],
    )
    .unwrap();
    assert_eq!(ids(&env, "alice:echo:inbox").len(), 1);
}

/// With the lanes off, a responder app named like an agent or a source is
/// defined all the same, and takes over that name's socket or outboxes
/// once the lanes are turned on: refused as it is with the lanes on.
#[test]
fn a_responder_named_like_an_agent_or_a_source_is_refused_with_the_lanes_off() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[lanes]\nbackend = \"off\"\n");
    env.ok(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    for name in ["alice", "webhook", "consult", "ops"] {
        let e = env.fails(&[
            "start",
            "--kind",
            "responder",
            "--name",
            name,
            "--",
            "sleep",
            "100000",
        ]);
        assert!(e.contains(name), "{name}: {e}");
        let kinds: Vec<String> = env
            .status()
            .iter()
            .filter(|a| a["name"] == name)
            .map(|a| a["kind"].to_string())
            .collect();
        assert!(
            kinds.iter().all(|k| k.contains("agent")),
            "{name}: {kinds:?}"
        );
    }
    // A plain app updated into a responder of a source's name: refused too.
    env.ok(&["start", "--name", "discord", "--", "sleep", "100000"]);
    env.fails(&[
        "start",
        "--update",
        "--kind",
        "responder",
        "--name",
        "discord",
        "--",
        "sleep",
        "100000",
    ]);
    assert_ne!(env.app("discord")["kind"], "responder");
    env.ok(&[
        "start",
        "--kind",
        "responder",
        "--name",
        "echo",
        "--",
        "sleep",
        "100000",
    ]);
}

/// A responder queues its reply to alice's request in MULTI, while the
/// request is pending, and holds the EXEC; alice is deleted and made anew.
/// At EXEC the reply answers nothing of the new alice's: the transaction
/// aborts and her inbox stays empty.
#[test]
fn a_reply_queued_in_multi_is_checked_again_when_it_runs() {
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let mut alice = lane(&env, "alice");
    let id: String = redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg("secret of the old alice")
        .query(&mut alice)
        .unwrap();
    drop(alice);
    let mut resp = lane(&env, "echo");
    run(
        &mut resp,
        &[
            "XREADGROUP",
            "GROUP",
            "echo",
            "r1",
            "STREAMS",
            "alice:echo:outbox",
            ">",
        ],
    )
    .unwrap();
    run(&mut resp, &["MULTI"]).unwrap();
    run(
        &mut resp,
        &[
            "XADD",
            "alice:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "request_id",
            &id,
            "text",
            "answer for the old alice",
        ],
    )
    .unwrap();
    env.ok(&["delete", "alice"]);
    start(&env, "agent", "alice", "oxpm-alice");
    let e = run(&mut resp, &["EXEC"]).unwrap_err();
    assert!(e.starts_with("EXECABORT"), "{e}");
    assert!(ids(&env, "alice:echo:inbox").is_empty());
}

/// Alice asks the example echo responder with a text too large to echo
/// back (past `lanes.responder_reply_max_bytes`), then with bytes that are
/// not UTF-8; bob asks next and is
/// answered: one agent's request does not stop the responder (a refused
/// reply that raised would crash it, and at each restart it would read
/// alice's request again first).
#[test]
fn one_agents_large_request_does_not_stop_the_example_responder() {
    let has_redis_py = std::process::Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_redis_py {
        eprintln!("skipped: python3 with redis-py is not installed (test.sh installs it)");
        return;
    }
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "agent", "bob", "oxpm-bob");
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/responders/echo.toml")
        .canonicalize()
        .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    let mut alice = lane(&env, "alice");
    let big = "a".repeat(200 << 10);
    redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg(&big)
        .query::<String>(&mut alice)
        .unwrap();
    // And bytes that are not UTF-8, which a client decoding strictly
    // raises on while reading, before any reply.
    redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg(&b"\xff\xfe not utf-8"[..])
        .query::<String>(&mut alice)
        .unwrap();
    let mut bob = lane(&env, "bob");
    let id: String = redis::cmd("XADD")
        .arg("bob:echo:outbox")
        .arg("*")
        .arg("text")
        .arg("ping from bob")
        .query(&mut bob)
        .unwrap();
    env.wait(30, "echo's answer to bob", || {
        ids(&env, "bob:echo:inbox").len() == 1
    });
    let got = range(&env, "bob:echo:inbox");
    assert_eq!(got[0]["request_id"], id, "{got:?}");
    assert_eq!(got[0]["text"], "ping from bob");
    // Alice's requests are acknowledged, not read again at every restart.
    let mut sys = host_conn(&env, "sys");
    env.wait(10, "alice's request acknowledged", || {
        let p = run(&mut sys, &["XPENDING", "alice:echo:outbox", "echo"]).unwrap();
        matches!(p, redis::Value::Array(ref v) if v.first() == Some(&redis::Value::Int(0)))
    });
}

/// A responder given an agent's user (or an agent given a responder's):
/// the responder's lane socket is that uid's, so the agent could connect
/// to it and read and answer every agent's requests. Refused both ways;
/// nothing is defined.
#[test]
fn a_responder_and_an_agent_of_one_uid_are_refused() {
    if test_user("oxpm-alice").is_none() || test_user("oxpm-echo").is_none() {
        eprintln!("skipped: needs root to make the users oxpm-alice and oxpm-echo");
        return;
    }
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    let e = env.fails(&[
        "start",
        "--kind",
        "responder",
        "--name",
        "echo",
        "--user",
        "oxpm-alice",
        "--",
        "sleep",
        "100000",
    ]);
    assert!(e.contains("uid"), "{e}");
    assert!(!env.home.join("lanes/echo.sock").exists());
    assert!(env.status().iter().all(|a| a["name"] != "echo"));
    start(&env, "responder", "echo", "oxpm-echo");
    let e = env.fails(&[
        "start",
        "--kind",
        "agent",
        "--name",
        "mallory",
        "--user",
        "oxpm-echo",
        "--",
        "sleep",
        "100000",
    ]);
    assert!(e.contains("uid"), "{e}");
    assert!(env.status().iter().all(|a| a["name"] != "mallory"));
    // An update into the agent's user, too.
    let e = env.fails(&[
        "start",
        "--update",
        "--kind",
        "responder",
        "--name",
        "echo",
        "--user",
        "oxpm-alice",
        "--",
        "sleep",
        "100000",
    ]);
    assert!(e.contains("uid"), "{e}");
}

/// `resurrect` defines again what a snapshot holds: a responder saved
/// with its user comes back beside an agent given that user since (which
/// `define` refuses), and would share its uid. Refused as `define` refuses
/// it; the responder stays gone.
#[test]
fn a_resurrected_responder_is_checked_as_a_defined_one() {
    if test_user("oxpm-alice").is_none() || test_user("oxpm-echo").is_none() {
        eprintln!("skipped: needs root to make the users oxpm-alice and oxpm-echo");
        return;
    }
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    env.ok(&["save"]);
    env.ok(&["delete", "echo"]);
    env.ok(&[
        "start",
        "--kind",
        "agent",
        "--name",
        "mallory",
        "--user",
        "oxpm-echo",
        "--",
        "sleep",
        "100000",
    ]);
    let e = env.fails(&["resurrect"]);
    assert!(e.contains("uid"), "{e}");
    assert!(env.status().iter().all(|a| a["name"] != "echo"));
    assert!(!env.home.join("lanes/echo.sock").exists());
}
