//! What a responder may send through its lane (the proxy's responder
//! mode; the contract is `oxidepm_lanes::responder`).
//!
//! Pure, like `crate::filter::agent`, whose connection-level rules it
//! shares (HELLO, CLIENT, INFO, QUIT, AUTH, RESET, MULTI/EXEC). On keys it
//! is stricter than the ACL of `resp_<name>`, which it doubles: every
//! stream command names only outboxes `<agent>:<name>:outbox` and the
//! group `<name>`; the only write is XADD to an inbox `<agent>:<name>:inbox`
//! with the ID `*` and a `request_id`, and it becomes [`Verdict::Answer`]:
//! sent as the script of `crate::conn::answer`, which appends it only if the
//! request it names is pending, and acknowledges that request with it. No
//! MKSTREAM: a responder makes no key (the daemon made its
//! group on every agent's outbox).

use crate::filter::consumer_arg::xreadgroup_consumer;
use crate::filter::handshake;
use crate::filter::text::upper;
use crate::filter::verdict::{Policy, Verdict};
use crate::resp::{error_reply, Command};
use oxidepm_lanes::responder::{group, is_entry_id, REQUEST_ID_FIELDS};
use oxidepm_lanes::{Dir, StreamKey};
use std::borrow::Cow;

const OK: &[u8] = b"+OK\r\n";

/// The most fields a reply may have: it runs as a script, which passes its
/// fields on to XADD, and Lua passes on only so many values at once.
pub const MAX_REPLY_FIELDS: usize = 1000;

/// Decides what to do with `cmd`, sent on responder `policy.agent`'s lane.
pub fn decide(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    let name = policy.agent.as_str();
    let mut name_buf = [0u8; 16];
    // A command naming a consumer is admitted by the lane's count of
    // consumer names (`crate::lane::consumers`), as on an agent's lane.
    let checked = |keys: &[usize], grp: Option<usize>, consumer: Option<usize>| match check(
        cmd, policy, keys, grp, consumer,
    ) {
        Ok(()) => consumer.map_or(Verdict::Forward, |arg| Verdict::Consume { arg }),
        Err(why) => refuse(&why),
    };
    match upper(cmd.arg(0), &mut name_buf) {
        b"XADD" => answer(cmd, name, policy.reply_maxlen, policy.reply_max_bytes),
        b"XREADGROUP" => xreadgroup(cmd, policy),
        b"XACK" | b"XPENDING" if cmd.len() >= 3 => checked(&[1], Some(2), None),
        // Redis's arity: with fewer arguments it refuses, creating nothing.
        b"XCLAIM" | b"XAUTOCLAIM" if cmd.len() >= 6 => checked(&[1], Some(2), Some(3)),
        b"XCLAIM" | b"XAUTOCLAIM" if cmd.len() >= 3 => checked(&[1], Some(2), None),
        b"XLEN" | b"XRANGE" if cmd.len() >= 2 => checked(&[1], None, None),
        b"XINFO" if cmd.len() >= 3 => {
            let mut sub = [0u8; 16];
            match upper(cmd.arg(1), &mut sub) {
                b"STREAM" | b"GROUPS" => checked(&[2], None, None),
                _ => not_here(cmd),
            }
        }
        b"XGROUP" if cmd.len() >= 4 => {
            let mut sub = [0u8; 16];
            match upper(cmd.arg(1), &mut sub) {
                b"CREATE" => {
                    if cmd
                        .args()
                        .skip(4)
                        .any(|a| a.eq_ignore_ascii_case(b"MKSTREAM"))
                    {
                        return refuse(
                            "NOPERM XGROUP CREATE … MKSTREAM is not allowed on a responder lane: \
                             a responder makes no key (its group is made on every agent's outbox \
                             by the daemon)",
                        );
                    }
                    checked(&[2], Some(3), None)
                }
                b"CREATECONSUMER" if cmd.len() == 5 => checked(&[2], Some(3), Some(4)),
                _ => not_here(cmd),
            }
        }
        b"PING" | b"ECHO" | b"COMMAND" | b"UNWATCH" => Verdict::Forward,
        b"ACL" => {
            let mut sub = [0u8; 16];
            match upper(cmd.arg(1), &mut sub) {
                b"WHOAMI" => Verdict::Forward,
                _ => not_here(cmd),
            }
        }
        b"HELLO" => handshake::hello(cmd),
        b"INFO" => Verdict::Info,
        b"QUIT" => Verdict::ReplyAndClose(Cow::Borrowed(OK)),
        b"CLIENT" => handshake::client(cmd),
        b"MULTI" if cmd.len() == 1 => Verdict::Multi,
        b"EXEC" if cmd.len() == 1 => Verdict::Exec,
        b"DISCARD" if cmd.len() == 1 => Verdict::Discard,
        b"MULTI" | b"EXEC" | b"DISCARD" => Verdict::Forward,
        _ => not_here(cmd),
    }
}

