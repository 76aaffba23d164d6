//! Responders as apps (`kind = "responder"`): what an agent asks reaches
//! the responder by key, and its answer reaches only the agent that asked;
//! a responder reaches nothing else. (Its lane's life: `responder_lanes`.)
//! Real daemon, redis-server, lane proxy and uids (made with useradd when
//! run as root); the attacks are what a responder or an agent would send.

use crate::harness::{strs, test_user, Env};
use crate::lanes::{conn, host_conn, run};
use oxidepm_testkit::words;

/// Starts app `name` of `kind` running `sleep`, as `user` when the tests
/// run as root.
pub(crate) fn start(env: &Env, kind: &str, name: &str, user: &str) {
    let mut args = vec!["start", "--kind", kind, "--name", name];
    if test_user(user).is_some() {
        args.extend(["--user", user]);
    }
    args.extend(["--", "sleep", "100000"]);
    env.ok(&args);
}

/// A connection through lane socket `name` (an agent's or a responder's).
pub(crate) fn lane(env: &Env, name: &str) -> redis::Connection {
    conn(&env.home.join(format!("lanes/{name}.sock")))
}

/// The ids of a stream's entries, as the admin user sees them.
pub(crate) fn ids(env: &Env, key: &str) -> Vec<String> {
    let mut sys = host_conn(env, "sys");
    let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut sys)
        .unwrap();
    r.ids.into_iter().map(|e| e.id).collect()
}

pub(crate) fn text(v: &redis::Value) -> String {
    format!("{v:?}")
}

/// Alice, bob and the responder `echo`, with a request of alice's read by
/// the responder: the responder's connection and the request's id.
fn alice_asks(env: &Env) -> (redis::Connection, String) {
    start(env, "agent", "alice", "oxpm-alice");
    start(env, "agent", "bob", "oxpm-bob");
    start(env, "responder", "echo", "oxpm-echo");
    let mut alice = lane(env, "alice");
    let id: String = redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg("hi")
        .query(&mut alice)
        .unwrap();
    let mut resp = lane(env, "echo");
    let got = run(
        &mut resp,
        &strs(&words(
            "XREADGROUP GROUP echo r1 STREAMS alice:echo:outbox bob:echo:outbox > >",
        )),
    )
    .unwrap();
    assert!(text(&got).contains(&id), "the responder read {got:?}");
    (resp, id)
}

