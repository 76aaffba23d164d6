//! What an agent may send through its lane, and how it is rewritten.
//!
//! Pure functions over a parsed [`Command`]: no I/O, no state. The proxy's
//! allowlist is about *commands*; which *keys* an agent may touch is
//! Redis's ACL's job (`agent_<name>` is scoped to `~<name>:*:inbox` and
//! `%W~<name>:*:outbox`). The two overlap on purpose: the ACL alone would
//! stop most things, the proxy alone would stop the commands that change
//! the connection itself (AUTH, HELLO AUTH, RESET, CLIENT, SUBSCRIBE,
//! MONITOR, SELECT), which no ACL rule can express per socket, and scopes
//! group commands to the agent's own group (`crate::filter::group_scope`).
//!
//! What is forwarded, what is answered here and where each may act is the
//! table `oxidepm_lanes::lane_commands::LANE_COMMANDS` (below, as generated
//! into `docs/lane-commands.md`); the tests in `tests/proxy/lane_commands.rs` hold
//! this filter to it. XLEN, XPENDING and XINFO of an outbox are refused
//! here: the ACL grants them on the agent's outboxes for the proxy's meter
//! only (see `oxidepm_lanes::acl`), and to the agent its outboxes are
//! write-only.
//!
//! A consumer name (XREADGROUP `GROUP <g> <name>`, XCLAIM, XAUTOCLAIM and
//! XGROUP CREATECONSUMER `<key> <g> <name>`) is memory in Redis that no
//! quota counts: one longer than `limits.max_consumer_name` is refused
//! here with `-OXIDEPM consumer name …`, and the lane admits at most
//! `limits.max_consumers` distinct names (see `crate::lane::consumers`). An
//! XREADGROUP with more than one GROUP clause is refused (Redis would use
//! the last; the proxy counts one name per command).
//!
//! Inside a transaction the commands the proxy answers itself are refused
//! (`crate::conn::transaction`). Everything else is refused with `-NOPERM` and
//! never reaches Redis.
#![doc = ""]
#![doc = include_str!("../../../../docs/lane-commands.md")]

use crate::filter::consumer_arg::{consume, xreadgroup_consumer};
use crate::filter::text::{strip_agent, upper};
use crate::filter::verdict::{Policy, Verdict};
use crate::filter::{group_scope, handshake};
use crate::resp::{error_reply, Command};
use oxidepm_lanes::{Dir, StreamKey};
use std::borrow::Cow;

const OK: &[u8] = b"+OK\r\n";