fn refuse(why: &str) -> Verdict {
    Verdict::Reply(Cow::Owned(error_reply(why)))
}

fn not_here(cmd: &Command<'_>) -> Verdict {
    refuse(&format!(
        "NOPERM '{}' is not allowed on a responder lane: a responder reads and acknowledges \
         its outboxes and appends replies to the asking agents' inboxes",
        printable(cmd.arg(0))
    ))
}

fn printable(s: &[u8]) -> String {
    crate::resp::printable(s, 40)
}

/// The agent whose `dir` stream of this responder `key` is, if it is one.
fn lane_key(key: &[u8], name: &str, dir: Dir) -> Option<StreamKey> {
    let k: StreamKey = std::str::from_utf8(key).ok()?.parse().ok()?;
    (k.family == name && k.dir == dir).then_some(k)
}

/// Every key at `keys` is an outbox of this responder, the group at `grp`
/// is its own and the consumer at `consumer` is short enough.
fn check(
    cmd: &Command<'_>,
    policy: &Policy<'_>,
    keys: &[usize],
    grp: Option<usize>,
    consumer: Option<usize>,
) -> Result<(), String> {
    let name = policy.agent.as_str();
    for &i in keys {
        if lane_key(cmd.arg(i), name, Dir::Outbox).is_none() {
            return Err(format!(
                "NOPERM '{}' is not an outbox of responder '{name}': a responder reads only \
                 <agent>:{name}:outbox",
                printable(cmd.arg(i))
            ));
        }
    }
    if let Some(g) = grp {
        if cmd.arg(g) != group(name).as_bytes() {
            return Err(format!(
                "NOPERM group '{}' is not responder '{name}''s: use the group '{}'",
                printable(cmd.arg(g)),
                group(name)
            ));
        }
    }
    if let Some(c) = consumer {
        let len = cmd.arg(c).len();
        if len > policy.max_consumer_name {
            return Err(format!(
                "OXIDEPM consumer name: {len} bytes is longer than the {} bytes a consumer name \
                 may have (lanes.limits.max_consumer_name); use a shorter name",
                policy.max_consumer_name
            ));
        }
    }
    Ok(())
}

/// XREADGROUP: its group and consumer, and every stream after STREAMS.
fn xreadgroup(cmd: &Command<'_>, policy: &Policy<'_>) -> Verdict {
    let consumer = match xreadgroup_consumer(cmd) {
        Ok(Some(c)) => c,
        // Redis refuses the options, reading nothing.
        Ok(None) => return Verdict::Forward,
        Err(why) => return refuse(why),
    };
    let Some(streams) = cmd.args().position(|a| a.eq_ignore_ascii_case(b"STREAMS")) else {
        return Verdict::Forward;
    };
    let rest = cmd.len() - streams - 1;
    if rest == 0 || !rest.is_multiple_of(2) {
        // Redis answers the syntax error.
        return Verdict::Forward;
    }
    let keys: Vec<usize> = (streams + 1..streams + 1 + rest / 2).collect();
    match check(cmd, policy, &keys, Some(consumer - 1), Some(consumer)) {
        Ok(()) => Verdict::Consume { arg: consumer },
        Err(why) => refuse(&why),
    }
}

/// XADD: a reply, to an inbox of this responder, with the ID `*`, a
/// `MAXLEN` of at most `maxlen` and fields of at most `max_bytes`; the
/// request it names, if any, must be an entry ID.
fn answer(cmd: &Command<'_>, name: &str, maxlen: u64, max_bytes: usize) -> Verdict {
    if cmd.len() < 2 {
        return Verdict::Forward;
    }
    let Some(to) = lane_key(cmd.arg(1), name, Dir::Inbox) else {
        return refuse(&format!(
            "NOPERM XADD to '{}' is not allowed: responder '{name}' appends only replies to \
             <agent>:{name}:inbox, for the agent whose request it answers",
            printable(cmd.arg(1))
        ));
    };
    let fields = match id_at(cmd, maxlen) {
        Ok(i) => i + 1,
        Err(refusal) => return refusal,
    };
    if fields >= cmd.len() || !(cmd.len() - fields).is_multiple_of(2) {
        // Redis answers the arity error.
        return Verdict::Forward;
    }
    if let Err(refusal) = fits(cmd, fields, max_bytes) {
        return refusal;
    }
    let outbox = StreamKey::outbox(&to.agent, name);
    match request_of(cmd, fields, &outbox) {
        Ok(request) => Verdict::Answer {
            outbox: outbox.to_string(),
            request,
        },
        Err(refusal) => refusal,
    }
}

