//! The bridge against a real redis-server (with the ACL the daemon writes)
//! and real HTTP on loopback: in-process, and as the real binary where a
//! signal is the point.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod bounds;
mod consult;
mod discord;
mod discord_faults;
pub(crate) mod harness;
mod maildir_race;
mod parking;
mod reconnect;
mod source_failure;
mod webhook_limits;

use harness::*;
use nix::sys::signal::Signal;
use oxidepm_bridge::Inbound;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// Writes `fields` to `agent`'s outbox of `source`, as the agent.
fn agent_says(redis: &Redis, agent: &str, source: &str, fields: &[(&str, &str)]) -> String {
    let mut cmd = vec![
        "XADD".to_string(),
        format!("{agent}:{source}:outbox"),
        "*".into(),
    ];
    for (k, v) in fields {
        cmd.push(k.to_string());
        cmd.push(v.to_string());
    }
    let id = redis.agent(agent).cmd(&cmd);
    id.text().unwrap_or_else(|| panic!("XADD gave {id:?}"))
}

fn field<'a>(e: &'a (String, std::collections::HashMap<String, String>), k: &str) -> &'a str {
    e.1.get(k)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no field {k} in {e:?}"))
}

#[test]
fn routes_by_channel_guild_and_address() {
    let redis = Redis::start(&["alice", "bob"]);
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": ["alice", "bob"],
            "routes": [
                {"source": "webhook", "channel": "c1", "agent": "alice"},
                {"source": "webhook", "guild": "g1", "agent": "bob"},
                {"source": "webhook", "address": "Bob@Example.org", "agent": "bob"},
                {"source": "email", "address": "Alice@Example.org", "agent": "alice"},
            ],
        }),
    );
    let tb = TestBridge::start(&redis.config_path());
    let addr = tb.addr();

    // The channel route beats the guild route.
    let (st, r) = post(
        addr,
        "webhook",
        json!({"channel": "c1", "guild": "g1", "sender": "ann", "text": "to alice", "id": "ext-1"}),
    );
    assert_eq!(st, 202, "{r}");
    assert_eq!(r["routed_to"], "alice");
    assert_eq!(r["stream"], "alice:webhook:inbox");
    // A guild route.
    let (st, r) = post(
        addr,
        "webhook",
        json!({"channel": "c9", "guild": "g1", "sender": "ann", "text": "to bob"}),
    );
    assert_eq!((st, r["routed_to"].clone()), (202, json!("bob")), "{r}");
    // An address route, matched without regard to case, over HTTP…
    let (st, r) = post(
        addr,
        "webhook",
        json!({"channel": "c9", "address": "BOB@example.ORG", "sender": "ann", "text": "mail for bob"}),
    );
    assert_eq!((st, r["routed_to"].clone()), (202, json!("bob")), "{r}");
    // …and from another source through the publisher sources are given.
    let published = tb
        .block_on(tb.bridge.publisher().publish(Inbound {
            source: "email".into(),
            channel: "INBOX".into(),
            address: Some("alice@EXAMPLE.org".into()),
            sender: "carol@example.org".into(),
            text: "a mail".into(),
            external_id: Some("<m1@example.org>".into()),
            extra: vec![
                ("subject".into(), "hello".into()),
                ("sender".into(), "forged".into()),
            ],
            ..Inbound::default()
        }))
        .unwrap();
    assert_eq!(published.agent.as_deref(), Some("alice"));
    assert_eq!(published.stream, "alice:email:inbox");

    // What alice reads in her own inbox, through her own ACL user.
    let mut alice = redis.agent("alice");
    let inbox = entries(&mut alice, "alice:webhook:inbox");
    assert_eq!(inbox.len(), 1);
    let e = &inbox[0];
    assert_eq!(field(e, "source"), "webhook");
    assert_eq!(field(e, "channel"), "c1");
    assert_eq!(field(e, "guild"), "g1");
    assert_eq!(field(e, "sender"), "ann");
    assert_eq!(field(e, "text"), "to alice");
    assert_eq!(field(e, "external_id"), "ext-1");
    assert!(chrono::DateTime::parse_from_rfc3339(field(e, "received_at")).is_ok());
    let mail = entries(&mut alice, "alice:email:inbox");
    assert_eq!(field(&mail[0], "address"), "alice@EXAMPLE.org");
    assert_eq!(field(&mail[0], "subject"), "hello");
    assert_eq!(
        field(&mail[0], "sender"),
        "carol@example.org",
        "extra cannot forge"
    );

    let mut admin = redis.admin();
    assert_eq!(entries(&mut admin, "bob:webhook:inbox").len(), 2);
    assert_eq!(stats(&mut admin).get("routed"), Some(&4));
    assert_eq!(entries(&mut admin, "bridge:unrouted").len(), 0);
}

