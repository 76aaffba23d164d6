//! Which streams and which consumer group an agent's group commands and
//! WATCH may name. Pure, like the filter that calls it
//! (`crate::filter::agent`).
//!
//! Redis's ACL scopes keys, not groups: `agent_<name>` may touch every
//! group of its inboxes, and its ACL grants the meter's reads on its
//! outboxes. So the proxy narrows the group commands (XREADGROUP, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM, XGROUP CREATE / CREATECONSUMER /
//! DELCONSUMER / SETID) to the agent's own inboxes of the configured
//! families and to its own group, named like the agent
//! (`OXIDEPM_GROUP`): another group on its inbox may be the daemon's or a
//! tool's, and an outbox's groups are the bridge's.

use crate::filter::text::{strip_agent, upper};
use crate::filter::verdict::Policy;
use crate::resp::Command;
use oxidepm_lanes::{Dir, StreamKey};

/// Where a group command names its stream and its group.
#[derive(Debug, PartialEq, Eq)]
pub struct Named {
    /// Indices of the stream keys among the command's arguments.
    pub keys: Vec<usize>,
    /// The index of the group name, if the command has one.
    pub group: Option<usize>,
}

/// The stream keys and group of a group command, where Redis reads them;
/// `None` when `cmd` is not one (or too short for Redis to run: Redis
/// then answers its own arity or syntax error, and runs nothing).
pub fn named(cmd: &Command<'_>) -> Option<Named> {
    let mut buf = [0u8; 16];
    let at = |key: usize, group: usize| {
        (cmd.len() > group).then(|| Named {
            keys: vec![key],
            group: Some(group),
        })
    };
    match upper(cmd.arg(0), &mut buf) {
        b"XACK" | b"XPENDING" | b"XCLAIM" | b"XAUTOCLAIM" => at(1, 2),
        b"XGROUP" => {
            let mut sub = [0u8; 16];
            match upper(cmd.arg(1), &mut sub) {
                b"CREATE" | b"CREATECONSUMER" | b"DELCONSUMER" | b"SETID" => at(2, 3),
                _ => None,
            }
        }
        b"XREADGROUP" => xreadgroup(cmd),
        _ => None,
    }
}

/// XREADGROUP's group (`GROUP <g> <c>`) and its streams: the first half
/// of what follows `STREAMS`.
fn xreadgroup(cmd: &Command<'_>) -> Option<Named> {
    let mut group = None;
    let mut i = 1;
    while i < cmd.len() {
        let mut buf = [0u8; 16];
        match upper(cmd.arg(i), &mut buf) {
            b"BLOCK" | b"COUNT" => i += 2,
            b"NOACK" => i += 1,
            b"GROUP" => {
                group = Some(i + 1);
                i += 3;
            }
            b"STREAMS" => {
                let rest = cmd.len() - i - 1;
                if rest == 0 || !rest.is_multiple_of(2) {
                    return None;
                }
                let keys = (i + 1..i + 1 + rest / 2).collect();
                return Some(Named { keys, group });
            }
            _ => return None,
        }
    }
    None
}

/// Checks a group command's streams and group: `Err` is the refusal's
/// text (a `NOPERM` naming what is allowed).
pub fn check(cmd: &Command<'_>, named: &Named, policy: &Policy<'_>) -> Result<(), String> {
    for &k in &named.keys {
        let key = cmd.arg(k);
        if !is_own(key, Dir::Inbox, policy) {
            return Err(format!(
                "NOPERM '{}' on '{}' is not allowed: agent '{}' may use consumer groups only \
                 on its inboxes ({})",
                printable(cmd.arg(0)),
                printable(key),
                policy.agent,
                own_list(Dir::Inbox, policy)
            ));
        }
    }
    if let Some(g) = named.group {
        let group = cmd.arg(g);
        if group != policy.agent.as_str().as_bytes() {
            return Err(format!(
                "NOPERM group '{}' is not allowed: agent '{}' may use only its own consumer \
                 group, '{}' (OXIDEPM_GROUP)",
                printable(group),
                policy.agent,
                policy.agent
            ));
        }
    }
    Ok(())
}