/// Decides what to do with `cmd`, sent on agent `policy.agent`'s lane.
pub fn decide(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    let mut name_buf = [0u8; 16];
    let name = upper(cmd.arg(0), &mut name_buf);
    if let Some(named) = group_scope::named(cmd) {
        if !(matches!(name, b"XPENDING") && is_outbox(cmd.arg(1))) {
            if let Err(why) = group_scope::check(cmd, &named, policy) {
                return Verdict::Reply(Cow::Owned(error_reply(&why)));
            }
        }
    }
    match name {
        b"XADD" => xadd(cmd, policy),
        b"XLEN" | b"XPENDING" if is_outbox(cmd.arg(1)) => write_only(),
        b"XINFO" if is_outbox(cmd.arg(2)) => write_only(),
        b"XREADGROUP" => match xreadgroup_consumer(cmd) {
            Ok(arg) => consume(cmd, arg, policy),
            Err(why) => Verdict::Reply(Cow::Owned(error_reply(why))),
        },
        // Redis's arity: with fewer arguments it refuses, creating nothing.
        b"XCLAIM" | b"XAUTOCLAIM" => consume(cmd, (cmd.len() >= 6).then_some(3), policy),
        b"XACK" | b"XPENDING" | b"XREAD" | b"XRANGE" | b"XREVRANGE" | b"XLEN" | b"PING"
        | b"ECHO" | b"COMMAND" => Verdict::Forward,
        b"XINFO" => subcommand(cmd, "XINFO", &[b"STREAM", b"GROUPS", b"CONSUMERS"]),
        b"XGROUP" => {
            let mut sub_buf = [0u8; 16];
            match upper(cmd.arg(1), &mut sub_buf) {
                b"CREATECONSUMER" => consume(cmd, (cmd.len() == 5).then_some(4), policy),
                b"DELCONSUMER" => Verdict::DelConsumer,
                _ => subcommand(cmd, "XGROUP", &[b"CREATE", b"SETID"]),
            }
        }
        b"ACL" => subcommand(cmd, "ACL", &[b"WHOAMI"]),
        b"HELLO" => handshake::hello(cmd),
        b"INFO" => Verdict::Info,
        b"QUIT" => Verdict::ReplyAndClose(Cow::Borrowed(OK)),
        b"CLIENT" => handshake::client(cmd),
        b"AUTH" => refuse(
            "AUTH is not allowed on an agent lane; \
             the connection is authenticated by the socket it came in on",
        ),
        b"RESET" => refuse("RESET is not allowed on an agent lane"),
        // With arguments Redis answers an arity error and neither opens
        // nor ends a transaction: nor does the proxy.
        b"MULTI" if cmd.len() == 1 => Verdict::Multi,
        b"EXEC" if cmd.len() == 1 => Verdict::Exec,
        b"DISCARD" if cmd.len() == 1 => Verdict::Discard,
        b"MULTI" | b"EXEC" | b"DISCARD" => Verdict::Forward,
        b"UNWATCH" => Verdict::Forward,
        b"WATCH" => match group_scope::check_watch(cmd, policy) {
            Ok(()) => Verdict::Forward,
            Err(why) => Verdict::Reply(Cow::Owned(error_reply(&why))),
        },
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE"
        | b"SUNSUBSCRIBE" => {
            refuse("pub/sub is not available on an agent lane; lanes carry streams")
        }
        b"SELECT" => refuse("SELECT is not allowed on an agent lane; lanes use database 0"),
        _ => Verdict::Reply(Cow::Owned(error_reply(&format!(
            "NOPERM '{}' is not allowed on an agent lane",
            printable(cmd.arg(0))
        )))),
    }
}

fn refuse(reason: &'static str) -> Verdict {
    Verdict::Reply(Cow::Owned(error_reply(&format!("NOPERM {reason}"))))
}

/// Forwards `cmd` when its subcommand is one of `allowed`.
fn subcommand(cmd: &Command<'_>, name: &str, allowed: &[&[u8]]) -> Verdict {
    let mut buf = [0u8; 16];
    let sub = upper(cmd.arg(1), &mut buf);
    if allowed.contains(&sub) {
        Verdict::Forward
    } else {
        Verdict::Reply(Cow::Owned(error_reply(&format!(
            "NOPERM '{} {}' is not allowed on an agent lane",
            name,
            printable(cmd.arg(1))
        ))))
    }
}

/// Whether `key` names an outbox (or an outbox's dead letters) of anyone.
fn is_outbox(key: &[u8]) -> bool {
    key.windows(7).any(|w| w == b":outbox")
}

fn write_only() -> Verdict {
    refuse("an agent's outboxes are write-only on its lane (XADD only)")
}

/// XADD: only to the agent's own outbox of a known family (the shared form
/// `<family>:outbox` is mapped to it); trimming options stay the agent's
/// own business, on its own outbox, but `LIMIT` is refused: it exists to
/// leave a stream longer than asked.
fn xadd(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    if cmd.len() < 2 {
        // Redis answers the arity error.
        return Verdict::Forward;
    }
    let given = cmd.arg(1);
    let mapped = StreamKey::own_outbox(policy.agent, given);
    let key = mapped.as_deref().unwrap_or(given);
    let Some(family) = own_outbox_family(key, policy) else {
        let list: Vec<String> = policy
            .families
            .iter()
            .map(|f| StreamKey::outbox(policy.agent, f).to_string())
            .collect();
        return Verdict::Reply(Cow::Owned(error_reply(&format!(
            "NOPERM XADD to '{}' is not allowed: agent '{}' may append only to its outboxes ({})",
            printable(key),
            policy.agent,
            if list.is_empty() {
                "none are configured".to_string()
            } else {
                list.join(", ")
            }
        ))));
    };
    // Options come between the key and the ID, in any order.
    let mut i = 2;
    while i < cmd.len() {
        let mut buf = [0u8; 16];
        match upper(cmd.arg(i), &mut buf) {
            b"NOMKSTREAM" => i += 1,
            b"MAXLEN" | b"MINID" => {
                i += 1;
                if matches!(cmd.arg(i), b"=" | b"~") {
                    i += 1;
                }
                i += 1;
            }
            b"LIMIT" => {
                return Verdict::Reply(Cow::Owned(error_reply(
                    "OXIDEPM XADD LIMIT is not accepted on an agent lane: it leaves a stream \
                     longer than its MAXLEN or MINID; send XADD without LIMIT",
                )))
            }
            _ => break,
        }
    }
    Verdict::Append {
        family,
        key: mapped,
    }
}

