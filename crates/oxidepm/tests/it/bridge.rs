//! Layer 3, part 2, through the daemon: the bridge it runs, the webhook,
//! runtime routes. (The bridge's own behaviour under crashes and failing
//! sinks is tested in the oxidepm-bridge crate.)

use crate::harness::{read, strs, Env};
use oxidepm_lanes::Secret;
use oxidepm_testkit::{free_port, http, words, Sink, SinkMode, SmtpSink};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// POSTs JSON to the webhook on `port`; returns the status code and the
/// body.
fn post(port: u16, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    http(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "POST",
        path,
        token,
        body,
    )
}

fn conn(env: &Env, agent: &str) -> redis::Connection {
    redis::Client::open(
        format!(
            "redis+unix://{}",
            env.home.join(format!("lanes/{agent}.sock")).display()
        )
        .as_str(),
    )
    .unwrap()
    .get_connection()
    .unwrap()
}

fn read_inbox(
    c: &mut redis::Connection,
    agent: &str,
    source: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    let got: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(agent)
        .arg("t")
        .arg("COUNT")
        .arg(100)
        .arg("BLOCK")
        .arg(3000)
        .arg("STREAMS")
        .arg(format!("{agent}:{source}:inbox"))
        .arg(">")
        .query(c)
        .unwrap_or_default();
    got.keys
        .into_iter()
        .flat_map(|k| k.ids)
        .map(|e| {
            e.map
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        redis::from_redis_value::<String>(v).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .collect()
}

#[test]
fn webhook_messages_reach_the_routed_agent_and_answers_leave_as_that_agent() {
    let env = Env::new();
    let port = free_port();
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    env.daemon_toml(&format!(
        r#"
agents_share_uid = true
[lanes]
sources = ["webhook"]

[[lanes.routes]]
source = "webhook"
channel = "support"
agent = "alice"

[[lanes.routes]]
source = "webhook"
guild = "acme"
agent = "bob"

[lanes.webhook]
listen = "127.0.0.1:{port}"
deliver = {{ "*" = "{}" }}
"#,
        sink.url()
    ));
    for a in ["alice", "bob"] {
        env.ok(&[
            "start", "--kind", "agent", "--name", a, "--", "sleep", "100000",
        ]);
    }
    env.wait(20, "the bridge", || {
        env.daemon_status()
            .iter()
            .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
            && TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let token = Secret::read(&env.home.join("secrets/webhook_token"))
        .unwrap()
        .expose()
        .to_string();

    // A wrong token or a bad body: 4xx, nothing written.
    let (code, body) = post(
        port,
        "/in/webhook",
        Some("nope"),
        r#"{"channel":"support","sender":"x","text":"hi"}"#,
    );
    assert!((400..500).contains(&code), "{code} {body}");
    let (code, body) = post(port, "/in/webhook", Some(&token), "{not json");
    assert!((400..500).contains(&code), "{code} {body}");
    assert!(!body.is_empty(), "a clear message");

    // By channel, by guild, and unrouted.
    let (code, body) = post(
        port,
        "/in/webhook",
        Some(&token),
        r#"{"channel":"support","sender":"carol","text":"help"}"#,
    );
    assert!((200..300).contains(&code), "{code} {body}");
    let (code, _) = post(
        port,
        "/in/webhook",
        Some(&token),
        r#"{"channel":"general","guild":"acme","sender":"dan","text":"price?"}"#,
    );
    assert!((200..300).contains(&code));
    let (code, _) = post(
        port,
        "/in/webhook",
        Some(&token),
        r#"{"channel":"random","sender":"eve","text":"anyone?"}"#,
    );
    assert!((200..300).contains(&code));

    let mut alice = conn(&env, "alice");
    let mut bob = conn(&env, "bob");
    let a = read_inbox(&mut alice, "alice", "webhook");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["text"], "help");
    assert_eq!(a[0]["sender"], "carol");
    assert_eq!(a[0]["source"], "webhook");
    assert!(a[0].contains_key("received_at"));
    let b = read_inbox(&mut bob, "bob", "webhook");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0]["text"], "price?");
    // The invalid requests wrote nothing: one entry each, and one unrouted.
    let routes = env.json(&["route", "list"]);
    assert_eq!(routes["counters"]["unrouted"], 1, "{routes}");
    assert_eq!(routes["counters"]["routed"], 2, "{routes}");
    let lanes = env.json(&["lanes"]);
    assert_eq!(lanes["bridge"]["counters"]["unrouted"], 1, "{lanes}");
    assert_eq!(lanes["bridge"]["counters"]["pending"], 0, "{lanes}");

    // Alice answers, claiming to be bob: it leaves as alice.
    redis::cmd("XADD")
        .arg("webhook:outbox")
        .arg("*")
        .arg("channel")
        .arg("support")
        .arg("text")
        .arg("on it")
        .arg("agent")
        .arg("bob")
        .query::<String>(&mut alice)
        .unwrap();
    env.wait(20, "the sink to get the answer", || {
        !sink.bodies().is_empty()
    });
    let m = sink.bodies()[0].clone();
    assert_eq!(m["agent"], "alice", "{m}");
    assert_eq!(m["text"], "on it");
    assert!(m["id"].as_str().is_some_and(|i| i.contains('-')), "{m}");

    // A route added at runtime takes effect without restarting the bridge.
    let bridge_pid = env.pid("oxidepm-bridge");
    env.ok(&strs(&words(
        "route add --source webhook --channel random --agent bob",
    )));
    let mut routed = false;
    for _ in 0..50 {
        let (code, _) = post(
            port,
            "/in/webhook",
            Some(&token),
            r#"{"channel":"random","sender":"eve","text":"again"}"#,
        );
        assert!((200..300).contains(&code));
        if read_inbox(&mut bob, "bob", "webhook")
            .iter()
            .any(|m| m["text"] == "again")
        {
            routed = true;
            break;
        }
    }
    assert!(routed, "the runtime route never took effect");
    assert_eq!(
        env.pid("oxidepm-bridge"),
        bridge_pid,
        "the bridge was restarted"
    );
    let list = env.json(&["route", "list"]);
    assert!(
        list["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["channel"] == "random" && r["origin"] == "runtime"),
        "{list}"
    );
    // An AI may not change routes; the refusal is audited.
    let o = env
        .cmd()
        .env("OXIDEPM_ACTOR", "ai:x")
        .args(words(
            "route rm --source webhook --channel random --agent bob",
        ))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("E_POLICY_DENIED"));
    let err = env.fails(&strs(&words(
        "route rm --source webhook --channel support --agent alice",
    )));
    assert!(err.contains("daemon.toml"), "{err}");
    env.ok(&strs(&words(
        "route rm --source webhook --channel random --agent bob",
    )));
    let audit = env.json(&["audit"]);
    let ops: Vec<String> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["actor"].as_str().unwrap(),
                r["op"].as_str().unwrap(),
                r["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        ops.contains(&"human:cli route-add ok".to_string()),
        "{ops:?}"
    );
    assert!(
        ops.contains(&"ai:x route-rm E_POLICY_DENIED".to_string()),
        "{ops:?}"
    );
    let _ = json!(null);
}

#[test]
fn mail_in_a_maildir_reaches_the_agent_and_its_answer_leaves_by_smtp() {
    let Some(smtp) = SmtpSink::start() else {
        return;
    };
    let env = Env::new();
    let smtp_port = smtp.port();
    let maildir = env.path("Maildir");
    env.daemon_toml(&format!(
        r#"
agents_share_uid = true
[lanes]
sources = ["email"]

[[lanes.routes]]
source = "email"
address = "support@example.org"
agent = "alice"

[lanes.email]
maildir = "{}"
smtp = "127.0.0.1:{smtp_port}"
domain = "example.org"
"#,
        maildir.display()
    ));
    env.ok(&[
        "start", "--kind", "agent", "--name", "alice", "--", "sleep", "100000",
    ]);
    env.wait(20, "the bridge", || {
        env.daemon_status()
            .iter()
            .any(|a| a["name"] == "oxidepm-bridge" && a["status"] == "online")
    });
    // The bridge makes the Maildir when its email source starts, which can
    // be just after the process is online.
    env.wait(20, "the bridge's Maildir", || maildir.join("new").is_dir());
    let mail = "From: Carol <carol@example.com>\r\nTo: Support <support@example.org>\r\nSubject: Login\r\nMessage-ID: <m1@example.com>\r\n\r\nI cannot log in.\r\n";
    std::fs::write(maildir.join("new/1700000000.m1.host"), mail).unwrap();
    let mut alice = conn(&env, "alice");
    let mut got = Vec::new();
    for _ in 0..10 {
        got = read_inbox(&mut alice, "alice", "email");
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0]["text"].contains("I cannot log in"), "{got:?}");
    assert_eq!(got[0]["sender"], "carol@example.com");
    assert_eq!(got[0]["subject"], "Login");
    env.wait(10, "the mail to move to cur/", || {
        std::fs::read_dir(maildir.join("cur"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 1
    });
    assert_eq!(std::fs::read_dir(maildir.join("new")).unwrap().count(), 0);

    redis::cmd("XADD")
        .arg("alice:email:outbox")
        .arg("*")
        .arg("to")
        .arg("carol@example.com")
        .arg("subject")
        .arg("Re: Login")
        .arg("text")
        .arg("Try resetting your password.")
        .arg("in_reply_to")
        .arg("m1@example.com")
        .query::<String>(&mut alice)
        .unwrap();
    let out = smtp.dir();
    env.wait(20, "the answer at the SMTP sink", || {
        out.join("1.json").exists()
    });
    let sent: Value = serde_json::from_str(&read(&out.join("1.json"))).unwrap();
    assert_eq!(sent["from"], "alice@example.org", "{sent}");
    assert_eq!(sent["to"][0], "carol@example.com");
    let data = sent["data"].as_str().unwrap();
    assert!(data.contains("X-Oxidepm-Agent: alice"), "{data}");
    assert!(data.contains("In-Reply-To: <m1@example.com>"), "{data}");
    assert!(data.contains("Try resetting your password."));
}
