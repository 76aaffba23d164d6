//! The discord source under faults: a bridge killed with SIGKILL while
//! messages flow, Redis refusing what Discord sends, rate limits.

use crate::discord::{agent_says, inbox_of, texts, BOT_TOKEN, CHANNEL};
use crate::harness::*;
use oxidepm_discord_standin::{wait, Msg, StandIn, GUILD};
use serde_json::{json, Value};
use std::time::Duration;

/// Redis with alice and bob, the stand-in, and the bridge's configuration
/// routing `CHANNEL` to alice with `discord` members over the defaults.
fn setup(discord: Value) -> (Redis, StandIn) {
    let redis = Redis::start(&["alice", "bob"]);
    let standin = StandIn::start(BOT_TOKEN).unwrap();
    standin.allow_channel(CHANNEL);
    let token_file = redis.dir.path().join("discord_token");
    std::fs::write(&token_file, format!("{BOT_TOKEN}\n")).unwrap();
    let mut section = json!({
        "token_file": token_file,
        "gateway_url": standin.gateway_url(),
        "api_url": standin.api_url(),
    });
    if let (Some(s), Value::Object(more)) = (section.as_object_mut(), discord) {
        s.extend(more);
    }
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": ["alice", "bob"],
            "sources": ["webhook", "email", "discord"],
            "routes": [
                {"source": "discord", "channel": CHANNEL.to_string(), "agent": "alice"},
                {"source": "discord", "channel": (CHANNEL + 1).to_string(), "agent": "bob"},
                {"source": "discord", "guild": GUILD.to_string(), "agent": "alice"},
            ],
            "discord": section,
        }),
    );
    (redis, standin)
}

fn say(standin: &StandIn, texts: impl IntoIterator<Item = String>) {
    for t in texts {
        standin.send_message(&Msg::new(CHANNEL, &t));
    }
}

fn numbered(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix} {i}")).collect()
}

#[test]
fn a_bridge_killed_with_sigkill_loses_nothing_and_repeats_nothing() {
    let (redis, standin) = setup(json!({}));
    // A resume replays the last 5 messages the bridge had already taken
    // too, as a gateway may: only what the dead bridge wrote down tells
    // the next one they are in.
    standin.set_resume_overlap(5);
    let log = redis.dir.path().join("bridge.log");
    let first = BridgeProcess::spawn(&redis.config_path(), &log);
    assert!(standin.wait_connected(WAIT), "{}", first.log());
    say(&standin, numbered("before", 0..20));
    // Killed while messages flow: once some are in, not waiting for the
    // rest.
    inbox_of(&redis, 12);
    first.signal(nix::sys::signal::Signal::SIGKILL);
    drop(first);
    assert!(wait(WAIT, || !standin.connected()));
    say(&standin, numbered("while dead", 0..10));
    let second = BridgeProcess::spawn(&redis.config_path(), &log);
    assert!(standin.wait_connected(WAIT), "{}", second.log());
    say(&standin, numbered("after", 0..5));
    let mut want = numbered("before", 0..20);
    want.extend(numbered("while dead", 0..10));
    want.extend(numbered("after", 0..5));
    let got = texts(&inbox_of(&redis, want.len()));
    // Published in the order received: once the last is in, a duplicate
    // of any earlier one would be in too.
    assert_eq!(got, want, "{}", second.log());
    let (identifies, resumes) = standin.sessions_started();
    assert_eq!(identifies, 1, "resumed, never identified again");
    assert!(resumes >= 1);
}

