//! Agents consulting each other through the daemon's bridge, as the agents
//! do it: XADD to their own consult outbox through their lane socket, and
//! read their consult inbox with their group. Only what `[[lanes.consult]]`
//! allows arrives; the rest is in the sender's dead stream with the reason,
//! and the sender is told in its own inbox.

use crate::harness::{read, Env};
use crate::lanes::{conn, host_conn, start_agents};
use std::collections::HashMap;

/// An entry's fields.
pub type Fields = HashMap<String, String>;

const RULED: &str = r#"
agents_share_uid = true
[lanes]
appendfsync = "everysec"

[[lanes.consult]]
from = "alice"
to = "bob"
"#;

const UNRULED: &str = r#"
agents_share_uid = true
[lanes]
appendfsync = "everysec"
"#;

fn lane(env: &Env, agent: &str) -> redis::Connection {
    conn(&env.home.join(format!("lanes/{agent}.sock")))
}

/// XADD through the agent's own lane, in the shared form agents use.
fn says(c: &mut redis::Connection, fields: &[(&str, &str)]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg("consult:outbox").arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    cmd.query(c).unwrap()
}

/// An entry's fields as text.
pub fn fields(e: &redis::streams::StreamId) -> Fields {
    e.map
        .iter()
        .map(|(k, v)| {
            let v = redis::from_redis_value::<String>(v).unwrap_or_default();
            (k.clone(), v)
        })
        .collect()
}

/// What `agent` reads of its consult inbox with its own group, waiting
/// until there are `n` new entries.
fn inbox(env: &Env, c: &mut redis::Connection, agent: &str, n: usize) -> Vec<Fields> {
    let mut got = Vec::new();
    env.wait(
        30,
        &format!("{n} entries in {agent}'s consult inbox"),
        || {
            let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(agent)
                .arg("t")
                .arg("COUNT")
                .arg(100)
                .arg("BLOCK")
                .arg(500)
                .arg("STREAMS")
                .arg(format!("{agent}:consult:inbox"))
                .arg(">")
                .query(c)
                .unwrap_or_default();
            got.extend(reply.keys.iter().flat_map(|k| k.ids.iter().map(fields)));
            got.len() >= n
        },
    );
    got
}

/// A stream as the daemon's admin user reads it.
pub(crate) fn range(env: &Env, key: &str) -> Vec<Fields> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut host_conn(env, "sys"))
        .unwrap();
    reply.ids.iter().map(fields).collect()
}

fn dead(env: &Env, agent: &str, n: usize) -> Vec<Fields> {
    let key = format!("{agent}:consult:outbox:dead");
    env.wait(30, &format!("{n} entries in {key}"), || {
        let d = range(env, &key);
        (d.len() >= n).then_some(d)
    })
}

/// The entries of `key` that are messages, not refusals told back.
fn messages(env: &Env, key: &str) -> Vec<Fields> {
    let all = range(env, key);
    all.into_iter()
        .filter(|e| e.get("kind").map(String::as_str) != Some("refused"))
        .collect()
}

/// The refusals told back in `agent`'s consult inbox, once there are `n`.
fn refusals(env: &Env, agent: &str, n: usize) -> Vec<Fields> {
    let key = format!("{agent}:consult:inbox");
    env.wait(30, &format!("{n} refusals in {key}"), || {
        let r: Vec<Fields> = range(env, &key)
            .into_iter()
            .filter(|e| e.get("kind").map(String::as_str) == Some("refused"))
            .collect();
        (r.len() >= n).then_some(r)
    })
}

fn bridge_reloads(env: &Env) -> usize {
    read(&env.home.join("logs/oxidepm-bridge-err.log"))
        .matches("configuration reloaded")
        .count()
}

