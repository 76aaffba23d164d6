//! The discord source against the local stand-in of Discord's gateway and
//! REST API (reached through `gateway_url` and `api_url`, the production
//! code path) and a real redis-server with the daemon's ACL.

use crate::harness::*;
use oxidepm_discord_standin::{wait, Msg, StandIn, BOT_NAME};
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

pub(super) const BOT_TOKEN: &str = "discord-test-token.abc";
pub(super) const CHANNEL: u64 = 1_300_000_000_000_000_111;

pub(super) type Entry = (String, HashMap<String, String>);

/// Redis with alice and bob, the stand-in, and the bridge routing
/// `CHANNEL` to alice.
fn setup() -> (Redis, StandIn, TestBridge) {
    let (redis, standin, tb) = start(BOT_TOKEN);
    assert!(standin.wait_connected(WAIT), "the bridge never identified");
    (redis, standin, tb)
}

/// As [`setup`], with `token` in the bridge's token file, not waiting.
fn start(token: &str) -> (Redis, StandIn, TestBridge) {
    let redis = Redis::start(&["alice", "bob"]);
    let standin = StandIn::start(BOT_TOKEN).unwrap();
    standin.allow_channel(CHANNEL);
    let token_file = redis.dir.path().join("discord_token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": ["alice", "bob"],
            "sources": ["webhook", "email", "discord"],
            "routes": [{"source": "discord", "channel": CHANNEL.to_string(), "agent": "alice"}],
            "discord": {
                "token_file": token_file,
                "gateway_url": standin.gateway_url(),
                "api_url": standin.api_url(),
            },
        }),
    );
    let tb = TestBridge::start(&redis.config_path());
    (redis, standin, tb)
}

pub(super) fn inbox(redis: &Redis, agent: &str) -> Vec<Entry> {
    entries(&mut redis.agent(agent), &format!("{agent}:discord:inbox"))
}

pub(super) fn texts(v: &[Entry]) -> Vec<String> {
    v.iter().map(|e| e.1["text"].clone()).collect()
}

/// Waits until alice's inbox holds `n` entries, and returns them.
pub(super) fn inbox_of(redis: &Redis, n: usize) -> Vec<Entry> {
    let mut last = Vec::new();
    let ok = wait(WAIT, || {
        last = inbox(redis, "alice");
        last.len() >= n
    });
    assert!(ok, "alice's inbox has {:?}, not {n} entries", texts(&last));
    last
}

pub(super) fn agent_says(redis: &Redis, fields: &[(&str, &str)]) -> String {
    let mut cmd = vec!["XADD", "alice:discord:outbox", "*"];
    for (k, v) in fields {
        cmd.push(k);
        cmd.push(v);
    }
    redis.agent("alice").cmd(&cmd).text().expect("an entry id")
}

#[test]
fn a_message_reaches_its_agent_once_across_reconnects() {
    let (redis, standin, _tb) = setup();
    let mut first = Msg::new(CHANNEL, "hello alice");
    first.reply_to = Some(77);
    first.attachments = vec!["https://cdn.example/a.png".into()];
    let id = standin.send_message(&first);
    let got = inbox_of(&redis, 1);
    let e = &got[0].1;
    assert_eq!(e["source"], "discord");
    assert_eq!(e["channel"], CHANNEL.to_string());
    assert_eq!(e["guild"], oxidepm_discord_standin::GUILD.to_string());
    assert_eq!(e["sender"], "someone");
    assert_eq!(e["sender_id"], first.author_id.to_string());
    assert_eq!(e["text"], "hello alice");
    assert_eq!(e["external_id"], id.to_string());
    assert_eq!(e["reply_to"], "77");
    assert_eq!(e["attachments"], "https://cdn.example/a.png");

    // The gateway asks for a reconnect; the RESUME replays what the bridge
    // has already taken, as a gateway may.
    standin.set_resume_overlap(5);
    standin.force_reconnect();
    assert!(standin.wait_connected(WAIT));
    standin.send_message(&Msg::new(CHANNEL, "second"));
    // The connection is lost without a word; a message sent meanwhile is
    // replayed by the RESUME.
    standin.drop_connection();
    standin.send_message(&Msg::new(CHANNEL, "while away"));
    assert!(standin.wait_connected(WAIT));
    // The same message id again (a replay of a replay).
    let mut again = Msg::new(CHANNEL, "hello alice");
    again.id = Some(id);
    standin.send_message(&again);
    standin.send_message(&Msg::new(CHANNEL, "last"));
    // Messages are published in the order received: once "last" is in,
    // any duplicate would be before it.
    let got = inbox_of(&redis, 4);
    assert_eq!(texts(&got), ["hello alice", "second", "while away", "last"]);
    let (identifies, resumes) = standin.sessions_started();
    assert_eq!(identifies, 1, "resumed, never identified again");
    assert!(resumes >= 2, "{resumes} resumes");
    // A direct message has no guild and no route: it is kept, unrouted.
    let mut dm = Msg::new(42, "a DM");
    dm.guild = None;
    standin.send_message(&dm);
    let mut admin = redis.admin();
    assert!(wait(WAIT, || entries(&mut admin, "bridge:unrouted").len() == 1));
    let un = entries(&mut admin, "bridge:unrouted");
    assert_eq!(un[0].1["text"], "a DM");
    assert!(!un[0].1.contains_key("guild"));
}

