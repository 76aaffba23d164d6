//! A responder app's lane over its life: defined (its socket, user,
//! environment and file), bounded, updated, deleted, refused a name; and
//! the Python example answering through it. Real daemon, redis-server,
//! lane proxy and uids (made with useradd when run as root).

use crate::consult::range;
use crate::harness::{read, strs, test_user, Env};
use crate::lanes::{host_conn, run};
use crate::responders::{ids, lane, start, text};
use oxidepm_testkit::words;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
    // `lanes` shows it with its user, its socket and alice's request.
    let report = env.json(&["lanes"]);
    let shown = &report["responders"][0];
    assert_eq!(shown["responder"], "echo", "{report}");
    assert_eq!(shown["acl_user"], "resp_echo");
    assert_eq!(shown["socket"], sock.display().to_string());
    assert!(shown["requests"].as_i64().unwrap() >= 1, "{report}");
    env.ok(&["delete", "echo"]);
    assert!(
        env.json(&["lanes"]).get("responders").is_none(),
        "a deleted responder is not shown"
    );
    assert!(
        !users(&mut sys).contains("resp_echo"),
        "its ACL user is gone"
    );
    assert!(!sock.exists(), "its socket is gone");
    assert!(!env.home.join("secrets/resp_echo").exists());
    // SCAN, not KEYS: a shared server's admin may not run KEYS.
    let keys: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("MATCH")
        .arg("*:echo:*")
        .clone()
        .iter(&mut sys)
        .unwrap()
        .collect();
    assert_eq!(keys, Vec::<String>::new(), "its keys are gone");
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
        let e = env.fails(&strs(&words(&format!(
            "start --kind responder --name {name} -- sleep 100"
        ))));
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
            &strs(&words(
                "XREADGROUP GROUP alice a STREAMS alice:echo:inbox >",
            )),
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
fn a_responder_s_consumer_names_are_bounded() {
    let env = Env::new();
    env.daemon_toml("[lanes.limits]\nmax_consumers = 2\n");
    start(&env, "agent", "alice", "oxpm-alice");
    start(&env, "responder", "echo", "oxpm-echo");
    let mut resp = lane(&env, "echo");
    let read = |resp: &mut redis::Connection, c: &str| {
        run(
            resp,
            &strs(&words(&format!(
                "XREADGROUP GROUP echo {c} STREAMS alice:echo:outbox >"
            ))),
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
        let e = env.fails(&strs(&words(&format!(
            "start --kind responder --name {name} -- sleep 100000"
        ))));
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
    env.fails(&strs(&words(
        "start --update --kind responder --name discord -- sleep 100000",
    )));
    assert_ne!(env.app("discord")["kind"], "responder");
    env.ok(&strs(&words(
        "start --kind responder --name echo -- sleep 100000",
    )));
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
fn a_responder_s_uid_is_given_to_no_other_app() {
    if test_user("oxpm-alice").is_none() || test_user("oxpm-echo").is_none() {
        eprintln!("skipped: needs root to make the users oxpm-alice and oxpm-echo");
        return;
    }
    let env = Env::new();
    start(&env, "agent", "alice", "oxpm-alice");
    let e = env.fails(&strs(&words(
        "start --kind responder --name echo --user oxpm-alice -- sleep 100000",
    )));
    assert!(e.contains("uid"), "{e}");
    assert!(!env.home.join("lanes/echo.sock").exists());
    assert!(env.status().iter().all(|a| a["name"] != "echo"));
    start(&env, "responder", "echo", "oxpm-echo");
    let e = env.fails(&strs(&words(
        "start --kind agent --name mallory --user oxpm-echo -- sleep 100000",
    )));
    assert!(e.contains("uid"), "{e}");
    assert!(env.status().iter().all(|a| a["name"] != "mallory"));
    // Nor any other kind of app: its uid owns the responder's socket.
    for kind in ["app", "adapter"] {
        let e = env.fails(&strs(&words(&format!(
            "start --kind {kind} --name mallory --user oxpm-echo -- sleep 100000"
        ))));
        assert!(e.contains("lane socket"), "{kind}: {e}");
        assert!(env.status().iter().all(|a| a["name"] != "mallory"));
    }
    // An update into the agent's user, too.
    let e = env.fails(&strs(&words(
        "start --update --kind responder --name echo --user oxpm-alice -- sleep 100000",
    )));
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
    env.ok(&strs(&words(
        "start --kind agent --name mallory --user oxpm-echo -- sleep 100000",
    )));
    let e = env.fails(&["resurrect"]);
    assert!(e.contains("uid"), "{e}");
    assert!(env.status().iter().all(|a| a["name"] != "echo"));
    assert!(!env.home.join("lanes/echo.sock").exists());
}