/// The index of the family of `key` when it is `policy.agent`'s outbox of
/// one of `policy.families` (compared as bytes: this runs for every XADD).
fn own_outbox_family(key: &[u8], policy: &Policy<'_>) -> Option<usize> {
    let family = strip_agent(key, policy.agent.as_str())?
        .strip_suffix(Dir::Outbox.as_str().as_bytes())?
        .strip_suffix(b":")?;
    policy.families.iter().position(|f| f.as_bytes() == family)
}

/// An argument for an error message (see [`crate::resp::printable`]).
fn printable(s: &[u8]) -> String {
    crate::resp::printable(s, 40)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::resp::{encode_args, CommandParser, Limits};
    use oxidepm_lanes::AgentName;
    use oxidepm_testkit::words;

    /// What the filter decides for `args`, sent on alice's lane (consumer
    /// names of at most 8 bytes).
    pub(crate) fn run<A: AsRef<[u8]>>(args: &[A]) -> Verdict {
        let mut buf = Vec::new();
        encode_args(&mut buf, args);
        let mut p = CommandParser::new(Limits::default());
        assert_eq!(p.parse(&buf).unwrap(), Some(buf.len()));
        let cmd = p.command(&buf);
        let alice: AgentName = "alice".parse().unwrap();
        let families = ["discord".to_string(), "ops".to_string()];
        decide(
            &cmd,
            &Policy {
                agent: &alice,
                families: &families,
                max_consumer_name: 8,
                responder: false,
                reply_maxlen: 0,
                reply_max_bytes: 0,
            },
        )
    }

    fn refused(v: &Verdict) -> bool {
        matches!(v, Verdict::Reply(r) if r.starts_with(b"-NOPERM "))
    }

    fn appended(v: Verdict) -> (usize, Option<String>) {
        match v {
            Verdict::Append { family, key } => (family, key.map(|k| String::from_utf8(k).unwrap())),
            other => panic!("not an append: {other:?}"),
        }
    }

    #[test]
    fn stream_commands_pass() {
        for c in [
            words("xack alice:discord:inbox alice 1-1"),
            words("XPENDING alice:discord:inbox alice"),
            words("XRANGE k - +"),
            words("XLEN k"),
            words("XINFO stream k"),
            words("XGROUP CREATE alice:ops:inbox alice $ MKSTREAM"),
            words("UNWATCH"),
            words("MULTI x"),
            words("exec x"),
            words("DISCARD x"),
            words("PING"),
            words("echo x"),
            words("ACL whoami"),
            words("COMMAND DOCS"),
        ] {
            assert_eq!(run(&c), Verdict::Forward, "{c:?}");
        }
        assert_eq!(
            appended(run(&["XADD", "alice:discord:outbox", "*", "a", "b"])),
            (0, None)
        );
        assert_eq!(
            appended(run(&["xadd", "alice:ops:outbox", "*", "a", "b"])),
            (1, None)
        );
    }

    #[test]
    fn connection_changing_commands_are_refused() {
        for c in [
            &["AUTH", "bridge", "pw"][..],
            &["AUTH", "pw"],
            &["HELLO", "3", "AUTH", "bridge", "pw"],
            &["RESET"],
            &["CLIENT", "KILL", "ID", "1"],
            &["client", "tracking", "on"],
            &["WATCH", "k"],
            &["SUBSCRIBE", "c"],
            &["PSUBSCRIBE", "*"],
            &["SSUBSCRIBE", "c"],
            &["UNSUBSCRIBE"],
            &["MONITOR"],
            &["SYNC"],
            &["PSYNC", "?", "-1"],
            &["SELECT", "1"],
            &["KEYS", "*"],
            &["SCAN", "0"],
            &["CONFIG", "GET", "*"],
            &["EVAL", "return 1", "0"],
            &["FLUSHALL"],
            &["ACL", "LIST"],
            &["ACL", "SETUSER", "x"],
            &["XINFO", "HELP"],
            &["XGROUP", "DESTROY", "k", "g"],
            &["XDEL", "k", "1-1"],
            &["XTRIM", "k", "MAXLEN", "0"],
            &["MEMORY", "USAGE", "alice:discord:outbox"],
            &["DEL", "k"],
            &["AVeryLongCommandNameThatIsLongerThanSixteen"],
        ] {
            assert!(refused(&run(c)), "{c:?} was not refused");
        }
    }

    #[test]
    fn outboxes_are_write_only() {
        for c in [
            &["XLEN", "alice:discord:outbox"][..],
            &["XPENDING", "alice:discord:outbox", "bridge"],
            &["XINFO", "GROUPS", "alice:discord:outbox"],
            &["XINFO", "STREAM", "alice:discord:outbox:dead"],
            &["XLEN", "bob:discord:outbox"],
        ] {
            assert!(refused(&run(c)), "{c:?} was not refused");
        }
    }

    #[test]
    fn quit_and_client_setinfo_are_answered_locally() {
        assert_eq!(
            run(&["QUIT"]),
            Verdict::ReplyAndClose(Cow::Borrowed(b"+OK\r\n"))
        );
        assert_eq!(
            run(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
            Verdict::Reply(Cow::Borrowed(b"+OK\r\n"))
        );
    }

    #[test]
    fn refusal_names_the_command_printably() {
        let Verdict::Reply(r) = run(&["FOO\r\nBAR"]) else {
            panic!()
        };
        assert_eq!(
            &r[..],
            b"-NOPERM 'FOO??BAR' is not allowed on an agent lane\r\n"
        );
    }

    #[test]
    fn shared_outbox_form_is_mapped() {
        assert_eq!(
            appended(run(&["XADD", "discord:outbox", "*", "text", "hi"])),
            (0, Some("alice:discord:outbox".to_string()))
        );
    }

    #[test]
    fn xadd_elsewhere_is_refused() {
        for k in [
            "bob:discord:outbox",
            "alice:email:outbox",
            "email:outbox",
            "alice:discord:inbox",
            "alice:discord:outbox:dead",
            ":outbox",
            "outbox",
            "a:b:c:outbox",
            "alice:*:outbox",
        ] {
            let v = run(&["XADD", k, "*", "a", "b"]);
            assert!(refused(&v), "{k}: {v:?}");
        }
        let Verdict::Reply(r) = run(&["XADD", "alice:x:outbox", "*", "a", "b"]) else {
            panic!()
        };
        assert!(
            String::from_utf8_lossy(&r)
                .contains("its outboxes (alice:discord:outbox, alice:ops:outbox)"),
            "{r:?}"
        );
    }

    #[test]
    fn trimming_passes_but_limit_is_refused() {
        for c in [
            words("XADD alice:ops:outbox MAXLEN ~ 10 * a b"),
            words("XADD alice:ops:outbox NOMKSTREAM MINID 0-1 * a b"),
            words("XADD alice:ops:outbox * LIMIT 1"),
        ] {
            assert_eq!(appended(run(&c)), (1, None), "{c:?}");
        }
        for c in [
            words("XADD alice:ops:outbox MAXLEN ~ 5 LIMIT 1 * a b"),
            words("XADD ops:outbox MINID ~ 0-1 limit 0 * a b"),
        ] {
            let v = run(&c);
            assert!(
                matches!(&v, Verdict::Reply(r) if r.starts_with(b"-OXIDEPM XADD LIMIT")),
                "{c:?}: {v:?}"
            );
        }
    }
}