#[test]
fn unrouted_then_the_default_agent() {
    let redis = Redis::start(&["alice", "bob"]);
    let cfg = redis.config_path();
    redis.write_config(&cfg, json!({"agents": ["alice", "bob"]}));
    let tb = TestBridge::start(&cfg);
    let (st, r) = post(
        tb.addr(),
        "webhook",
        json!({"channel": "nowhere", "sender": "x", "text": "lost?"}),
    );
    assert_eq!(st, 202, "{r}");
    assert_eq!(r["routed_to"], Value::Null);
    assert_eq!(r["stream"], "bridge:unrouted");
    let mut admin = redis.admin();
    let unrouted = entries(&mut admin, "bridge:unrouted");
    assert_eq!(unrouted.len(), 1);
    assert_eq!(field(&unrouted[0], "text"), "lost?");
    assert_eq!(field(&unrouted[0], "source"), "webhook");
    assert_eq!(stats(&mut admin).get("unrouted"), Some(&1));

    redis.write_config(
        &cfg,
        json!({"agents": ["alice", "bob"], "default_agent": "bob"}),
    );
    tb.bridge.reload().unwrap();
    let (st, r) = post(
        tb.addr(),
        "webhook",
        json!({"channel": "nowhere", "sender": "x", "text": "found"}),
    );
    assert_eq!((st, r["routed_to"].clone()), (202, json!("bob")), "{r}");
    assert_eq!(
        field(&entries(&mut admin, "bob:webhook:inbox")[0], "text"),
        "found"
    );
    assert_eq!(entries(&mut admin, "bridge:unrouted").len(), 1);
}

#[test]
fn an_answer_is_delivered_as_the_agent_of_the_key() {
    let redis = Redis::start(&["alice", "bob"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice", "bob"], "webhook": {"deliver": {"c1": sink.url()}}}),
    );
    let _tb = TestBridge::start(&redis.config_path());
    let id = agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "c1"), ("text", "hi"), ("agent", "bob")],
    );
    let got = eventually(WAIT, "the delivery", || sink.bodies().into_iter().next());
    assert_eq!(got["agent"], "alice", "{got}");
    assert_eq!(got["source"], "webhook");
    assert_eq!(got["channel"], "c1");
    assert_eq!(got["text"], "hi");
    assert_eq!(got["id"], id.as_str());
    assert_eq!(
        got["fields"]["agent"], "bob",
        "the payload is passed on, not believed"
    );
    let mut admin = redis.admin();
    eventually(WAIT, "the ack", || {
        (pending(&mut admin, "alice:webhook:outbox") == 0).then_some(())
    });
    eventually(WAIT, "the counter", || {
        (stats(&mut admin).get("delivered") == Some(&1)).then_some(())
    });
    // Bob's outbox is drained too, and an entry without a channel URL nor
    // "*" is dead at once.
    agent_says(
        &redis,
        "bob",
        "webhook",
        &[("channel", "elsewhere"), ("text", "x")],
    );
    let dead = eventually(WAIT, "the dead letter", || {
        entries(&mut admin, "bob:webhook:outbox:dead")
            .into_iter()
            .next()
    });
    assert!(
        field(&dead, "error").contains("no delivery URL"),
        "{dead:?}"
    );
}

