//! An agent's event feed: `subscribe` through its `ops` lane puts the
//! events it may see into its `ops` inbox.

use crate::harness::Env;
use crate::lanes::{conn, start_agents};
use crate::ops::ops_answer;
use serde_json::Value;

/// The `stream` records in `agent`'s ops inbox, read as its group, until
/// `done` holds of all read so far.
fn feed_until(
    c: &mut redis::Connection,
    agent: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let inbox = format!("{agent}:ops:inbox");
    let mut got = Vec::new();
    for _ in 0..200 {
        let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(agent)
            .arg("feed")
            .arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(200)
            .arg("STREAMS")
            .arg(&inbox)
            .arg(">")
            .query(c)
            .unwrap_or_default();
        for k in read.keys {
            for e in k.ids {
                if let Some(s) = e.get::<String>("stream") {
                    got.push(serde_json::from_str(&s).unwrap());
                }
            }
        }
        if done(&got) {
            return got;
        }
    }
    panic!("the feed did not come: {got:?}");
}

#[test]
fn an_agent_subscribes_through_its_lane_to_the_apps_of_its_grant_only() {
    let env = Env::new();
    env.daemon_toml("[agents.alice]\napps = [\"web\"]\n");
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    env.ok(&["start", "--name", "db", "--", "sleep", "100000"]);
    start_agents(&env, &["alice"]);
    let mut alice = conn(&env.home.join("lanes/alice.sock"));
    // Refusals are not an agent's to read.
    let r = ops_answer(
        &mut alice,
        "alice",
        r#"{"op":"subscribe","kinds":["refusal"]}"#,
    );
    assert_eq!(r["error"]["code"], "E_POLICY_DENIED", "{r}");
    let r = ops_answer(
        &mut alice,
        "alice",
        r#"{"op":"subscribe","kinds":["nope"]}"#,
    );
    assert_eq!(r["error"]["code"], "E_BAD_REQUEST", "{r}");
    let r = ops_answer(&mut alice, "alice", r#"{"op":"subscribe","target":"db"}"#);
    assert_eq!(
        r["error"]["code"], "E_POLICY_DENIED",
        "outside the grant: {r}"
    );
    let r = ops_answer(&mut alice, "alice", r#"{"op":"subscribe"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["result"]["subscribed"].is_object(), "{r}");
    env.ok(&["restart", "db"]);
    env.ok(&["restart", "web"]);
    env.ok(&["stop", "db"]);
    // A refusal an admin would see: the agent must not.
    let _ = ops_answer(&mut alice, "alice", r#"{"op":"stop","target":"db"}"#);
    env.ok(&["stop", "web"]);
    let got = feed_until(&mut alice, "alice", |g| {
        g.iter()
            .any(|r| r["event"]["app"] == "web" && r["event"]["kind"] == "stopped")
    });
    for r in &got {
        let app = r["event"]["app"].as_str();
        assert!(
            app == Some("web") || app == Some("alice"),
            "outside the grant or not an event: {r}"
        );
    }
    assert!(got.iter().any(|r| r["event"]["actor"]
        .as_str()
        .is_some_and(|a| a.starts_with("human:"))));
}