#[test]
fn an_answer_is_posted_as_the_bot_split_and_in_order_and_its_echo_ignored() {
    let (redis, standin, _tb) = setup();
    let words: String = (0..700).map(|i| format!("w{i:04} ")).collect();
    let long = &words[..3000];
    agent_says(
        &redis,
        &[
            ("channel", &CHANNEL.to_string()),
            ("text", long),
            ("reply_to", "99"),
        ],
    );
    assert!(
        wait(WAIT, || standin.posts().len() >= 2),
        "{:?}",
        standin.posts()
    );
    let posts = standin.posts();
    assert_eq!(posts.len(), 2);
    assert!(posts.iter().all(|p| p.channel == CHANNEL));
    assert!(posts.iter().all(|p| p.content.chars().count() <= 2000));
    assert_eq!(format!("{}{}", posts[0].content, posts[1].content), long);
    assert_eq!(posts[0].reply_to.as_deref(), Some("99"));
    assert_eq!(posts[1].reply_to, None);
    assert_ne!(posts[0].nonce, posts[1].nonce);
    let mut admin = redis.admin();
    assert!(wait(WAIT, || stats(&mut admin).get("delivered") == Some(&1)));

    // The posts came back on the gateway as the bot's; another bot writes
    // too; then a person. Only the person's message is taken.
    let mut other_bot = Msg::new(CHANNEL, "I am a bot");
    other_bot.bot = true;
    other_bot.author = "otherbot".into();
    standin.send_message(&other_bot);
    standin.send_message(&Msg::new(CHANNEL, "a person"));
    let got = inbox_of(&redis, 1);
    assert_eq!(texts(&got), ["a person"]);
    assert!(got.iter().all(|e| e.1["sender"] != BOT_NAME));
}

#[test]
fn a_delivery_tried_again_does_not_post_a_part_twice() {
    let (redis, standin, _tb) = setup();
    // Discord takes the first part, then fails on the second: the entry is
    // delivered again, and its first part, with the same nonce, is not
    // posted a second time.
    standin.fail_after(1, 1);
    let text = format!("{}\n{}", "a".repeat(1500), "b".repeat(1500));
    agent_says(
        &redis,
        &[("channel", &CHANNEL.to_string()), ("text", &text)],
    );
    let mut admin = redis.admin();
    assert!(wait(WAIT, || stats(&mut admin).get("delivered") == Some(&1)));
    let posts = standin.posts();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(format!("{}{}", posts[0].content, posts[1].content), text);
    assert_eq!(stats(&mut admin).get("retried"), Some(&1));
}

#[test]
fn a_bridge_stopped_and_started_again_misses_nothing() {
    let (redis, standin, tb) = setup();
    standin.send_message(&Msg::new(CHANNEL, "before"));
    inbox_of(&redis, 1);
    drop(tb);
    assert!(wait(WAIT, || !standin.connected()));
    standin.send_message(&Msg::new(CHANNEL, "while stopped"));
    let _tb = TestBridge::start(&redis.config_path());
    assert!(standin.wait_connected(WAIT));
    standin.send_message(&Msg::new(CHANNEL, "after"));
    assert_eq!(
        texts(&inbox_of(&redis, 3)),
        ["before", "while stopped", "after"]
    );
    let (identifies, resumes) = standin.sessions_started();
    assert_eq!(identifies, 1, "resumed, not identified again");
    assert!(resumes >= 1);
}