/// WATCH: every key must be the agent's own inbox or outbox (of a
/// configured family).
pub fn check_watch(cmd: &Command<'_>, policy: &Policy<'_>) -> Result<(), String> {
    for key in cmd.args().skip(1) {
        if !is_own(key, Dir::Inbox, policy) && !is_own(key, Dir::Outbox, policy) {
            return Err(format!(
                "NOPERM WATCH of '{}' is not allowed: agent '{}' may watch only its inboxes ({}) \
                 and outboxes ({})",
                printable(key),
                policy.agent,
                own_list(Dir::Inbox, policy),
                own_list(Dir::Outbox, policy)
            ));
        }
    }
    Ok(())
}

/// Whether `key` is `<agent>:<family>:<dir>` for a configured family.
fn is_own(key: &[u8], dir: Dir, policy: &Policy<'_>) -> bool {
    let family = strip_agent(key, policy.agent.as_str())
        .and_then(|r| r.strip_suffix(dir.as_str().as_bytes()))
        .and_then(|r| r.strip_suffix(b":"));
    family.is_some_and(|f| policy.families.iter().any(|c| c.as_bytes() == f))
}

fn own_list(dir: Dir, policy: &Policy<'_>) -> String {
    if policy.families.is_empty() {
        return "none are configured".to_string();
    }
    policy
        .families
        .iter()
        .map(|f| match dir {
            Dir::Inbox => StreamKey::inbox(policy.agent, f).to_string(),
            Dir::Outbox => StreamKey::outbox(policy.agent, f).to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An argument for an error message (see [`crate::resp::printable`]).
fn printable(s: &[u8]) -> String {
    crate::resp::printable(s, 60)
}

#[cfg(test)]
mod tests {
    use crate::filter::agent::tests::run;
    use crate::filter::verdict::Verdict;
    use oxidepm_testkit::words;

    fn refused_with<A: AsRef<[u8]> + std::fmt::Debug>(args: &[A], text: &str) {
        let v = run(args);
        assert!(
            matches!(&v, Verdict::Reply(r) if r.starts_with(b"-NOPERM ")
                && String::from_utf8_lossy(r).contains(text)),
            "{args:?}: {v:?}"
        );
    }

    #[test]
    fn group_commands_need_own_inbox_and_own_group() {
        const IN: &str = "alice:discord:inbox";
        for c in [
            &["XACK", IN, "alice", "1-1"][..],
            &["XPENDING", IN, "alice"],
            &["XGROUP", "CREATE", IN, "alice", "$", "MKSTREAM"],
            &["xgroup", "setid", "alice:ops:inbox", "alice", "0"],
        ] {
            assert_eq!(run(c), Verdict::Forward, "{c:?}");
        }
        let streams = words(&format!(
            "XREADGROUP GROUP alice c STREAMS {IN} alice:ops:inbox > >"
        ));
        assert_eq!(run(&streams), Verdict::Consume { arg: 3 });
        assert_eq!(
            run(&["XCLAIM", IN, "alice", "c", "0", "1-1"]),
            Verdict::Consume { arg: 3 }
        );
        for (c, text) in [
            (words(&format!("XACK {IN} g 1-1")), "group 'g'"),
            (
                words(&format!("XGROUP CREATE {IN} bridge $")),
                "group 'bridge'",
            ),
            (
                words("XGROUP CREATE alice:discord:outbox alice $"),
                "on 'alice:discord:outbox'",
            ),
            (words("XGROUP CREATE bob:discord:inbox alice $"), "bob"),
            (words("XGROUP CREATE alice:email:inbox alice $"), "email"),
            (
                words(&format!("XAUTOCLAIM {IN} other c 0 0")),
                "group 'other'",
            ),
            (words("XCLAIM bob:ops:inbox alice c 0 1-1"), "bob"),
            (words(&format!("XGROUP DELCONSUMER {IN} g c")), "group 'g'"),
            (
                words(&format!(
                    "XREADGROUP GROUP alice c STREAMS {IN} bob:discord:inbox > >"
                )),
                "bob:discord:inbox",
            ),
        ] {
            refused_with(&c, text);
        }
    }

    #[test]
    fn watch_only_own_keys() {
        assert_eq!(
            run(&["WATCH", "alice:discord:inbox", "alice:ops:outbox"]),
            Verdict::Forward
        );
        refused_with(
            &["WATCH", "alice:discord:inbox", "bob:discord:inbox"],
            "bob",
        );
        refused_with(&["WATCH", "alice:email:outbox"], "alice:email:outbox");
        refused_with(&["WATCH", "alice:ops:outbox:dead"], "dead");
    }
}