#[test]
fn agents_consult_each_other_only_as_daemon_toml_allows() {
    let env = Env::new();
    env.daemon_toml(RULED);
    start_agents(&env, &["alice", "bob", "carol"]);
    env.wait(30, "the bridge", || {
        env.daemon_status()
            .iter()
            .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
    });
    let described = read(&env.home.join("lanes/alice.json"));
    assert!(described.contains("alice:consult:inbox"), "{described}");
    assert!(described.contains("alice:consult:outbox"), "{described}");
    let (mut alice, mut bob, mut carol) =
        (lane(&env, "alice"), lane(&env, "bob"), lane(&env, "carol"));

    // The rules in force are shown.
    let routes = env.json(&["route", "list"]);
    assert_eq!(
        routes["consult"],
        serde_json::json!([{"from": "alice", "to": "bob"}]),
        "{routes}"
    );
    assert!(env.ok(&["route", "list"]).contains("consult: alice -> bob"));

    // Alice asks twice, the first time posing as carol.
    let q1 = says(
        &mut alice,
        &[("to", "bob"), ("from", "carol"), ("text", "q1")],
    );
    let q2 = says(
        &mut alice,
        &[("to", "bob"), ("text", "q2"), ("topic", "dns")],
    );
    let got = inbox(&env, &mut bob, "bob", 2);
    assert_eq!(got.len(), 2, "{got:?}");
    for (e, (id, text)) in got.iter().zip([(&q1, "q1"), (&q2, "q2")]) {
        assert_eq!(e["from"], "alice", "{e:?}");
        assert_eq!(e["kind"], "question");
        assert_eq!(&e["request_id"], id);
        assert_eq!(e["text"], text, "in order");
    }
    assert_eq!(got[1]["topic"], "dns");

    // Bob answers both; the answers come back to alice, in his order.
    says(&mut bob, &[("to", "alice"), ("re", &q2), ("text", "a2")]);
    says(&mut bob, &[("to", "alice"), ("re", &q1), ("text", "a1")]);
    let answers = inbox(&env, &mut alice, "alice", 2);
    assert_eq!(answers.len(), 2, "{answers:?}");
    for (e, (id, text)) in answers.iter().zip([(&q2, "a2"), (&q1, "a1")]) {
        assert_eq!(e["from"], "bob");
        assert_eq!(e["kind"], "answer");
        assert_eq!(&e["re"], id);
        assert_eq!(e["text"], text);
    }

    // No rule bob → alice, carol → bob; an answer to a question never
    // asked: dead streams, with the reason, told to the sender in its own
    // inbox; no message is delivered.
    says(&mut bob, &[("to", "alice"), ("text", "unruled")]);
    says(
        &mut bob,
        &[("to", "alice"), ("re", "1-0"), ("text", "unasked")],
    );
    says(&mut carol, &[("to", "bob"), ("text", "me too")]);
    let bob_dead = dead(&env, "bob", 2);
    assert!(
        bob_dead[0]["error"].contains("no [[lanes.consult]] rule lets bob consult alice"),
        "{bob_dead:?}"
    );
    assert_eq!(bob_dead[0]["text"], "unruled");
    assert!(
        bob_dead[1]["error"].contains("names no open question"),
        "{bob_dead:?}"
    );
    let carol_dead = dead(&env, "carol", 1);
    assert!(
        carol_dead[0]["error"].contains("carol consult bob"),
        "{carol_dead:?}"
    );
    assert_eq!(messages(&env, "alice:consult:inbox").len(), 2);
    assert_eq!(messages(&env, "bob:consult:inbox").len(), 2);
    let told = refusals(&env, "bob", 2);
    for (t, d) in told.iter().zip(&bob_dead) {
        assert_eq!(t["re"], d["original_id"], "{told:?}");
        assert_eq!(t["error"], d["error"], "{told:?}");
    }
    assert_eq!(
        refusals(&env, "carol", 1)[0]["error"],
        carol_dead[0]["error"]
    );
    // A question bob leaves open.
    says(&mut alice, &[("to", "bob"), ("text", "still open")]);
    inbox(&env, &mut bob, "bob", 1);

    // The rule is removed and daemon.toml reloaded: alice's next question
    // is dead, bob's inbox is as it was.
    let before = bridge_reloads(&env);
    env.daemon_toml(UNRULED);
    let r = env.json(&["reload-daemon-config"]);
    assert!(
        r["applied"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "lanes.consult"),
        "{r}"
    );
    env.wait(30, "the bridge to reload", || bridge_reloads(&env) > before);
    assert!(env.json(&["route", "list"]).get("consult").is_none());
    says(&mut alice, &[("to", "bob"), ("text", "q3")]);
    let alice_dead = dead(&env, "alice", 1);
    assert_eq!(alice_dead[0]["text"], "q3");
    assert!(alice_dead[0]["error"].contains("no [[lanes.consult]] rule lets alice consult bob"));
    assert_eq!(messages(&env, "bob:consult:inbox").len(), 3);

    // Deleting bob deletes the record of what was still open with him: a
    // new bob could not answer it.
    let open = "bridge:consult:open:alice:bob";
    let exists = |env: &Env| -> i64 {
        redis::cmd("EXISTS")
            .arg(open)
            .query(&mut host_conn(env, "sys"))
            .unwrap()
    };
    assert_eq!(exists(&env), 1);
    env.ok(&["delete", "bob"]);
    assert_eq!(exists(&env), 0);
}