#[test]
fn a_message_received_while_redis_is_away_is_published_when_it_is_back() {
    let (mut redis, standin, _tb) = setup();
    standin.send_message(&Msg::new(CHANNEL, "before"));
    inbox_of(&redis, 1);
    redis.kill();
    standin.send_message(&Msg::new(CHANNEL, "while redis is away"));
    // Long enough for the first tries to fail.
    std::thread::sleep(Duration::from_millis(300));
    let acl = std::fs::read_to_string(redis.dir.path().join("users.acl")).unwrap();
    let _again = KillOnDrop(oxidepm_testkit::redis::private_redis(redis.dir.path(), &acl).0);
    // The new server starts empty: what its inbox holds was published since.
    let got = inbox_of(&redis, 1);
    assert_eq!(texts(&got), ["while redis is away"]);
}

/// A process stopped when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_session_the_gateway_ends_is_identified_again() {
    let (redis, standin, _tb) = setup();
    standin.send_message(&Msg::new(CHANNEL, "before"));
    inbox_of(&redis, 1);
    standin.invalidate_session();
    assert!(standin.wait_connected(WAIT));
    standin.send_message(&Msg::new(CHANNEL, "after"));
    assert_eq!(texts(&inbox_of(&redis, 2)), ["before", "after"]);
    assert_eq!(standin.sessions_started().0, 2);
}

#[test]
fn a_rate_limit_is_waited_out_and_the_message_posted_once() {
    let (redis, standin, _tb) = setup();
    standin.rate_limit_next(1, 0.5);
    agent_says(
        &redis,
        &[("channel", &CHANNEL.to_string()), ("text", "patience")],
    );
    assert!(wait(WAIT, || standin.posts().len() == 1));
    let mut admin = redis.admin();
    assert!(wait(WAIT, || stats(&mut admin).get("delivered") == Some(&1)));
    let limited = standin.rate_limited();
    assert_eq!(limited.len(), 1);
    let posts = standin.posts();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content, "patience");
    // Sent again only once the bucket reset, not before.
    assert!(posts[0].at.duration_since(limited[0]) >= Duration::from_millis(450));
    assert_eq!(stats(&mut admin).get("dead"), None);
}

#[test]
fn what_cannot_be_posted_goes_to_the_dead_stream_with_the_reason() {
    let (redis, standin, _tb) = setup();
    // A channel alice was written from (a DM, say) that the bot may not
    // post to.
    let mut admin = redis.admin();
    admin.cmd(&words(
        "ZADD bridge:discord:channels:alice 1 1300000000000000999",
    ));
    agent_says(
        &redis,
        &[("channel", "1300000000000000999"), ("text", "hi")],
    );
    agent_says(&redis, &[("text", "no channel")]);
    agent_says(
        &redis,
        &[("channel", "general"), ("text", "a name, not an id")],
    );
    let dead = "alice:discord:outbox:dead";
    assert!(wait(WAIT, || entries(&mut admin, dead).len() == 3));
    let got = entries(&mut admin, dead);
    let reasons: Vec<&str> = got.iter().map(|e| e.1["error"].as_str()).collect();
    assert!(reasons[0].contains("403"), "{reasons:?}");
    assert!(reasons[1].contains("no channel"), "{reasons:?}");
    assert!(
        reasons[2].contains("not a Discord channel id"),
        "{reasons:?}"
    );
    assert!(standin.posts().is_empty());
    assert_eq!(pending(&mut admin, "alice:discord:outbox"), 0);
}

#[test]
fn a_refused_token_posts_nothing_and_answers_are_dead_lettered_saying_so() {
    let (redis, standin, _tb) = start("not-the-bot-token");
    agent_says(&redis, &[("channel", &CHANNEL.to_string()), ("text", "hi")]);
    let mut admin = redis.admin();
    let dead = "alice:discord:outbox:dead";
    assert!(wait(WAIT, || entries(&mut admin, dead).len() == 1));
    let got = entries(&mut admin, dead);
    assert!(got[0].1["error"].contains("token"), "{got:?}");
    assert!(!got[0].1["error"].contains("not-the-bot-token"), "{got:?}");
    assert!(standin.posts().is_empty());
    assert_eq!(standin.sessions_started(), (0, 0));
    assert!(!standin.connected());
}