#[test]
fn a_failing_sink_is_retried_then_dead_lettered() {
    let redis = Redis::start(&["alice"]);
    let down = Sink::start(SinkMode::Always(503), Duration::ZERO);
    let refusing = Sink::start(SinkMode::Always(400), Duration::ZERO);
    let flaky = Sink::start(SinkMode::FailFirst(2), Duration::ZERO);
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": ["alice"],
            "webhook": {"deliver": {"down": down.url(), "refusing": refusing.url(), "flaky": flaky.url()}},
            "retry": {"attempts": 3, "base_ms": 5, "max_ms": 20},
        }),
    );
    let _tb = TestBridge::start(&redis.config_path());
    let mut admin = redis.admin();
    let dead_key = "alice:webhook:outbox:dead";

    let id = agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "down"), ("text", "a")],
    );
    let dead = eventually(WAIT, "a dead letter", || {
        entries(&mut admin, dead_key).into_iter().next()
    });
    assert_eq!(field(&dead, "original_id"), id);
    assert!(field(&dead, "error").contains("503"), "{dead:?}");
    assert_eq!(field(&dead, "attempts"), "3");
    assert_eq!(field(&dead, "text"), "a");
    assert_eq!(down.requests.load(std::sync::atomic::Ordering::SeqCst), 3);

    // A 4xx is permanent: one try.
    agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "refusing"), ("text", "b")],
    );
    eventually(WAIT, "a second dead letter", || {
        (entries(&mut admin, dead_key).len() == 2).then_some(())
    });
    assert_eq!(
        refusing.requests.load(std::sync::atomic::Ordering::SeqCst),
        1
    );

    // Two failures, then delivered: retried, not dead.
    agent_says(
        &redis,
        "alice",
        "webhook",
        &[("channel", "flaky"), ("text", "c")],
    );
    let got = eventually(WAIT, "the flaky delivery", || {
        flaky.bodies().into_iter().next()
    });
    assert_eq!(got["text"], "c");
    eventually(WAIT, "the counters", || {
        let s = stats(&mut admin);
        let want = [("delivered", 1), ("dead", 2), ("retried", 4)];
        want.iter().all(|(k, v)| s.get(*k) == Some(v)).then_some(())
    });
    eventually(WAIT, "every ack", || {
        (pending(&mut admin, "alice:webhook:outbox") == 0).then_some(())
    });
}

#[test]
fn bad_requests_are_refused_and_nothing_is_written() {
    let redis = Redis::start(&["alice"]);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice", "webhook": {"max_body": 1000}}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let addr = tb.addr();
    let good = json!({"channel": "c", "sender": "s", "text": "t"}).to_string();
    // (status, method, path, token, body, what the error message says)
    type Case<'a> = (u16, &'a str, String, Option<&'a str>, String, &'a str);
    let cases: Vec<Case> = vec![
        (
            401,
            "POST",
            "/in/webhook".into(),
            None,
            good.clone(),
            "missing bearer token",
        ),
        (
            401,
            "POST",
            "/in/webhook".into(),
            Some("nope"),
            good.clone(),
            "wrong bearer token",
        ),
        (
            401,
            "POST",
            "/in/webhook".into(),
            Some(&TOKEN[1..]),
            good.clone(),
            "wrong bearer token",
        ),
        (
            400,
            "POST",
            "/in/webhook".into(),
            Some(TOKEN),
            "{not json".into(),
            "bad body",
        ),
        (
            400,
            "POST",
            "/in/webhook".into(),
            Some(TOKEN),
            r#"{"channel": "c", "text": "t"}"#.into(),
            "missing field `sender`",
        ),
        (
            400,
            "POST",
            "/in/webhook".into(),
            Some(TOKEN),
            r#"{"channel": "c", "sender": "s", "text": 5}"#.into(),
            "bad body",
        ),
        (
            404,
            "POST",
            "/in/sms".into(),
            Some(TOKEN),
            good.clone(),
            "unknown source",
        ),
        (
            404,
            "POST",
            "/other".into(),
            Some(TOKEN),
            good.clone(),
            "POST to /in/<source>",
        ),
        (
            405,
            "GET",
            "/in/webhook".into(),
            Some(TOKEN),
            String::new(),
            "use POST",
        ),
        (
            413,
            "POST",
            "/in/webhook".into(),
            Some(TOKEN),
            format!(
                r#"{{"channel": "c", "sender": "s", "text": "{}"}}"#,
                "x".repeat(2000)
            ),
            "larger than",
        ),
    ];
    for (status, method, path, token, body, message) in cases {
        let (st, r) = http(addr, method, &path, token, &body);
        assert_eq!(st, status, "{method} {path} {body:.60}: {r}");
        let err = r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message: {r}"));
        assert!(err.contains(message), "{err:?} should say {message:?}");
    }
    let mut admin = redis.admin();
    let keys = admin.cmd(&["KEYS", "*:inbox"]).strings();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(entries(&mut admin, "bridge:unrouted").len(), 0);
    assert!(stats(&mut admin).is_empty());
    // And the right request still works.
    let (st, r) = post(
        addr,
        "webhook",
        json!({"channel": "c", "sender": "s", "text": "t"}),
    );
    assert_eq!((st, r["routed_to"].clone()), (202, json!("alice")), "{r}");
}

#[test]
fn redis_down_is_a_503_not_a_pretence() {
    let mut redis = Redis::start(&["alice"]);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice"}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let (st, _) = post(
        tb.addr(),
        "webhook",
        json!({"channel": "c", "sender": "s", "text": "ok"}),
    );
    assert_eq!(st, 202);
    redis.kill();
    let (st, r) = post(
        tb.addr(),
        "webhook",
        json!({"channel": "c", "sender": "s", "text": "lost?"}),
    );
    assert_eq!(st, 503, "{r}");
    assert!(r["error"].as_str().unwrap().contains("not taken"), "{r}");
}

