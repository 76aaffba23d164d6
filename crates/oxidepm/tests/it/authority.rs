//! Authority that holds: an adapter's or an agent's grant on every path to
//! an app, labels that belong to the agents that own them, and protected
//! apps a person stopped. Each test is the attack, and checks that nothing
//! changed.

use crate::harness::{alive, bin, read, strs, Env};
use crate::inside::{inside, Ran};
use crate::lanes::conn;
use crate::ops::ops_answer;
use oxidepm_testkit::words;
use serde_json::{json, Value};

/// The stored spec of an app, as a person sees it.
fn spec(env: &Env, name: &str) -> Value {
    env.json(&["show", name])[0]["spec"].clone()
}

/// The app's status from the socket.
fn status(env: &Env, name: &str) -> String {
    env.daemon_app(name)["status"].as_str().unwrap().to_string()
}

#[track_caller]
fn refused(r: &Ran, code: &str) {
    assert!(!r.ok, "should be refused: {}", r.out);
    assert!(r.err.contains(code), "{code} expected: {}", r.err);
}

/// `op` on `socket` with `claim`, raw; returns the whole response.
fn claimed(env: &Env, socket: &str, claim: &str, mut op: Value) -> Value {
    op["id"] = json!(1);
    op["claim"] = json!(claim);
    env.raw(socket).call(op)
}

