//! What an agent may send through its lane, and how it is rewritten.
//!
//! Pure functions over a parsed [`Command`]: no I/O, no state. The proxy's
//! allowlist is about *commands*; which *keys* an agent may touch is
//! Redis's ACL's job (`agent_<name>` is scoped to `~<name>:*:inbox` and
//! `%W~<name>:*:outbox`). The two overlap on purpose: the ACL alone would
//! stop most things, the proxy alone would stop the commands that change
//! the connection itself (AUTH, HELLO AUTH, RESET, CLIENT, MULTI,
//! SUBSCRIBE, MONITOR, SELECT), which no ACL rule can express per socket.
//!
//! Forwarded (Redis's ACL then decides on keys):
//!
//! | command | why |
//! |---|---|
//! | XADD | sending; `<source>:outbox` is mapped to `<agent>:<source>:outbox` |
//! | XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM | consuming the inbox, recovering a crashed consumer's entries |
//! | XGROUP CREATE, CREATECONSUMER, DELCONSUMER, SETID | managing the agent's own consumer group |
//! | XREAD, XRANGE, XREVRANGE, XLEN | harmless reads; the ACL answers NOPERM outside the agent's keys |
//! | XINFO STREAM, GROUPS, CONSUMERS | inspection of the agent's streams |
//! | PING, ECHO, COMMAND, ACL WHOAMI | connection checks, client-library introspection, identity |
//! | `HELLO`, `HELLO <protover>` | protocol negotiation only (RESP3 for clients that want it) |
//!
//! Answered by the proxy: QUIT (`+OK`, then close), CLIENT SETINFO (`+OK`,
//! sent by redis-py 5 and others at connect). Everything else is refused
//! with `-NOPERM` and never reaches Redis.

use crate::resp::{error_reply, Command};
use oxidepm_lanes::{AgentName, StreamKey};
use std::borrow::Cow;

/// What the proxy does with one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Re-encode the command as parsed and send it upstream.
    Forward,
    /// Send these arguments upstream instead.
    Rewrite(Vec<Vec<u8>>),
    /// Answer the client with this reply; nothing goes upstream.
    Reply(Cow<'static, [u8]>),
    /// Answer, then close the connection once earlier replies are out.
    ReplyAndClose(Cow<'static, [u8]>),
}

/// The per-agent facts the filter needs.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// The agent's name (the lane's identity; already validated).
    pub agent: &'a AgentName,
    /// Cap every XADD with `MAXLEN ~ <n>`.
    pub maxlen: Option<u64>,
}

const OK: &[u8] = b"+OK\r\n";

