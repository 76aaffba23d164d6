//! What a grant gives is never more than who holds it: an agent with
//! `tier = "manage"` defines, changes, scales and brings back apps that run
//! as its own uid only. A root daemon with agents of their own uids, the
//! README's recommended setup: such an agent reaches the daemon through
//! its lane's `ops` only (it cannot open `daemon.sock` or `agent.sock`),
//! so that is the path every attack takes here; every test needs root.

use crate::harness::{read, test_user, Env};
use crate::inside::inside_as;
use crate::ops::ops_answer;
use serde_json::{json, Value};

const ALICE: &str = "oxpm-gu-alice";
const BOB: &str = "oxpm-gu-bob";

/// Alice's uid, or why the test cannot run here.
fn alice_uid() -> Option<u32> {
    let (Some((alice, _)), Some(_)) = (test_user(ALICE), test_user(BOB)) else {
        eprintln!("not root: agents cannot have uids of their own here; test skipped");
        return None;
    };
    Some(alice)
}

/// Whom a process runs as, from `/proc`.
fn uid_of_pid(pid: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).unwrap().uid()
}

fn names(env: &Env) -> Vec<String> {
    env.status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}

fn spec(env: &Env, name: &str) -> Value {
    env.json(&["show", name])[0]["spec"].clone()
}

/// An app tagged `support` (inside alice's grant) running `sleep`.
fn app(name: &str, user: Option<&str>) -> Value {
    let mut a = json!({"name": name, "command": "sleep", "args": ["100000"], "tags": ["support"]});
    if let Some(u) = user {
        a["user"] = json!(u);
    }
    a
}

/// Alice with the README's `manage` grant and her lane; a person's `web`
/// inside her grant (as root), and agent bob.
fn setup(env: &Env) -> redis::Connection {
    env.daemon_toml("[agents.alice]\ntier = \"manage\"\napps = [\"@support\"]\n");
    env.ok(&[
        "start", "--name", "web", "--tag", "support", "--", "sleep", "100000",
    ]);
    for (name, user) in [("alice", ALICE), ("bob", BOB)] {
        env.ok(&[
            "start", "--kind", "agent", "--name", name, "--user", user, "--", "sleep", "100000",
        ]);
    }
    crate::lanes::conn(&env.home.join("lanes/alice.sock"))
}

/// Alice's request through her `ops` lane.
fn ask(lane: &mut redis::Connection, op: Value) -> Value {
    ops_answer(lane, "alice", &op.to_string())
}

#[track_caller]
fn refused(r: &Value) {
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
}

#[track_caller]
fn done(r: &Value) {
    assert!(r["error"].is_null(), "{r}");
}

fn running(env: &Env, name: &str) -> u32 {
    env.wait(20, &format!("{name} running"), || {
        env.daemon_app(name)["pid"].as_u64()
    }) as u32
}

