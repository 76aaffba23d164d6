//! Responders as apps (`kind = "responder"`): what an agent asks reaches
//! the responder by key, and its answer reaches only the agent that asked.
//! Real daemon, redis-server, lane proxy and uids (made with useradd when
//! run as root); the attacks are what a responder or an agent would send.

use crate::harness::{read, test_user, Env};
use crate::lanes::{conn, host_conn, run};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Starts app `name` of `kind` running `sleep`, as `user` when the tests
/// run as root.
fn start(env: &Env, kind: &str, name: &str, user: &str) {
    let mut args = vec!["start", "--kind", kind, "--name", name];
    if test_user(user).is_some() {
        args.extend(["--user", user]);
    }
    args.extend(["--", "sleep", "100000"]);
    env.ok(&args);
}

/// A connection through lane socket `name` (an agent's or a responder's).
fn lane(env: &Env, name: &str) -> redis::Connection {
    conn(&env.home.join(format!("lanes/{name}.sock")))
}

/// The ids of a stream's entries, as the admin user sees them.
fn ids(env: &Env, key: &str) -> Vec<String> {
    let mut sys = host_conn(env, "sys");
    let r: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut sys)
        .unwrap();
    r.ids.into_iter().map(|e| e.id).collect()
}

fn text(v: &redis::Value) -> String {
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
        &[
            "XREADGROUP",
            "GROUP",
            "echo",
            "r1",
            "STREAMS",
            "alice:echo:outbox",
            "bob:echo:outbox",
            ">",
            ">",
        ],
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
        &[
            "XADD",
            "bob:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "text",
            "x"
        ]
    )
    .is_err());
    let e = run(&mut resp, &["EXEC"]).unwrap_err();
    assert!(e.starts_with("EXECABORT"), "{e}");
    assert!(ids(&env, "bob:echo:inbox").is_empty());
    // A request id that is not alice's pending request is refused too.
    let e = run(
        &mut resp,
        &[
            "XADD",
            "alice:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "request_id",
            "1-1",
            "text",
            "x",
        ],
    )
    .unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
    // A reply that does not cap the inbox is refused, even to alice.
    let e = run(
        &mut resp,
        &[
            "XADD",
            "alice:echo:inbox",
            "*",
            "request_id",
            &id,
            "text",
            "x",
        ],
    )
    .unwrap_err();
    assert!(e.starts_with("OXIDEPM") && e.contains("MAXLEN"), "{e}");
    // The answer to alice passes.
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
            "hello",
        ],
    )
    .unwrap();
    // Bob cannot read it through his lane.
    let mut bob = lane(&env, "bob");
    for read in [
        &["XREAD", "STREAMS", "alice:echo:inbox", "0"][..],
        &["XRANGE", "alice:echo:inbox", "-", "+"],
        &[
            "XREADGROUP",
            "GROUP",
            "alice",
            "b",
            "STREAMS",
            "alice:echo:inbox",
            ">",
        ],
    ] {
        let e = run(&mut bob, read).unwrap_err();
        assert!(e.starts_with("NOPERM"), "{read:?}: {e}");
    }
    // Alice gets it, with the id of her request.
    let mut alice = lane(&env, "alice");
    let got = run(
        &mut alice,
        &[
            "XREADGROUP",
            "GROUP",
            "alice",
            "a",
            "STREAMS",
            "alice:echo:inbox",
            ">",
        ],
    )
    .unwrap();
    assert!(
        text(&got).contains("hello") && text(&got).contains(&id),
        "{got:?}"
    );
    // Once acknowledged, the request has no more answers.
    run(&mut resp, &["XACK", "alice:echo:outbox", "echo", &id]).unwrap();
    for late in [
        vec![
            "XADD",
            "alice:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "request_id",
            &id,
            "text",
            "again",
        ],
        vec![
            "XADD",
            "alice:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "text",
            "again",
        ],
    ] {
        let e = run(&mut resp, &late).unwrap_err();
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
        &["XADD", "alice:echo:outbox", "*", "text", "forged"][..],
        &["XDEL", "alice:echo:outbox", &id],
        &["XTRIM", "alice:echo:outbox", "MAXLEN", "0"],
        &["DEL", "alice:echo:outbox"],
        &["XGROUP", "DESTROY", "alice:echo:outbox", "echo"],
        // Reading an inbox.
        &["XRANGE", "alice:echo:inbox", "-", "+"],
        &["XREAD", "STREAMS", "alice:echo:inbox", "0"],
        &["XREAD", "STREAMS", "alice:webhook:inbox", "0"],
        // Another responder's keys, and ops's.
        &[
            "XREADGROUP",
            "GROUP",
            "other",
            "r",
            "STREAMS",
            "alice:other:outbox",
            ">",
        ],
        &[
            "XREADGROUP",
            "GROUP",
            "echo",
            "r",
            "STREAMS",
            "alice:other:outbox",
            ">",
        ],
        &["XRANGE", "alice:other:outbox", "-", "+"],
        &["XADD", "alice:other:inbox", "*", "text", "x"],
        &["XADD", "alice:ops:inbox", "*", "text", "x"],
        &["XACK", "alice:ops:outbox", "ops", "0-1"],
        // Making keys nobody drains, or blocking an inbox with a huge id.
        &[
            "XGROUP",
            "CREATE",
            "zed:echo:outbox",
            "echo",
            "0",
            "MKSTREAM",
        ],
        &[
            "XADD",
            "alice:echo:inbox",
            "18446744073709551615-1",
            "request_id",
            &id,
            "t",
            "x",
        ],
        &["KEYS", "*"],
        &["SCAN", "0"],
        &["AUTH", "resp_echo", "x"],
    ] {
        assert!(run(&mut resp, attack).is_err(), "{attack:?} passed");
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
fn a_responder_app_has_its_lane_and_loses_it_when_deleted() {
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let sock = env.home.join("lanes/echo.sock");
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    if let Some((uid, _)) = test_user("oxpm-echo") {
        assert_eq!(meta.uid(), uid, "the socket is the responder's");
    }
    // Its environment names its lane.
    let pid = env.pid("echo");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ).replace('\0', "\n");
    assert!(environ.contains("OXIDEPM_RESPONDER=echo\n"), "{environ}");
    assert!(
        environ.contains(&format!("OXIDEPM_LANE=unix://{}\n", sock.display())),
        "{environ}"
    );
    assert!(
        environ.contains(&format!("OXIDEPM_LANE_SOCKET={}\n", sock.display())),
        "{environ}"
    );
    let file = env.home.join("lanes/echo.json");
    assert!(read(&file).contains("alice:echo:outbox"), "{}", read(&file));
    // An agent defined later has the family too, and is in the file.
    start(&env, "agent", "bob", "oxpm-bob");
    let bob = std::fs::read(format!("/proc/{}/environ", env.pid("bob"))).unwrap();
    assert!(
        String::from_utf8_lossy(&bob).contains("bob:echo:outbox"),
        "bob's OXIDEPM_OUTBOXES names his echo outbox"
    );
    assert!(read(&file).contains("bob:echo:outbox"), "{}", read(&file));
    // An agent started now has its outbox; alice's, made before, takes XADD.
    let mut alice = lane(&env, "alice");
    run(
        &mut alice,
        &["XADD", "alice:echo:outbox", "*", "text", "hi"],
    )
    .unwrap();
    let mut sys = host_conn(&env, "sys");
    let users = |sys: &mut redis::Connection| text(&run(sys, &["ACL", "USERS"]).unwrap());
    assert!(users(&mut sys).contains("resp_echo"));
    env.ok(&["delete", "echo"]);
    assert!(
        !users(&mut sys).contains("resp_echo"),
        "its ACL user is gone"
    );
    assert!(!sock.exists(), "its socket is gone");
    assert!(!env.home.join("secrets/resp_echo").exists());
    let keys = run(&mut sys, &["KEYS", "*:echo:*"]).unwrap();
    assert_eq!(keys, redis::Value::Array(vec![]), "its keys are gone");
    // Alice may no longer append to a family nobody drains.
    let e = run(
        &mut alice,
        &["XADD", "alice:echo:outbox", "*", "text", "hi"],
    )
    .unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
}