/// Where the ID `*` of reply `cmd` is, after its options (`NOMKSTREAM`,
/// and a `MAXLEN` of at most `maxlen`, which every reply gives).
fn id_at(cmd: &Command<'_>, maxlen: u64) -> Result<usize, Verdict> {
    let mut i = 2;
    let mut capped = false;
    while i < cmd.len() {
        let mut buf = [0u8; 16];
        match upper(cmd.arg(i), &mut buf) {
            b"NOMKSTREAM" => i += 1,
            b"MAXLEN" => {
                i += 1;
                if matches!(cmd.arg(i), b"=" | b"~") {
                    i += 1;
                }
                capped = std::str::from_utf8(cmd.arg(i))
                    .ok()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n <= maxlen);
                i += 1;
            }
            b"*" => break,
            _ => {
                return Err(refuse(&format!(
                    "NOPERM XADD '{}' on a responder lane: give the ID * (optionally after \
                     NOMKSTREAM and MAXLEN [~] <n>)",
                    printable(cmd.arg(i))
                )))
            }
        }
    }
    if !capped {
        return Err(refuse(&format!(
            "OXIDEPM reply: give MAXLEN ~ <n> with n at most {maxlen} \
             (lanes.responder_inbox_maxlen), e.g. XADD {} MAXLEN ~ {maxlen} * …: every reply \
             caps the inbox it goes to",
            printable(cmd.arg(1))
        )));
    }
    Ok(i)
}

/// The fields of reply `cmd`, from argument `fields` on, are at most
/// `max_bytes` and [`MAX_REPLY_FIELDS`].
fn fits(cmd: &Command<'_>, fields: usize, max_bytes: usize) -> Result<(), Verdict> {
    // Without it a responder holding one request pending could fill that
    // agent's inbox with MAXLEN replies of a whole command each.
    let bytes: usize = (fields..cmd.len()).map(|f| cmd.arg(f).len()).sum();
    if bytes > max_bytes {
        return Err(refuse(&format!(
            "OXIDEPM reply: {bytes} bytes of fields is more than the {max_bytes} a reply may \
             have (lanes.responder_reply_max_bytes); send less, or split it"
        )));
    }
    let pairs = (cmd.len() - fields) / 2;
    if pairs > MAX_REPLY_FIELDS {
        return Err(refuse(&format!(
            "OXIDEPM reply: {pairs} fields is more than the {MAX_REPLY_FIELDS} a reply may \
             have; put the data in fewer fields"
        )));
    }
    Ok(())
}