#[test]
fn a_manage_grant_defines_changes_and_scales_as_its_holder_only() {
    let Some(alice) = alice_uid() else { return };
    let env = Env::new();
    let mut lane = setup(&env);
    let web = env.pid("web");
    let web_spec = spec(&env, "web");
    let define = |apps: Vec<Value>| json!({"op": "define", "update": true, "apps": apps});

    // No user: hers, written down, never the daemon's.
    done(&ask(&mut lane, define(vec![app("mine", None)])));
    assert_eq!(spec(&env, "mine")["user"], ALICE);
    assert_eq!(uid_of_pid(running(&env, "mine")), alice);

    // Root by name or number, another agent's user, the bridge's, a user
    // that is none: refused with the reason, and nothing is defined.
    for user in ["root", "0", BOB, "oxidepm-bridge", "oxpm-gu-nobody-here"] {
        let r = ask(&mut lane, define(vec![app("evil", Some(user))]));
        refused(&r);
        let m = r["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("own uid"), "{user}: {m}");
    }
    // A request is refused whole: her app beside a root one is not defined.
    refused(&ask(
        &mut lane,
        define(vec![app("f1", None), app("f2", Some("root"))]),
    ));
    let now = names(&env);
    for n in ["evil", "f1", "f2"] {
        assert!(!now.contains(&n.to_string()), "{n}: {now:?}");
    }

    // A person's app inside her grant runs as root: she may not give it
    // her command, whatever user she names.
    for user in [None, Some("root"), Some(ALICE)] {
        let mut a = app("web", user);
        a["command"] = json!("sh");
        a["args"] = json!(["-c", "cat /etc/shadow; exec sleep 100000"]);
        refused(&ask(&mut lane, define(vec![a])));
    }
    assert_eq!((env.pid("web"), spec(&env, "web")), (web, web_spec));

    // Scaling it would make more root processes.
    refused(&ask(
        &mut lane,
        json!({"op": "scale", "target": "web", "instances": 3}),
    ));
    assert!(!names(&env).iter().any(|n| n.starts_with("web-")));

    // Her own app she changes; her own group she scales, as her.
    let mut again = app("mine", None);
    again["args"] = json!(["99999"]);
    done(&ask(&mut lane, define(vec![again])));
    let instance = |i: u32| {
        let mut a = app(&format!("grp-{i}"), None);
        a["env"] = json!({"OXIDEPM_INSTANCE": i.to_string()});
        a
    };
    done(&ask(&mut lane, define(vec![instance(0), instance(1)])));
    done(&ask(
        &mut lane,
        json!({"op": "scale", "target": "grp", "instances": 3}),
    ));
    for n in ["grp-0", "grp-1", "grp-2"] {
        assert_eq!(uid_of_pid(running(&env, n)), alice, "{n}");
    }
}

#[test]
fn a_snapshot_brings_back_an_agent_s_apps_as_the_agent() {
    let Some(alice) = alice_uid() else { return };
    let env = Env::new();
    let mut lane = setup(&env);
    let define = json!({"op": "define", "update": true, "apps": [app("f1", None)]});
    done(&ask(&mut lane, define));
    done(&ask(&mut lane, json!({"op": "save", "name": "hers"})));
    env.ok(&["delete", "f1"]);
    done(&ask(&mut lane, json!({"op": "resurrect", "name": "hers"})));
    assert_eq!(uid_of_pid(running(&env, "f1")), alice);
    // The person's snapshot holds web, which the person defined: hers does
    // not bring it back, and the person's is not hers to bring back.
    env.ok(&["save"]);
    env.ok(&["delete", "web"]);
    let r = ask(&mut lane, json!({"op": "resurrect"}));
    refused(&r);
    assert!(!names(&env).contains(&"web".to_string()));
}

#[test]
fn an_agent_of_its_own_uid_opens_neither_daemon_socket() {
    if alice_uid().is_none() {
        return;
    }
    let env = Env::new();
    env.daemon_toml("[agents.alice]\ntier = \"manage\"\napps = [\"@support\"]\n");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    // Her shell's fifo lies in the test's own directory.
    use std::os::unix::fs::PermissionsExt;
    let top = env.home.parent().unwrap();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut shell = inside_as(&env, "alice", "agent", Some(ALICE));
    for socket in ["agent.sock", "daemon.sock"] {
        let r = shell.run_on(&env, socket, "start --name evil -- sleep 100000");
        assert!(
            !r.ok && r.err.contains("Permission denied"),
            "{socket}: {}",
            r.err
        );
    }
    assert!(!names(&env).contains(&"evil".to_string()));
    let log = read(&env.home.join("logs/alice-out.log"));
    assert!(log.contains("alice ready"), "{log}");
}

/// A working directory is entered as the app's user: one the user cannot
/// reach (the daemon's logs, root's home) would otherwise be the app's to
/// read through relative paths. Refused at define, by a person too.
#[test]
fn a_working_directory_is_entered_as_the_app_s_user() {
    if alice_uid().is_none() {
        return;
    }
    let env = Env::new();
    let mut lane = setup(&env);
    let logs = env.home.join("logs");
    let mut a = app("peek", None);
    a["command"] = json!("sh");
    a["args"] = json!(["-c", "cat web-out.log; exec sleep 100000"]);
    a["cwd"] = json!(logs.display().to_string());
    let r = ask(
        &mut lane,
        json!({"op": "define", "update": true, "apps": [a]}),
    );
    let m = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(m.contains("may not enter"), "{r}");
    assert!(!names(&env).contains(&"peek".to_string()));
    let e = env.fails(&[
        "start", "--name", "peek", "--user", BOB, "--cwd", "/root", "--", "sleep", "100000",
    ]);
    assert!(e.contains("may not enter"), "{e}");
    assert!(!names(&env).contains(&"peek".to_string()));
}
