//! The bridge's connection after Redis restarts: made again by itself
//! before the next message needs it, so the first webhook post after
//! Redis is back is taken, not answered 503.

use super::harness::*;
use serde_json::json;

#[test]
fn the_first_post_after_redis_is_back_is_taken() {
    let mut redis = Redis::start(&["alice"]);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice"}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let msg = |text: &str| json!({"channel": "c", "sender": "s", "text": text});
    assert_eq!(post(tb.addr(), "webhook", msg("before")).0, 202);
    redis.restart();
    // The bridge's shared connection is made again without any message
    // having asked for it: its keepalive is among Redis's clients (the
    // outbox readers have connections of their own).
    let mut admin = redis.admin();
    eventually(WAIT, "the bridge's shared connection again", || {
        admin.cmd(&["CLIENT", "LIST"]).text().is_some_and(|list| {
            list.lines()
                .any(|l| l.contains("user=bridge") && l.contains("cmd=ping"))
        })
    });
    let (code, body) = post(tb.addr(), "webhook", msg("after"));
    assert_eq!(code, 202, "{body}");
    let got = entries(&mut redis.admin(), "alice:webhook:inbox");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1["text"], "after");
}