#[test]
fn a_responder_cannot_take_the_name_of_an_agent_a_source_or_ops() {
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    let alice_pid = env.pid("alice");
    let mut sys = host_conn(&env, "sys");
    let users_before = text(&run(&mut sys, &["ACL", "USERS"]).unwrap());
    for name in [
        "alice", "webhook", "email", "discord", "consult", "ops", "bridge", "Bad*",
    ] {
        let e = env.fails(&[
            "start",
            "--kind",
            "responder",
            "--name",
            name,
            "--",
            "sleep",
            "100",
        ]);
        assert!(
            e.contains("responder") || e.contains("reserved") || e.contains("not allowed"),
            "{name}: {e}"
        );
        assert!(
            e.contains("choose another") || e.contains("name"),
            "{name}: {e}"
        );
    }
    let apps: Vec<_> = env
        .status()
        .into_iter()
        .filter(|a| a["kind"] != "system")
        .collect();
    assert_eq!(apps.len(), 1, "nothing was defined: {apps:?}");
    assert_eq!(apps[0]["name"], "alice");
    assert_eq!(env.pid("alice"), alice_pid);
    assert_eq!(
        text(&run(&mut sys, &["ACL", "USERS"]).unwrap()),
        users_before
    );
    // Nor can an agent take a responder's.
    start(&env, "responder", "echo", "oxpm-echo");
    let e = env.fails(&[
        "start", "--kind", "agent", "--name", "echo", "--", "sleep", "100",
    ]);
    assert!(e.contains("reserved"), "{e}");
}