/// The request reply `cmd` answers, named by its fields (from argument
/// `fields` on) as an entry id of `outbox`, the asking agent's.
fn request_of(cmd: &Command<'_>, fields: usize, outbox: &StreamKey) -> Result<Vec<u8>, Verdict> {
    let mut request: Option<&[u8]> = None;
    for f in (fields..cmd.len()).step_by(2) {
        if REQUEST_ID_FIELDS.iter().any(|n| n.as_bytes() == cmd.arg(f)) {
            let id = cmd.arg(f + 1);
            if !is_entry_id(id) {
                return Err(refuse(&format!(
                    "OXIDEPM reply: {} '{}' is not an entry id; give the id of the request \
                     (the entry of {} read with XREADGROUP)",
                    printable(cmd.arg(f)),
                    printable(id),
                    outbox
                )));
            }
            if request.is_some_and(|r| r != id) {
                return Err(refuse(
                    "OXIDEPM reply: request_id and re name different requests; give one",
                ));
            }
            request = Some(id);
        }
    }
    // Without it, one pending request would let a responder write any
    // number of replies nobody asked for.
    let Some(request) = request else {
        return Err(refuse(&format!(
            "NOPERM reply refused: a reply names the request it answers; give request_id \
             <id> with the id of the entry of {} you read with XREADGROUP",
            outbox
        )));
    };
    // `<ms>` alone is `<ms>-0` to XACK but every `<ms>-*` to XPENDING: a
    // reply naming `5` would pass on a pending `5-3` and acknowledge
    // nothing, again and again.
    let mut request = request.to_vec();
    if !request.contains(&b'-') {
        request.extend_from_slice(b"-0");
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{encode_args, CommandParser, Limits};
    use oxidepm_lanes::AgentName;
    use oxidepm_testkit::words;

    fn run<A: AsRef<[u8]>>(args: &[A]) -> Verdict {
        let mut buf = Vec::new();
        encode_args(&mut buf, args);
        let mut p = CommandParser::new(Limits::default());
        assert_eq!(p.parse(&buf).unwrap(), Some(buf.len()));
        let cmd = p.command(&buf);
        let echo: AgentName = "echo".parse().unwrap();
        decide(
            &cmd,
            &Policy {
                agent: &echo,
                families: &[],
                max_consumer_name: 8,
                responder: true,
                reply_maxlen: 1000,
                reply_max_bytes: 64,
            },
        )
    }

    fn refused(v: &Verdict) -> bool {
        matches!(v, Verdict::Reply(r) if r.starts_with(b"-"))
    }

    #[test]
    fn reads_its_outboxes_with_its_group_only() {
        for ok in [
            words("XREADGROUP GROUP echo c1 COUNT 5 BLOCK 100 STREAMS alice:echo:outbox bob:echo:outbox > >"),
            words("XACK alice:echo:outbox echo 1-0"),
            words("XPENDING alice:echo:outbox echo"),
            words("XAUTOCLAIM alice:echo:outbox echo c1 0 0"),
            words("XGROUP CREATE alice:echo:outbox echo 0"),
            words("XINFO GROUPS alice:echo:outbox"),
            words("PING"),
        ] {
            let v = run(&ok);
            assert!(
                matches!(v, Verdict::Forward | Verdict::Consume { .. }),
                "{ok:?}: {v:?}"
            );
        }
        for bad in [
            words("XREADGROUP GROUP echo c1 STREAMS alice:echo:inbox >"),
            words("XREADGROUP GROUP echo c1 STREAMS alice:ops:outbox >"),
            words("XREADGROUP GROUP alice c1 STREAMS alice:echo:outbox >"),
            words("XREADGROUP GROUP echo waytoolong STREAMS alice:echo:outbox >"),
            words("XREAD STREAMS alice:echo:inbox 0"),
            words("XRANGE alice:echo:inbox - +"),
            words("XACK alice:ops:outbox ops 1-0"),
            words("XGROUP CREATE zed:echo:outbox echo 0 MKSTREAM"),
            words("XGROUP DESTROY alice:echo:outbox echo"),
            words("XTRIM alice:echo:outbox MAXLEN 0"),
            words("XDEL alice:echo:outbox 1-0"),
            words("DEL alice:echo:outbox"),
            words("KEYS *"),
            words("AUTH x y"),
            words("WATCH alice:echo:inbox"),
        ] {
            assert!(refused(&run(&bad)), "{bad:?}");
        }
    }

    #[test]
    fn replies_go_to_inboxes_as_answers() {
        assert_eq!(
            run(&words(
                "XADD alice:echo:inbox MAXLEN ~ 100 * request_id 1-2 text hi"
            )),
            Verdict::Answer {
                outbox: "alice:echo:outbox".into(),
                request: b"1-2".to_vec()
            }
        );
        assert_eq!(
            run(&words("XADD bob:echo:inbox MAXLEN 1000 * re 3 text hi")),
            Verdict::Answer {
                outbox: "bob:echo:outbox".into(),
                request: b"3-0".to_vec()
            }
        );
        for bad in [
            words("XADD alice:echo:outbox * a b"),
            words("XADD alice:ops:inbox * a b"),
            words("XADD echo:inbox * a b"),
            words("XADD alice:echo:inbox 99999999999999-0 a b"),
            words("XADD alice:echo:inbox MINID 0 * a b"),
            words("XADD alice:echo:inbox * re nope"),
            words("XADD alice:echo:inbox * re 1-0 request_id 2-0"),
            words("XADD alice:echo:inbox MAXLEN 10 * text no-request"),
            words(&format!(
                "XADD alice:echo:inbox MAXLEN 100 * text {}",
                "x".repeat(61)
            )),
        ] {
            assert!(refused(&run(&bad)), "{bad:?}");
        }
    }
}