#[test]
fn only_the_agent_that_asked_gets_the_answer() {
    let env = Env::new();
    let (mut resp, id) = alice_asks(&env);
    // Answering bob for alice's request is refused, and bob's inbox stays
    // empty.
    for forged in [
        vec![
            "XADD",
            "bob:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "request_id",
            &id,
            "text",
            "for bob",
        ],
        vec![
            "XADD",
            "bob:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "re",
            &id,
            "text",
            "for bob",
        ],
        vec![
            "XADD",
            "bob:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "text",
            "no id",
        ],
    ] {
        let e = run(&mut resp, &forged).unwrap_err();
        assert!(e.starts_with("NOPERM"), "{forged:?}: {e}");
        assert!(
            e.contains("bob"),
            "the refusal names whose request is missing: {e}"
        );
    }
    assert!(ids(&env, "bob:echo:inbox").is_empty());
    // Inside a transaction the forged reply aborts it: nothing of it runs.
    run(&mut resp, &["MULTI"]).unwrap();
    run(&mut resp, &["XACK", "alice:echo:outbox", "echo", "0-1"]).unwrap();
    assert!(run(
        &mut resp,
        &strs(&words("XADD bob:echo:inbox MAXLEN ~ 100 * text x"))
    )
    .is_err());
    let e = run(&mut resp, &["EXEC"]).unwrap_err();
    assert!(e.starts_with("EXECABORT"), "{e}");
    assert!(ids(&env, "bob:echo:inbox").is_empty());
    // A request id that is not alice's pending request is refused too.
    let e = run(
        &mut resp,
        &strs(&words(
            "XADD alice:echo:inbox MAXLEN ~ 100 * request_id 1-1 text x",
        )),
    )
    .unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
    // A reply that does not cap the inbox is refused, even to alice.
    let e = run(
        &mut resp,
        &strs(&words(&format!(
            "XADD alice:echo:inbox * request_id {id} text x"
        ))),
    )
    .unwrap_err();
    assert!(e.starts_with("OXIDEPM") && e.contains("MAXLEN"), "{e}");
    // The answer to alice passes.
    run(
        &mut resp,
        &strs(&words(&format!(
            "XADD alice:echo:inbox MAXLEN ~ 100 * request_id {id} text hello"
        ))),
    )
    .unwrap();
    // Bob cannot read it through his lane.
    let mut bob = lane(&env, "bob");
    for read in [
        words("XREAD STREAMS alice:echo:inbox 0"),
        words("XRANGE alice:echo:inbox - +"),
        words("XREADGROUP GROUP alice b STREAMS alice:echo:inbox >"),
    ] {
        let e = run(&mut bob, &strs(&read)).unwrap_err();
        assert!(e.starts_with("NOPERM"), "{read:?}: {e}");
    }
    // Alice gets it, with the id of her request.
    let mut alice = lane(&env, "alice");
    let got = run(
        &mut alice,
        &strs(&words(
            "XREADGROUP GROUP alice a STREAMS alice:echo:inbox >",
        )),
    )
    .unwrap();
    assert!(
        text(&got).contains("hello") && text(&got).contains(&id),
        "{got:?}"
    );
    // Once acknowledged, the request has no more answers.
    run(&mut resp, &["XACK", "alice:echo:outbox", "echo", &id]).unwrap();
    for late in [
        words(&format!(
            "XADD alice:echo:inbox MAXLEN ~ 100 * request_id {id} text again"
        )),
        words("XADD alice:echo:inbox MAXLEN ~ 100 * text again"),
    ] {
        let e = run(&mut resp, &strs(&late)).unwrap_err();
        assert!(e.starts_with("NOPERM"), "{late:?}: {e}");
    }
    assert_eq!(ids(&env, "alice:echo:inbox").len(), 1);
}

#[test]
fn a_responder_reaches_nothing_but_its_own_requests_and_replies() {
    let env = Env::new();
    let (mut resp, id) = alice_asks(&env);
    start(&env, "responder", "other", "oxpm-echo");
    let mut alice = lane(&env, "alice");
    run(
        &mut alice,
        &["XADD", "alice:other:outbox", "*", "text", "for other"],
    )
    .unwrap();
    run(
        &mut alice,
        &["XADD", "alice:ops:outbox", "*", "op", "status"],
    )
    .ok();
    // What client libraries send at connect works, as resp_echo.
    for hello in [
        &["PING"][..],
        &["HELLO", "2"],
        &["INFO", "server"],
        &["COMMAND", "COUNT"],
    ] {
        run(&mut resp, hello).unwrap_or_else(|e| panic!("{hello:?}: {e}"));
    }
    let me = run(&mut resp, &["ACL", "WHOAMI"]).unwrap();
    assert!(text(&me).contains("resp_echo"), "{me:?}");
    let before_outbox = ids(&env, "alice:echo:outbox");
    for attack in [
        // Forging a request of alice's, or removing one.
        words("XADD alice:echo:outbox * text forged"),
        words(&format!("XDEL alice:echo:outbox {id}")),
        words("XTRIM alice:echo:outbox MAXLEN 0"),
        words("DEL alice:echo:outbox"),
        words("XGROUP DESTROY alice:echo:outbox echo"),
        // Reading an inbox.
        words("XRANGE alice:echo:inbox - +"),
        words("XREAD STREAMS alice:echo:inbox 0"),
        words("XREAD STREAMS alice:webhook:inbox 0"),
        // Another responder's keys, and ops's.
        words("XREADGROUP GROUP other r STREAMS alice:other:outbox >"),
        words("XREADGROUP GROUP echo r STREAMS alice:other:outbox >"),
        words("XRANGE alice:other:outbox - +"),
        words("XADD alice:other:inbox * text x"),
        words("XADD alice:ops:inbox * text x"),
        words("XACK alice:ops:outbox ops 0-1"),
        // Making keys nobody drains, or blocking an inbox with a huge id.
        words("XGROUP CREATE zed:echo:outbox echo 0 MKSTREAM"),
        words(&format!(
            "XADD alice:echo:inbox 18446744073709551615-1 request_id {id} t x"
        )),
        words("KEYS *"),
        words("SCAN 0"),
        words("AUTH resp_echo x"),
    ] {
        assert!(run(&mut resp, &strs(&attack)).is_err(), "{attack:?} passed");
    }
    assert_eq!(ids(&env, "alice:echo:outbox"), before_outbox);
    assert!(ids(&env, "alice:echo:inbox").is_empty());
    assert!(ids(&env, "alice:other:inbox").is_empty());
    // The ACL alone says the same to resp_echo on Redis itself.
    let mut direct = host_conn(&env, "resp_echo");
    for attack in [
        &["XADD", "alice:echo:outbox", "*", "text", "forged"][..],
        &["XRANGE", "alice:echo:inbox", "-", "+"],
        &["XRANGE", "alice:other:outbox", "-", "+"],
        &["XADD", "alice:other:inbox", "*", "t", "x"],
    ] {
        let e = run(&mut direct, attack).unwrap_err();
        assert!(e.starts_with("NOPERM"), "{attack:?}: {e}");
    }
    assert_eq!(ids(&env, "alice:echo:outbox"), before_outbox);
}

