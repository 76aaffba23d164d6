//! The one table of lane commands (`oxidepm_lanes::lane_commands`) against
//! what enforces it: Redis's ACL as the daemon writes it, and the proxy's
//! filter. Every command Redis knows is tried.

use super::harness::{Redis, Value};
use super::{alice, group};
use oxidepm_lanes::lane_commands::{find, Scope, LANE_COMMANDS};

const INBOX: &str = "alice:discord:inbox";
const OUTBOX: &str = "alice:discord:outbox";

/// alice's inbox with her group and one entry, as the bridge leaves it.
fn lane(redis: &Redis) {
    let r = redis
        .admin()
        .cmd(&["XGROUP", "CREATE", INBOX, "alice", "0", "MKSTREAM"]);
    assert_eq!(r, Value::Simple("OK".into()));
    group(redis, "bob:discord:inbox", "0");
    redis.bridge().cmd(&["XADD", INBOX, "*", "text", "hi"]);
}

fn is_noperm(v: &Value) -> bool {
    v.error_starts("NOPERM")
}

#[test]
fn the_acl_grants_each_command_of_the_table_on_the_agents_own_keys_only() {
    let redis = Redis::start(&["alice", "bob"]);
    lane(&redis);
    let mut alice = redis.agent("alice");
    for c in LANE_COMMANDS.iter().filter(|c| c.scope != Scope::Proxy) {
        let own = c.example_with(INBOX, OUTBOX, "alice");
        let v = alice.cmd(&own);
        assert!(
            !is_noperm(&v),
            "ACL refused {own:?} to its own agent: {v:?}"
        );
        if matches!(c.scope, Scope::Connection) {
            continue;
        }
        let other = c.example_with("bob:discord:inbox", "bob:discord:outbox", "g");
        let v = alice.cmd(&other);
        assert!(is_noperm(&v), "ACL allowed {other:?} on bob's keys: {v:?}");
    }
    // The commands the proxy answers never reach Redis: the ACL has none.
    for c in LANE_COMMANDS.iter().filter(|c| c.scope == Scope::Proxy) {
        if c.name == "QUIT" {
            continue;
        }
        let v = alice.cmd(&c.example_with(INBOX, OUTBOX, "alice"));
        // (A Redis before 7.2 does not know CLIENT SETINFO at all.)
        assert!(
            is_noperm(&v) || v.error_starts("ERR unknown subcommand"),
            "ACL allows {}: {v:?}",
            c.name
        );
    }
}

#[test]
fn the_proxy_forwards_each_command_of_the_table() {
    let (redis, proxy) = alice();
    lane(&redis);
    let mut a = proxy.client("alice");
    for c in LANE_COMMANDS.iter().filter(|c| c.name != "QUIT") {
        let args = c.example_with(INBOX, OUTBOX, "alice");
        let v = a.cmd(&args);
        assert!(
            !is_noperm(&v) && !v.error_starts("OXIDEPM"),
            "{args:?} refused through the lane: {v:?}"
        );
    }
    let mut q = proxy.client("alice");
    assert_eq!(q.cmd(&["QUIT"]), Value::Simple("OK".into()));
    q.assert_closed();
}

/// Every command (and subcommand) Redis lists, with a key of alice's where
/// it takes one, through the proxy: refused unless the table has it.
#[test]
fn the_proxy_refuses_every_command_the_table_does_not_have() {
    let (redis, proxy) = alice();
    lane(&redis);
    let mut admin = redis.admin();
    let Value::Array(names) = admin.cmd(&["COMMAND", "LIST"]) else {
        panic!("COMMAND LIST")
    };
    let mut a = proxy.client("alice");
    let mut tried = 0;
    for name in names.iter().filter_map(Value::text) {
        let upper = name.to_ascii_uppercase();
        if find(&upper).is_some() {
            // Granted whole, subcommands included (COMMAND DOCS, …).
            continue;
        }
        let mut names = vec![upper.clone()];
        // Subcommands: COMMAND INFO's tenth element lists them.
        if let Value::Array(info) = admin.cmd(&["COMMAND", "INFO", &name]) {
            if let Some(Value::Array(fields)) = info.first() {
                if let Some(Value::Array(subs)) = fields.get(9) {
                    for s in subs {
                        if let Value::Array(f) = s {
                            if let Some(sub) = f.first().and_then(Value::text) {
                                names.push(sub.to_ascii_uppercase().replace('|', " "));
                            }
                        }
                    }
                }
            }
        }
        for full in names {
            if find(&full).is_some()
                || LANE_COMMANDS
                    .iter()
                    .any(|c| c.name.starts_with(&format!("{full} ")))
            {
                continue;
            }
            let mut args: Vec<&str> = full.split(' ').collect();
            args.extend([INBOX, "alice", "x", "0"]);
            let v = a.cmd(&args);
            assert!(is_noperm(&v), "{full} passed the lane: {v:?}");
            tried += 1;
        }
    }
    assert!(tried > 200, "only {tried} commands tried");
}
