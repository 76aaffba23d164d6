//! The `ops` responder: an agent asks the daemon through its own lane.

use crate::harness::{strs, Env};
use crate::lanes::{conn, run, start_agents};
use oxidepm_testkit::words;
use serde_json::Value;

/// Sends `request` through `agent`'s ops lane and waits for its answer.
pub fn ops_answer(c: &mut redis::Connection, agent: &str, request: &str) -> Value {
    let id: String = redis::cmd("XADD")
        .arg(format!("{agent}:ops:outbox"))
        .arg("*")
        .arg("request")
        .arg(request)
        .query(c)
        .unwrap();
    let inbox = format!("{agent}:ops:inbox");
    for _ in 0..100 {
        let got: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(agent)
            .arg("t")
            .arg("COUNT")
            .arg(10)
            .arg("BLOCK")
            .arg(200)
            .arg("STREAMS")
            .arg(&inbox)
            .arg(">")
            .query(c)
            .unwrap_or_default();
        for k in got.keys {
            for e in k.ids {
                let rid: String = e.get("request_id").unwrap();
                if rid == id {
                    let resp: String = e.get("response").unwrap();
                    return serde_json::from_str(&resp).unwrap();
                }
            }
        }
    }
    panic!("no answer to {request} in {inbox}");
}

#[test]
fn the_ops_responder_answers_an_agent_as_itself() {
    let env = Env::new();
    // An agent reaches itself and what it is granted.
    env.daemon_toml("[agents.alice]\napps = [\"web\", \"db\"]\n");
    env.ok(&strs(&words("start --name db --protected -- sleep 100000")));
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    start_agents(&env, &["alice", "bob"]);
    let db = env.pid("db");
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    let r = ops_answer(
        &mut alice,
        "alice",
        r#"{"op":"restart","target":"db","claim":"human:root"}"#,
    );
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["code"], "E_PROTECTED", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("ai:alice"));
    assert_eq!(env.pid("db"), db);
    let r = ops_answer(&mut alice, "alice", r#"{"op":"restart","target":"web"}"#);
    assert_eq!(r["ok"], true, "{r}");
    let r = ops_answer(&mut alice, "alice", r#"{"op":"whoami"}"#);
    assert_eq!(r["result"]["actor"], "ai:alice");
    assert_eq!(r["result"]["socket"], "lane");
    let r = ops_answer(&mut alice, "alice", "not json");
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST");
    let rows = env.json(&["audit", "--actor", "ai:alice"]);
    let rows = rows.as_array().unwrap();
    assert!(rows
        .iter()
        .any(|r| r["op"] == "restart" && r["outcome"] == "E_PROTECTED" && r["socket"] == "lane"));
    assert!(env
        .events("web")
        .iter()
        .any(|e| e["kind"] == "restarted" && e["actor"] == "ai:alice"));
    // Bob's answers are his alone.
    let mut bob = conn(&env.home.join("lanes/bob.sock"));
    ops_answer(&mut bob, "bob", r#"{"op":"status"}"#);
    let e = run(&mut alice, &["XRANGE", "bob:ops:inbox", "-", "+"]).unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
    let e = run(
        &mut alice,
        &strs(&words("XREADGROUP GROUP bob x STREAMS bob:ops:inbox >")),
    )
    .unwrap_err();
    assert!(e.starts_with("NOPERM"), "{e}");
}