/// Audit rows of `actor`, as `op outcome` strings.
fn audit_of(env: &Env, actor: &str) -> Vec<String> {
    env.json(&["audit", "--actor", actor])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["op"].as_str().unwrap(),
                r["outcome"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn an_adapter_granted_a_tag_reaches_nothing_else_by_any_request() {
    let env = Env::new();
    env.daemon_toml(
        "[lanes]\nbackend = \"off\"\n[adapters.chat]\ntier = \"manage\"\napps = [\"@bots\"]\n",
    );
    let line = |name: &str| format!("echo {name}-was-here; exec sleep 100000");
    env.ok(&["start", "--name", "web", "--", "sh", "-c", &line("web")]);
    let bot_cmd = line("bot");
    env.ok(&[
        "start", "--name", "bot", "--tag", "bots", "--", "sh", "-c", &bot_cmd,
    ]);
    env.ok(&[
        "start", "--name", "feed", "--kind", "adapter", "--tag", "bots", "--", "sleep", "100000",
    ]);
    let log = |name: &str| read(&env.home.join(format!("logs/{name}-out.log")));
    env.wait(20, "both logs", || {
        log("web").contains("web-was-here") && log("bot").contains("bot-was-here")
    });
    env.ok(&["save"]);
    let web = env.pid("web");
    let web_spec = spec(&env, "web");
    let mut chat = inside(&env, "chat", "adapter");

    // `flush` with no selector empties the logs of its grant only.
    let r = chat.run(&env, "flush --json");
    assert!(r.ok, "{}", r.err);
    assert_eq!(r.json()["flushed"], json!(["bot", "feed"]));
    assert!(log("web").contains("web-was-here"), "a person's log kept");
    assert!(!log("bot").contains("bot-was-here"));

    // Redefining a person's app with the granted tag, to run its own command.
    let r = chat.run(
        &env,
        "start --name web --tag bots -- sh -c 'echo pwned; exec sleep 100000'",
    );
    refused(&r, "E_POLICY_DENIED");
    assert_eq!(env.pid("web"), web);
    assert_eq!(spec(&env, "web"), web_spec);

    // On its own apps it may not change whom they run as or what they are.
    let bot = env.pid("bot");
    let bot_spec = spec(&env, "bot");
    let r = chat.run(
        &env,
        &format!("start --name bot --tag bots --user nobody -- sh -c '{bot_cmd}'"),
    );
    refused(&r, "E_POLICY_DENIED");
    let r = chat.run(&env, "start --name feed --tag bots -- sleep 100000");
    refused(&r, "E_POLICY_DENIED");
    assert_eq!(env.daemon_app("feed")["kind"], "adapter");
    assert_eq!((env.pid("bot"), spec(&env, "bot")), (bot, bot_spec));
    // What the grant is for still works.
    assert!(chat.run(&env, "restart bot").ok);
    assert_ne!(env.pid("bot"), bot);

    // `save` does not replace the person's snapshot; under its own name it
    // holds the apps of its grant.
    refused(&chat.run(&env, "save --json"), "E_POLICY_DENIED");
    let r = chat.run(&env, "save mine --json");
    assert!(r.ok, "{}", r.err);
    assert_eq!(r.json()["apps"], json!(["bot", "feed"]));

    // `resurrect` of the person's snapshot starts only what is in its grant.
    env.ok(&["stop", "web", "bot"]);
    let r = chat.run(&env, "resurrect --json");
    assert!(r.ok, "{}", r.err);
    assert_eq!(status(&env, "bot"), "online");
    assert_eq!(status(&env, "web"), "stopped");
    // ... and never defines again an app the person deleted.
    env.ok(&["delete", "feed"]);
    refused(&chat.run(&env, "resurrect"), "E_POLICY_DENIED");
    assert!(env.daemon_status().iter().all(|a| a["name"] != "feed"));
    assert_eq!(status(&env, "web"), "stopped");

    // The person's snapshot is whole: it brings everything back.
    env.ok(&["resurrect"]);
    assert_eq!(status(&env, "web"), "online");
    assert_eq!(env.daemon_app("feed")["kind"], "adapter");

    // Neither agent.sock nor an app it defines, whatever that claims,
    // takes it out of its grant.
    let web = env.pid("web");
    refused(
        &chat.run_on(&env, "agent.sock", "restart web"),
        "E_POLICY_DENIED",
    );
    let helper_err = env.path("helper.err");
    let r = chat.run(
        &env,
        &format!(
            "start --name helper --tag bots -- sh -c 'OXIDEPM_ACTOR=ai:x {} restart web 2> {}; sleep 100000'",
            bin("oxidepm").display(),
            helper_err.display()
        ),
    );
    assert!(r.ok, "{}", r.err);
    env.wait(20, "the helper's answer", || {
        read(&helper_err).contains("E_POLICY_DENIED")
    });
    assert_eq!(env.pid("web"), web);

    let rows = audit_of(&env, "adapter:chat");
    for want in [
        "define E_POLICY_DENIED",
        "save E_POLICY_DENIED",
        "resurrect E_POLICY_DENIED",
        "flush ok",
    ] {
        assert!(rows.iter().any(|r| r == want), "{want} not in {rows:?}");
    }
}

#[test]
fn a_defined_agents_label_is_its_own_and_new_labels_get_the_lowest_tier() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[lanes]\nbackend = \"off\"\n[tiers]\nlabels = { assistant = \"read\" }\n");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let mut alice = inside(&env, "alice", "agent");
    let web = env.pid("web");
    let restart = json!({"op": "restart", "target": "web"});

    // Anyone outside alice's tree claiming to be alice, on either socket.
    for socket in ["daemon.sock", "agent.sock"] {
        let who = claimed(&env, socket, "ai:alice", json!({"op": "whoami"}));
        assert_eq!(who["result"]["actor"], "ai:unverified", "{socket}: {who}");
        assert_eq!(who["result"]["tier"], "read", "{socket}: {who}");
        let r = claimed(&env, socket, "ai:alice", restart.clone());
        assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{socket}: {r}");
    }
    // A label chosen to escape `assistant = "read"`.
    for claim in ["ai:assistant", "ai:assistant-2", "ai:fresh"] {
        let who = claimed(&env, "agent.sock", claim, json!({"op": "whoami"}));
        assert_eq!(who["result"]["tier"], "read", "{claim}: {who}");
        let r = claimed(&env, "daemon.sock", claim, restart.clone());
        assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{claim}: {r}");
    }
    let who = env.raw("agent.sock").call(json!({"id": 1, "op": "whoami"}));
    assert_eq!(who["result"]["tier"], "read", "{who}");
    assert_eq!(env.pid("web"), web);

    // Nothing was done or refused in alice's name.
    assert!(audit_of(&env, "ai:alice").is_empty());
    assert!(audit_of(&env, "ai:unverified")
        .iter()
        .any(|r| r == "restart E_POLICY_DENIED"));
    assert!(env.events("web").iter().all(|e| e["actor"] != "ai:alice"));

    // Alice herself, from her own tree, on both sockets.
    let v = alice.run(&env, "whoami --json").json();
    assert_eq!(
        (&v["actor"], &v["tier"]),
        (&json!("ai:alice"), &json!("control"))
    );
    assert_eq!(v["socket"], "agent");
    let v = alice.run_on(&env, "daemon.sock", "whoami --json").json();
    assert_eq!(v["actor"], "ai:alice");
}