#[test]
fn consult_rules_are_checked_change_live_and_the_first_one_waits_for_a_daemon_start() {
    let env = Env::new();
    env.daemon_toml(UNRULED);
    env.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    // Agents have no consult family yet: the first rule waits.
    env.daemon_toml(RULED);
    let r = env.json(&["reload-daemon-config"]);
    let waits = &r["not_applied"][0];
    assert_eq!(waits["key"], "lanes.consult", "{r}");
    let reason = waits["reason"].as_str().unwrap();
    assert!(reason.contains("only when the daemon starts"), "{reason}");

    // With a rule at start, rules change live, agents or not.
    let ruled = Env::new();
    ruled.daemon_toml(RULED);
    ruled.ok(&["start", "--name", "idle", "--", "sleep", "100000"]);
    ruled.daemon_toml(&RULED.replace(
        "from = \"alice\"\nto = \"bob\"",
        "from = \"bob\"\nto = \"carol\"",
    ));
    let r = ruled.json(&["reload-daemon-config"]);
    assert_eq!(r["applied"], serde_json::json!(["lanes.consult"]), "{r}");
    let routes = ruled.json(&["route", "list"]);
    assert_eq!(
        routes["consult"],
        serde_json::json!([{"from": "bob", "to": "carol"}]),
        "{routes}"
    );

    // Bad rules are refused with the line and what to change, and the
    // daemon keeps what it had.
    for (rule, says) in [
        (
            "from = \"alice\"\nto = \"alice\"",
            "does not consult itself",
        ),
        ("from = \"alice\"\nto = \"B*\"", "is not allowed"),
        ("from = \"alice\"\nto = \"ops\"", "reserved"),
        ("from = \"alice\"\nto = [\"bob\"]", "invalid type"),
    ] {
        env.daemon_toml(&format!("{UNRULED}\n[[lanes.consult]]\n{rule}\n"));
        let e = env.fails(&["reload-daemon-config"]);
        assert!(e.contains(says), "{rule}: {e}");
        if says != "reserved" {
            assert!(
                e.contains("daemon.toml: TOML parse error at line"),
                "{rule}: {e}"
            );
        }
    }
    env.daemon_toml(&format!("{UNRULED}[lanes.consult_limits]\nopen_secs = 0\n"));
    let e = env.fails(&["reload-daemon-config"]);
    assert!(
        e.contains("lanes.consult_limits.open_secs must be positive"),
        "{e}"
    );
    env.daemon_toml(&format!("{UNRULED}sources = [\"webhook\", \"consult\"]\n"));
    let e = env.fails(&["reload-daemon-config"]);
    assert!(e.contains("[[lanes.consult]] rules"), "{e}");
}

/// A python3 that has redis-py, or why not.
fn python_with_redis() -> Result<String, String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys, redis; print(sys.executable)"])
        .output()
        .map_err(|e| format!("python3 cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "python3 has no redis-py: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn the_python_example_agents_ask_and_answer_each_other() {
    let py = match python_with_redis() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: the example agents cannot run: {why}");
            return;
        }
    };
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/agents/consult.py"
    );
    let env = Env::new();
    env.daemon_toml(RULED);
    env.ok(&[
        "start", "--kind", "agent", "--name", "bob", "--", &py, example,
    ]);
    env.ok(&[
        "start",
        "--kind",
        "agent",
        "--name",
        "alice",
        "--",
        &py,
        example,
        "bob",
        "what is 2+2?",
    ]);
    let log = env.home.join("logs/alice-out.log");
    let said = env.wait(60, "alice to get bob's answer", || {
        let l = read(&log);
        l.contains("alice: bob answered").then_some(l)
    });
    assert!(said.contains("bob heard 12 chars"), "{said}");
    // Bob says so after he sent the answer: his line may reach his log
    // after alice has the answer.
    let bob_log = env.home.join("logs/bob-out.log");
    env.wait(20, "bob to say he answered", || {
        read(&bob_log).contains("bob: answered alice's")
    });
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