#[test]
fn the_python_echo_responder_answers_the_agent_that_asked() {
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
    // The example's app file, as the README has it (as the daemon's own
    // user: the script must be readable by it).
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/responders/echo.toml")
        .canonicalize()
        .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    let mut alice = lane(&env, "alice");
    let id: String = redis::cmd("XADD")
        .arg("alice:echo:outbox")
        .arg("*")
        .arg("text")
        .arg("ping from alice")
        .query(&mut alice)
        .unwrap();
    let got = env.wait(20, "echo's answer", || {
        let r = run(
            &mut alice,
            &[
                "XREADGROUP",
                "GROUP",
                "alice",
                "a",
                "STREAMS",
                "alice:echo:inbox",
                ">",
            ],
        )
        .unwrap();
        let t = text(&r);
        t.contains("ping from alice").then_some(t)
    });
    assert!(got.contains(&id), "the answer names the request: {got}");
    assert!(ids(&env, "bob:echo:inbox").is_empty(), "bob got nothing");
    // Acknowledged once answered.
    let mut sys = host_conn(&env, "sys");
    env.wait(10, "the request acknowledged", || {
        let p = run(&mut sys, &["XPENDING", "alice:echo:outbox", "echo"]).unwrap();
        matches!(p, redis::Value::Array(ref v) if v.first() == Some(&redis::Value::Int(0)))
    });
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
        &[
            "XADD",
            "bob:echo:inbox",
            "MAXLEN",
            "~",
            "100",
            "*",
            "request_id",
            &id,
            "text",
            "x",
        ],
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

#[test]
fn a_responder_s_consumer_names_are_bounded() {
    let env = Env::new();
    env.daemon_toml("[lanes.limits]\nmax_consumers = 2\n");
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let mut resp = lane(&env, "echo");
    let read = |resp: &mut redis::Connection, c: &str| {
        run(
            resp,
            &[
                "XREADGROUP",
                "GROUP",
                "echo",
                c,
                "STREAMS",
                "alice:echo:outbox",
                ">",
            ],
        )
    };
    for c in ["c1", "c2", "c1"] {
        read(&mut resp, c).unwrap();
    }
    let e = read(&mut resp, "c3").unwrap_err();
    assert!(e.starts_with("OXIDEPM consumers"), "{e}");
    let mut sys = host_conn(&env, "sys");
    let consumers = run(
        &mut sys,
        &["XINFO", "CONSUMERS", "alice:echo:outbox", "echo"],
    )
    .unwrap();
    let n = consumers.as_sequence().map_or(0, |v| v.len());
    assert!(n <= 2, "Redis holds no third name: {consumers:?}");
}

#[test]
fn a_responder_updated_into_a_plain_app_loses_its_lane() {
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let sock = env.home.join("lanes/echo.sock");
    assert!(sock.exists());
    env.ok(&[
        "start", "--update", "--kind", "app", "--name", "echo", "--", "sleep", "100000",
    ]);
    assert!(!sock.exists(), "its socket is gone");
    let mut sys = host_conn(&env, "sys");
    let users = text(&run(&mut sys, &["ACL", "USERS"]).unwrap());
    assert!(!users.contains("resp_echo"), "{users}");
    let mut alice = lane(&env, "alice");
    let e = run(&mut alice, &["XADD", "alice:echo:outbox", "*", "t", "x"]).unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
}