#[test]
fn an_agent_reaches_itself_and_its_grant_through_ops_and_its_own_tree() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[agents.alice]\napps = [\"shop\"]\n");
    let shop_cmd = "echo shop-line; exec sleep 100000";
    env.ok(&["start", "--name", "shop", "--", "sh", "-c", shop_cmd]);
    // A customer's card number reached bob, and bob's log.
    let bob_cmd = "echo card 4111111111111111; exec sleep 100000";
    env.ok(&[
        "start", "--kind", "agent", "--name", "bob", "--", "sh", "-c", bob_cmd,
    ]);
    let mut alice = inside(&env, "alice", "agent");
    let bob_log = env.home.join("logs/bob-out.log");
    env.wait(20, "bob's log", || read(&bob_log).contains("4111"));
    let lane = env.home.join("lanes/alice.sock");
    env.wait(30, "alice's lane", || {
        std::os::unix::net::UnixStream::connect(&lane).is_ok()
    });
    let mut lane = conn(&lane);
    let bob = env.pid("bob");
    let shop = env.pid("shop");

    // Through the ops lane: bob's logs, stopping or restarting bob.
    for request in [
        r#"{"op":"logs","target":"bob","lines":100}"#,
        r#"{"op":"logs","target":"all","lines":100}"#,
        r#"{"op":"stop","target":"bob"}"#,
        r#"{"op":"restart","target":"bob"}"#,
    ] {
        let r = ops_answer(&mut lane, "alice", request);
        assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{request}: {r}");
        assert!(!r.to_string().contains("4111"), "{r}");
    }
    // Its own logs and the granted app's.
    let r = ops_answer(&mut lane, "alice", r#"{"op":"logs","target":"alice"}"#);
    assert!(r.to_string().contains("alice ready"), "{r}");
    let r = ops_answer(&mut lane, "alice", r#"{"op":"logs","target":"shop"}"#);
    assert!(r.to_string().contains("shop-line"), "{r}");
    let r = ops_answer(&mut lane, "alice", r#"{"op":"restart","target":"shop"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert_ne!(env.pid("shop"), shop);
    // The audit trail it reads is its own, whatever actor it asks for.
    env.ok(&["restart", "shop"]);
    for request in [r#"{"op":"audit"}"#, r#"{"op":"audit","actor":"human:cli"}"#] {
        let r = ops_answer(&mut lane, "alice", request);
        let rows = r["result"]
            .as_array()
            .or(r.as_array())
            .cloned()
            .unwrap_or_default();
        assert!(!rows.is_empty(), "{request}: {r}");
        assert!(
            rows.iter().all(|row| row["actor"] == "ai:alice"),
            "{request}: {r}"
        );
    }

    // From its own tree, on agent.sock and on daemon.sock.
    let r = alice.run(&env, "logs bob --lines 100");
    refused(&r, "E_POLICY_DENIED");
    assert!(!r.out.contains("4111"));
    refused(
        &alice.run_on(&env, "daemon.sock", "stop bob"),
        "E_POLICY_DENIED",
    );
    refused(&alice.run(&env, "restart all"), "E_POLICY_DENIED");
    let r = alice.run_on(&env, "daemon.sock", "logs alice --lines 5");
    assert!(r.ok && r.out.contains("alice ready"), "{} {}", r.out, r.err);

    assert_eq!(env.pid("bob"), bob);
    assert!(alive(bob));
    assert!(env.events("bob").iter().all(|e| e["actor"] != "ai:alice"));
    let rows = audit_of(&env, "ai:alice");
    for want in [
        "stop E_POLICY_DENIED",
        "restart E_POLICY_DENIED",
        "restart ok",
    ] {
        assert!(rows.iter().any(|r| r == want), "{want} not in {rows:?}");
    }
}

#[test]
fn a_protected_app_a_person_stopped_stays_stopped_whatever_an_ai_asks() {
    let env = Env::new();
    env.daemon_toml("agents_share_uid = true\n[lanes]\nbackend = \"off\"\n");
    env.ok(&strs(&words("start --name db --protected -- sleep 100000")));
    // web depends on db: starting web would bring db along.
    env.request(json!({"id": 1, "op": "define", "apps": [{
        "name": "web", "command": "sleep", "args": ["100000"],
        "depends_on": [{"app": "db"}]
    }]}));
    env.ok(&["stop", "web", "db"]);
    let ai = |op: Value| claimed(&env, "daemon.sock", "ai:assistant", op);
    let attempts = || {
        for op in [
            json!({"op": "start", "target": "db"}),
            json!({"op": "restart", "target": "db"}),
            json!({"op": "start", "target": "web"}),
            json!({"op": "start", "target": "all"}),
        ] {
            let r = ai(op.clone());
            assert_eq!(r["error"]["code"], "E_PROTECTED", "{op}: {r}");
        }
        assert_eq!(status(&env, "db"), "stopped");
        assert_eq!(status(&env, "web"), "stopped");
    };
    attempts();
    // Who stopped it is kept across a daemon restart.
    env.ok(&["kill"]);
    env.daemon_pid();
    attempts();

    // A protected app that stopped by itself, not by a person: an AI may
    // start it again.
    env.ok(&strs(&words(
        "start --name once --protected --restart never -- true",
    )));
    env.wait_status("once", "stopped");
    let r = ai(json!({"op": "start", "target": "once"}));
    assert_eq!(r["ok"], true, "{r}");
    assert!(env
        .events("once")
        .iter()
        .any(|e| e["kind"] == "started" && e["actor"] == "ai:assistant"));

    // The person starts it again.
    env.ok(&["start", "db"]);
    assert_eq!(status(&env, "db"), "online");
    let rows = audit_of(&env, "ai:assistant");
    assert!(rows.iter().any(|r| r == "start E_PROTECTED"), "{rows:?}");
}

/// An agent allowed `@bots` names `web`, its own app, in a `scale`: the
/// daemon must act on what it checked (the app `web`, which is no group),
/// never on a person's instances `web-0`, `web-1` that share the name.
#[test]
fn scale_acts_only_on_the_apps_the_grant_was_checked_against() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\ntier = \"manage\"\napps = [\"@bots\"]\n");
    let file = env.path("web.toml");
    std::fs::write(
        &file,
        "[[apps]]\nname = \"web\"\nscript = \"sleep\"\nargs = [\"100000\"]\ninstances = 2\n",
    )
    .unwrap();
    env.ok(&["start", file.to_str().unwrap()]);
    env.ok(&[
        "start", "--name", "web", "--tag", "bots", "--", "sleep", "100000",
    ]);
    crate::lanes::start_agents(&env, &["alice"]);
    let before: Vec<u32> = ["web", "web-0", "web-1"]
        .iter()
        .map(|n| env.pid(n))
        .collect();
    let mut alice = crate::lanes::conn(&env.home.join("lanes/alice.sock"));
    for req in [
        r#"{"op":"scale","target":"web","instances":1}"#,
        r#"{"op":"scale","target":"web","instances":4}"#,
    ] {
        let r = crate::ops::ops_answer(&mut alice, "alice", req);
        assert!(r["error"]["code"].is_string(), "{req}: {r}");
    }
    let names: Vec<String> = env
        .status()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    for n in ["web", "web-0", "web-1"] {
        assert!(names.iter().any(|x| x == n), "{n} gone: {names:?}");
    }
    assert!(
        !names.iter().any(|x| x == "web-2" || x == "web-3"),
        "{names:?}"
    );
    let after: Vec<u32> = ["web", "web-0", "web-1"]
        .iter()
        .map(|n| env.pid(n))
        .collect();
    assert_eq!(before, after);
    assert!(before.iter().all(|p| alive(*p)));
}