#[test]
fn sigkill_in_the_middle_of_1000_deliveries_loses_none() {
    let redis = Redis::start(&["alice"]);
    // Slow enough that the kill lands mid-way.
    let sink = Sink::start(SinkMode::Ok, Duration::from_millis(2));
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "webhook": {"listen": format!("127.0.0.1:{}", free_port()), "deliver": {"*": sink.url()}}}),
    );
    let mut alice = redis.agent("alice");
    for i in 0..1000 {
        let text = format!("m{i}");
        alice.send(&words(&format!(
            "XADD alice:webhook:outbox * channel c text {text}"
        )));
    }
    for _ in 0..1000 {
        let id = alice.read();
        assert!(id.text().is_some(), "XADD gave {id:?}");
    }
    let log = redis.dir.path().join("bridge.log");
    let first = BridgeProcess::spawn(&redis.config_path(), &log);
    eventually(WAIT, "some deliveries", || {
        (sink.bodies().len() >= 100).then_some(())
    });
    first.signal(Signal::SIGKILL);
    drop(first);
    let before = sink.bodies().len();
    assert!(
        before < 1000,
        "the kill came too late to prove anything ({before})"
    );

    let second = BridgeProcess::spawn(&redis.config_path(), &log);
    let mut admin = redis.admin();
    let want: HashSet<String> = entries(&mut admin, "alice:webhook:outbox")
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(want.len(), 1000);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen: HashSet<String> = sink
            .bodies()
            .iter()
            .filter_map(|b| b["id"].as_str().map(String::from))
            .collect();
        if want.is_subset(&seen) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of 1000 entries delivered; bridge log:\n{}",
            want.intersection(&seen).count(),
            second.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eventually(WAIT, "every entry acknowledged", || {
        (pending(&mut admin, "alice:webhook:outbox") == 0).then_some(())
    });
    assert!(
        second.log().contains("are delivered again"),
        "the second bridge found no pending entry:\n{}",
        second.log()
    );
    assert!(sink.bodies().iter().all(|b| b["agent"] == "alice"));
    // A clean exit on SIGTERM.
    second.signal(Signal::SIGTERM);
    let mut second = second;
    let status = second.child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{}", second.log());
}

#[test]
fn a_route_and_an_agent_added_at_runtime_need_no_restart() {
    let redis = Redis::start(&["alice", "bob"]);
    let sink = Sink::start(SinkMode::Ok, Duration::ZERO);
    let port = free_port();
    let members = |with_bob: bool| {
        let mut m = json!({
            "agents": ["alice"],
            "webhook": {"listen": format!("127.0.0.1:{port}"), "deliver": {"*": sink.url()}},
        });
        if with_bob {
            m["agents"] = json!(["alice", "bob"]);
            m["routes"] = json!([{"source": "webhook", "channel": "c2", "agent": "bob"}]);
        }
        m
    };
    let cfg = redis.config_path();
    redis.write_config(&cfg, members(false));
    let log = redis.dir.path().join("bridge.log");
    let bridge = BridgeProcess::spawn(&cfg, &log);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let msg = json!({"channel": "c2", "sender": "s", "text": "for bob"});
    let (st, r) = eventually(WAIT, "the listener", || {
        std::net::TcpStream::connect(addr).ok()?;
        Some(post(addr, "webhook", msg.clone()))
    });
    assert_eq!((st, r["routed_to"].clone()), (202, Value::Null), "{r}");
    // Bob writes before he is an agent of the bridge: his entry waits.
    let id = agent_says(
        &redis,
        "bob",
        "webhook",
        &[("channel", "c2"), ("text", "from bob")],
    );

    redis.write_config(&cfg, members(true));
    bridge.signal(Signal::SIGHUP);
    let r = eventually(WAIT, "the new route", || {
        let (st, r) = post(addr, "webhook", msg.clone());
        assert_eq!(st, 202, "{r}\n{}", bridge.log());
        (r["routed_to"] == "bob").then_some(r)
    });
    assert_eq!(r["stream"], "bob:webhook:inbox");
    let got = eventually(WAIT, "bob's entry delivered", || {
        sink.bodies().into_iter().find(|b| b["id"] == id.as_str())
    });
    assert_eq!(got["agent"], "bob");
    assert!(
        bridge.log().contains("configuration reloaded"),
        "{}",
        bridge.log()
    );
    let mut admin = redis.admin();
    assert_eq!(entries(&mut admin, "bob:webhook:inbox").len(), 1);
}