#[test]
fn a_pending_request_can_still_be_answered_after_the_proxy_restarts() {
    let env = Env::new();
    let (resp, id) = alice_asks(&env);
    drop(resp);
    // The proxy holds nothing about requests: Redis's pending list does.
    let proxy = env.daemon_app("oxidepm-lanes")["pid"].as_u64().unwrap() as u32;
    crate::harness::kill(proxy, libc::SIGKILL);
    env.wait(20, "the proxy restarted", || {
        let app = env.daemon_app("oxidepm-lanes");
        app["status"] == "online" && app["pid"].as_u64() != Some(proxy as u64)
    });
    let mut resp = env.wait(20, "the responder's lane again", || {
        std::os::unix::net::UnixStream::connect(env.home.join("lanes/echo.sock"))
            .ok()
            .map(|_| lane(&env, "echo"))
    });
    let e = run(
        &mut resp,
        &strs(&words(&format!(
            "XADD bob:echo:inbox MAXLEN ~ 100 * request_id {id} text x"
        ))),
    )
    .unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
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
            "late but right",
        ],
    )
    .unwrap();
    assert_eq!(ids(&env, "alice:echo:inbox").len(), 1);
    assert!(ids(&env, "bob:echo:inbox").is_empty());
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
        &strs(&words(
            "XREADGROUP GROUP echo r1 STREAMS alice:echo:outbox >",
        )),
    )
    .unwrap();
    let big = "x".repeat(1000 << 10);
    for (field, value) in [("text", big.as_str()), (big.as_str(), "x")] {
        let e = run(
            &mut resp,
            &strs(&words(&format!(
                "XADD alice:echo:inbox MAXLEN ~ 1000 * request_id {id} {field} {value}"
            ))),
        )
        .unwrap_err();
        assert!(e.contains("responder_reply_max_bytes"), "{e}");
    }
    assert!(ids(&env, "alice:echo:inbox").is_empty());
    let small = "y".repeat(1 << 10);
    run(
        &mut resp,
        &strs(&words(&format!(
            "XADD alice:echo:inbox MAXLEN ~ 1000 * request_id {id} text {small}"
        ))),
    )
    .unwrap();
    assert_eq!(ids(&env, "alice:echo:inbox").len(), 1);
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
        &strs(&words(
            "XREADGROUP GROUP echo r1 STREAMS alice:echo:outbox >",
        )),
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
