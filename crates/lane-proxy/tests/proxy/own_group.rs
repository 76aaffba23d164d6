//! What a stream consumer does with its group through a lane: create it
//! at start (BUSYGROUP when it exists), recover a dead consumer's
//! entries; all only on the agent's own inboxes and in its own group.

use super::harness::{ok, Client, Value};
use super::{alice, group};
use oxidepm_testkit::words;

const INBOX: &str = "alice:webhook:inbox";

/// The names of the groups of `key`, as `sys` sees them (none if `key`
/// does not exist).
fn groups(admin: &mut Client, key: &str) -> Vec<String> {
    match admin.cmd(&["XINFO", "GROUPS", key]) {
        Value::Array(list) => list
            .iter()
            .map(|g| match g {
                Value::Array(kv) => kv
                    .chunks(2)
                    .find(|kv| kv[0].text().as_deref() == Some("name"))
                    .and_then(|kv| kv[1].text())
                    .unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        v if v.error_starts("ERR no such key") => Vec::new(),
        other => panic!("XINFO GROUPS {key}: {other:?}"),
    }
}

#[test]
fn creating_the_own_group_at_start_is_the_usual_busygroup() {
    let (redis, proxy) = alice();
    // The daemon made it already.
    group(&redis, INBOX, "0");
    let mut a = proxy.client("alice");
    let r = a.cmd(&["XGROUP", "CREATE", INBOX, "alice", "$", "MKSTREAM"]);
    assert!(r.error_starts("BUSYGROUP"), "{r:?}");
    // An inbox the daemon has not made yet: the agent makes it.
    let fresh = "alice:discord:inbox";
    let made = a.cmd(&["XGROUP", "CREATE", fresh, "alice", "$", "MKSTREAM"]);
    assert_eq!(made, ok());
    assert_eq!(groups(&mut redis.admin(), fresh), ["alice"]);
    assert_eq!(
        a.cmd(&["XGROUP", "SETID", fresh, "alice", "0"]),
        ok(),
        "its own group's position is its own"
    );
}

#[test]
fn another_group_an_outbox_or_another_agents_inbox_is_refused_and_nothing_made() {
    let (redis, proxy) = alice();
    group(&redis, INBOX, "0");
    let mut a = proxy.client("alice");
    for c in [
        words(&format!("XGROUP CREATE {INBOX} evil $")),
        words(&format!("XGROUP CREATE {INBOX} bridge 0")),
        words("XGROUP CREATE alice:webhook:outbox alice $ MKSTREAM"),
        words("XGROUP CREATE bob:webhook:inbox alice $ MKSTREAM"),
        words("XGROUP CREATE alice:other:inbox alice $ MKSTREAM"),
        words(&format!("XGROUP CREATECONSUMER {INBOX} evil c")),
        words(&format!("XGROUP SETID {INBOX} evil 0")),
        words(&format!("XREADGROUP GROUP evil c STREAMS {INBOX} >")),
        words(&format!(
            "XREADGROUP GROUP alice c STREAMS {INBOX} bob:webhook:inbox > >"
        )),
        words("XAUTOCLAIM alice:webhook:outbox alice c 0 0"),
        words(&format!("XCLAIM {INBOX} bridge c 0 0-1")),
    ] {
        let r = a.cmd(&c);
        assert!(r.error_starts("NOPERM"), "{c:?}: {r:?}");
    }
    let mut admin = redis.admin();
    assert_eq!(groups(&mut admin, INBOX), ["alice"]);
    for key in [
        "alice:webhook:outbox",
        "bob:webhook:inbox",
        "alice:other:inbox",
    ] {
        assert_eq!(admin.cmd(&["EXISTS", key]), Value::Int(0), "{key}");
    }
    let consumers = admin.cmd(&["XINFO", "CONSUMERS", INBOX, "alice"]);
    assert_eq!(consumers, Value::Array(Vec::new()));
}

#[test]
fn a_dead_consumers_entries_are_claimed_by_the_next() {
    let (redis, proxy) = alice();
    group(&redis, INBOX, "0");
    let mut bridge = redis.bridge();
    for text in ["one", "two"] {
        bridge.cmd(&["XADD", INBOX, "*", "text", text]);
    }
    // Consumer "old" reads both and dies before acknowledging.
    let mut old = proxy.client("alice");
    let got = old.cmd(&["XREADGROUP", "GROUP", "alice", "old", "STREAMS", INBOX, ">"]);
    assert!(got.strings().contains(&"two".to_string()), "{got:?}");
    drop(old);
    // Its successor, under a new name, takes them over.
    let mut new = proxy.client("alice");
    let claimed = new.cmd(&["XAUTOCLAIM", INBOX, "alice", "new", "0", "0", "COUNT", "1"]);
    let strings = claimed.strings();
    assert!(strings.contains(&"one".to_string()), "{claimed:?}");
    let pending = new.cmd(&["XPENDING", INBOX, "alice", "-", "+", "10", "old"]);
    let Value::Array(left) = &pending else {
        panic!("{pending:?}")
    };
    let Value::Array(entry) = &left[0] else {
        panic!("{pending:?}")
    };
    let id = entry[0].text().unwrap();
    let taken = new.cmd(&["XCLAIM", INBOX, "alice", "new", "0", &id]);
    assert!(taken.strings().contains(&"two".to_string()), "{taken:?}");
    let first = strings[1].clone();
    assert_eq!(
        new.cmd(&["XACK", INBOX, "alice", &first, &id]),
        Value::Int(2)
    );
    let summary = redis.admin().cmd(&["XPENDING", INBOX, "alice"]);
    assert!(
        matches!(&summary, Value::Array(p) if p[0] == Value::Int(0)),
        "{summary:?}"
    );
}