/// How many calls of `command` Redis refused (INFO commandstats).
fn rejected(redis: &Redis, command: &str) -> u64 {
    let info = redis.admin().cmd(&["INFO", "commandstats"]);
    let text = info.text().unwrap_or_default();
    let prefix = format!("cmdstat_{command}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix("rejected_calls="))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_message_redis_does_not_take_is_counted_lost_in_bridge_stats() {
    let (redis, standin) = setup(json!({ "publish_attempts": 2 }));
    let _tb = TestBridge::start(&redis.config_path());
    assert!(standin.wait_connected(WAIT));
    let mut admin = redis.admin();
    // The session's place after READY is saved: from now on, only what
    // becomes of the message makes the source save again.
    assert!(wait(WAIT, || matches!(
        admin.cmd(&["EXISTS", "bridge:discord:session"]),
        oxidepm_testkit::Value::Int(1)
    )));
    // Redis full: every write that would take memory is refused.
    admin.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    admin.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    standin.send_message(&Msg::new(CHANNEL, "into a full redis"));
    // Given up: the source tries to save its place past it (and count it).
    assert!(wait(WAIT, || rejected(&redis, "hset") >= 1));
    let mut admin = redis.admin();
    admin.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(
        wait(WAIT, || stats(&mut admin).get("lost") == Some(&1)),
        "{:?}",
        stats(&mut admin)
    );
    // Given up, not published later; the next one is.
    standin.send_message(&Msg::new(CHANNEL, "later"));
    assert_eq!(texts(&inbox_of(&redis, 1)), ["later"]);
}

#[test]
fn a_global_rate_limit_holds_every_post_back_and_each_is_posted_once() {
    let (redis, standin) = setup(json!({}));
    let other = CHANNEL + 1;
    standin.allow_channel(other);
    let _tb = TestBridge::start(&redis.config_path());
    assert!(standin.wait_connected(WAIT));
    standin.rate_limit_global_next(1, 0.5);
    agent_says(
        &redis,
        &[("channel", &CHANNEL.to_string()), ("text", "patience")],
    );
    assert!(wait(WAIT, || standin.rate_limited().len() == 1));
    // The bridge has read the 429 (and holds every post back) once it
    // counts the wait; the stand-in's record alone comes before that.
    let mut admin = redis.admin();
    assert!(wait(WAIT, || stats(&mut admin).get("waited") >= Some(&1)));
    // Bob answers in another channel meanwhile: the global limit is the
    // bot's, so his post waits too.
    let id = redis.agent("bob").cmd(&[
        "XADD",
        "bob:discord:outbox",
        "*",
        "channel",
        &other.to_string(),
        "text",
        "bob's answer",
    ]);
    assert!(id.text().is_some(), "{id:?}");
    assert!(wait(WAIT, || standin.posts().len() == 2));
    assert!(wait(WAIT, || stats(&mut admin).get("delivered") == Some(&2)));
    let limited = standin.rate_limited();
    assert_eq!(limited.len(), 1, "asked again before the limit was over");
    let posts = standin.posts();
    let mut got: Vec<&str> = posts.iter().map(|p| p.content.as_str()).collect();
    got.sort();
    assert_eq!(got, ["bob's answer", "patience"]);
    for p in &posts {
        assert!(
            p.at.duration_since(limited[0]) >= Duration::from_millis(450),
            "{:?} posted {:?} after the global 429",
            p.content,
            p.at.duration_since(limited[0])
        );
    }
    assert_eq!(stats(&mut admin).get("dead"), None);
}

#[test]
fn a_huge_author_name_is_cut_before_it_is_written() {
    let (redis, standin) = setup(json!({}));
    let _tb = TestBridge::start(&redis.config_path());
    assert!(standin.wait_connected(WAIT));
    let mut m = Msg::new(CHANNEL, "hello");
    m.author = "é".repeat(50_000);
    standin.send_message(&m);
    let got = inbox_of(&redis, 1);
    let sender = &got[0].1["sender"];
    assert!(sender.len() <= 256, "{} bytes", sender.len());
    assert!(sender.starts_with("éé"));
    assert_eq!(got[0].1["text"], "hello");
}

#[test]
fn an_agent_posts_only_to_its_own_channels() {
    let (redis, standin) = setup(json!({}));
    let bobs = CHANNEL + 1;
    let unrouted_channel = CHANNEL + 2;
    for c in [bobs, unrouted_channel] {
        standin.allow_channel(c);
    }
    let _tb = TestBridge::start(&redis.config_path());
    assert!(standin.wait_connected(WAIT));
    // Alice tries to speak as the bot in bob's channel.
    agent_says(
        &redis,
        &[("channel", &bobs.to_string()), ("text", "I am bob's bot")],
    );
    let mut admin = redis.admin();
    let dead = "alice:discord:outbox:dead";
    assert!(wait(WAIT, || entries(&mut admin, dead).len() == 1));
    let got = entries(&mut admin, dead);
    assert!(got[0].1["error"].contains("is not alice's"), "{got:?}");
    assert!(standin.posts().is_empty(), "{:?}", standin.posts());
    // A channel of the server alice's guild route takes: once she was
    // written from it, she may answer there; bob may not.
    standin.send_message(&Msg::new(unrouted_channel, "hi alice"));
    assert_eq!(texts(&inbox_of(&redis, 1)), ["hi alice"]);
    agent_says(
        &redis,
        &[
            ("channel", &unrouted_channel.to_string()),
            ("text", "hello"),
        ],
    );
    redis.agent("bob").cmd(&[
        "XADD",
        "bob:discord:outbox",
        "*",
        "channel",
        &unrouted_channel.to_string(),
        "text",
        "not mine",
    ]);
    assert!(wait(WAIT, || entries(
        &mut admin,
        "bob:discord:outbox:dead"
    )
    .len()
        == 1));
    assert!(wait(WAIT, || stats(&mut admin).get("delivered") == Some(&1)));
    let posts = standin.posts();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].content, "hello");
    assert_eq!(posts[0].channel, unrouted_channel);
}