/// Decides what to do with `cmd`, sent on `policy.agent`'s lane.
pub fn decide(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    let mut name_buf = [0u8; 16];
    let name = upper(cmd.arg(0), &mut name_buf);
    match name {
        b"XADD" => xadd(cmd, policy),
        b"XREADGROUP" | b"XACK" | b"XPENDING" | b"XCLAIM" | b"XAUTOCLAIM" | b"XREAD"
        | b"XRANGE" | b"XREVRANGE" | b"XLEN" | b"PING" | b"ECHO" | b"COMMAND" => Verdict::Forward,
        b"XINFO" => subcommand(cmd, "XINFO", &[b"STREAM", b"GROUPS", b"CONSUMERS"]),
        b"XGROUP" => subcommand(
            cmd,
            "XGROUP",
            &[b"CREATE", b"CREATECONSUMER", b"DELCONSUMER", b"SETID"],
        ),
        b"ACL" => subcommand(cmd, "ACL", &[b"WHOAMI"]),
        b"HELLO" => {
            if cmd.len() <= 2 {
                Verdict::Forward
            } else {
                refuse(
                    "HELLO with AUTH or SETNAME is not allowed on an agent lane; \
                     the lane is already authenticated (send HELLO or HELLO <protover>)",
                )
            }
        }
        b"QUIT" => Verdict::ReplyAndClose(Cow::Borrowed(OK)),
        b"CLIENT" => {
            let mut sub_buf = [0u8; 16];
            if upper(cmd.arg(1), &mut sub_buf) == b"SETINFO" {
                Verdict::Reply(Cow::Borrowed(OK))
            } else {
                refuse("CLIENT commands are not allowed on an agent lane")
            }
        }
        b"AUTH" => refuse(
            "AUTH is not allowed on an agent lane; \
             the connection is authenticated by the socket it came in on",
        ),
        b"RESET" => refuse("RESET is not allowed on an agent lane"),
        b"MULTI" | b"EXEC" | b"DISCARD" | b"WATCH" | b"UNWATCH" => {
            refuse("transactions (MULTI/EXEC/DISCARD/WATCH) are not allowed on an agent lane")
        }
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

/// XADD: map the shared outbox form and apply the MAXLEN cap.
fn xadd(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    let key = cmd.arg(1);
    let mapped = StreamKey::own_outbox(policy.agent, key);
    let Some(cap) = policy.maxlen else {
        return match mapped {
            None => Verdict::Forward,
            Some(k) => {
                let mut args: Vec<Vec<u8>> = cmd.args().map(<[u8]>::to_vec).collect();
                args[1] = k;
                Verdict::Rewrite(args)
            }
        };
    };
    if cmd.len() < 2 {
        return Verdict::Forward;
    }
    let mut args: Vec<Vec<u8>> = cmd.args().map(<[u8]>::to_vec).collect();
    if let Some(k) = mapped {
        args[1] = k;
    }
    // Options come between the key and the ID, in any order.
    let mut i = 2;
    let mut trimmed = false;
    while i < args.len() {
        let mut buf = [0u8; 16];
        match upper(&args[i], &mut buf) {
            b"NOMKSTREAM" => i += 1,
            b"MINID" => {
                return Verdict::Reply(Cow::Owned(error_reply(&format!(
                    "ERR XADD MINID cannot be used on this lane: its streams are capped \
                     with MAXLEN {cap}"
                ))))
            }
            b"MAXLEN" => {
                trimmed = true;
                i += 1;
                if matches!(args.get(i).map(Vec::as_slice), Some(b"=" | b"~")) {
                    i += 1;
                }
                if let Some(t) = args.get(i) {
                    let over = match parse_u64(t) {
                        Some(n) => n > cap,
                        None => false, // Redis answers the syntax error
                    };
                    if over {
                        args[i] = cap.to_string().into_bytes();
                    }
                }
                i += 1;
            }
            b"LIMIT" => i += 2,
            _ => break,
        }
    }
    if !trimmed {
        let at = 2;
        args.splice(
            at..at,
            [
                b"MAXLEN".to_vec(),
                b"~".to_vec(),
                cap.to_string().into_bytes(),
            ],
        );
    }
    Verdict::Rewrite(args)
}

/// The ASCII upper case of `s` in `buf`; a name longer than `buf` gives an
/// empty slice (no command or subcommand we know is that long).
fn upper<'b>(s: &[u8], buf: &'b mut [u8; 16]) -> &'b [u8] {
    if s.len() > buf.len() {
        return &[];
    }
    for (d, c) in buf.iter_mut().zip(s) {
        *d = c.to_ascii_uppercase();
    }
    &buf[..s.len()]
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A command name for an error message: printable ASCII, at most 40 chars.
fn printable(s: &[u8]) -> String {
    s.iter()
        .take(40)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{encode_args, CommandParser, Limits};

    fn run(args: &[&str], maxlen: Option<u64>) -> Verdict {
        let mut buf = Vec::new();
        encode_args(&mut buf, args);
        let mut p = CommandParser::new(Limits::default());
        assert_eq!(p.parse(&buf).unwrap(), Some(buf.len()));
        let cmd = p.command(&buf);
        let alice: AgentName = "alice".parse().unwrap();
        decide(
            &cmd,
            &Policy {
                agent: &alice,
                maxlen,
            },
        )
    }

    fn refused(v: &Verdict) -> bool {
        matches!(v, Verdict::Reply(r) if r.starts_with(b"-NOPERM "))
    }

    fn rewritten(v: Verdict) -> Vec<String> {
        match v {
            Verdict::Rewrite(a) => a
                .into_iter()
                .map(|x| String::from_utf8(x).unwrap())
                .collect(),
            other => panic!("not rewritten: {other:?}"),
        }
    }

    #[test]
    fn stream_commands_pass() {
        for c in [
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "STREAMS",
                "alice:discord:inbox",
                ">",
            ][..],
            &["xack", "alice:discord:inbox", "g", "1-1"],
            &["XPENDING", "k", "g"],
            &["XRANGE", "k", "-", "+"],
            &["XLEN", "k"],
            &["XINFO", "stream", "k"],
            &["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"],
            &["PING"],
            &["echo", "x"],
            &["ACL", "whoami"],
            &["HELLO"],
            &["HELLO", "3"],
            &["COMMAND", "DOCS"],
            &["XADD", "alice:discord:outbox", "*", "a", "b"],
        ] {
            assert_eq!(run(c, None), Verdict::Forward, "{c:?}");
        }
    }

    #[test]
    fn connection_changing_commands_are_refused() {
        for c in [
            &["AUTH", "bridge", "pw"][..],
            &["AUTH", "pw"],
            &["HELLO", "3", "AUTH", "bridge", "pw"],
            &["HELLO", "2", "SETNAME", "x"],
            &["RESET"],
            &["CLIENT", "KILL", "ID", "1"],
            &["CLIENT", "SETNAME", "x"],
            &["client", "tracking", "on"],
            &["MULTI"],
            &["EXEC"],
            &["DISCARD"],
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
            &["DEL", "k"],
            &["INFO"],
            &["AVeryLongCommandNameThatIsLongerThanSixteen"],
        ] {
            assert!(refused(&run(c, None)), "{c:?} was not refused");
        }
    }

    #[test]
    fn quit_and_client_setinfo_are_answered_locally() {
        assert_eq!(
            run(&["QUIT"], None),
            Verdict::ReplyAndClose(Cow::Borrowed(b"+OK\r\n"))
        );
        assert_eq!(
            run(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"], None),
            Verdict::Reply(Cow::Borrowed(b"+OK\r\n"))
        );
    }

    #[test]
    fn refusal_names_the_command_printably() {
        let Verdict::Reply(r) = run(&["FOO\r\nBAR"], None) else {
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
            rewritten(run(&["XADD", "discord:outbox", "*", "text", "hi"], None)),
            ["XADD", "alice:discord:outbox", "*", "text", "hi"]
        );
        // Already per-agent, or not an outbox, or odd: untouched.
        for k in [
            "alice:discord:outbox",
            "bob:discord:outbox",
            ":outbox",
            "outbox",
            "discord:inbox",
            "a:b:c:outbox",
        ] {
            assert_eq!(
                run(&["XADD", k, "*", "a", "b"], None),
                Verdict::Forward,
                "{k}"
            );
        }
    }

    #[test]
    fn maxlen_cap_is_added_or_lowered() {
        assert_eq!(
            rewritten(run(&["XADD", "discord:outbox", "*", "a", "b"], Some(100))),
            [
                "XADD",
                "alice:discord:outbox",
                "MAXLEN",
                "~",
                "100",
                "*",
                "a",
                "b"
            ]
        );
        assert_eq!(
            rewritten(run(
                &[
                    "XADD",
                    "k",
                    "NOMKSTREAM",
                    "MAXLEN",
                    "=",
                    "5000",
                    "*",
                    "a",
                    "b"
                ],
                Some(100)
            )),
            [
                "XADD",
                "k",
                "NOMKSTREAM",
                "MAXLEN",
                "=",
                "100",
                "*",
                "a",
                "b"
            ]
        );
        assert_eq!(
            rewritten(run(
                &["XADD", "k", "maxlen", "10", "*", "a", "b"],
                Some(100)
            )),
            ["XADD", "k", "maxlen", "10", "*", "a", "b"]
        );
        assert_eq!(
            rewritten(run(
                &["XADD", "k", "MAXLEN", "~", "900", "LIMIT", "10", "*", "a", "b"],
                Some(100)
            )),
            ["XADD", "k", "MAXLEN", "~", "100", "LIMIT", "10", "*", "a", "b"]
        );
        let v = run(&["XADD", "k", "MINID", "0-1", "*", "a", "b"], Some(100));
        assert!(matches!(v, Verdict::Reply(r) if r.starts_with(b"-ERR XADD MINID")));
    }
}
