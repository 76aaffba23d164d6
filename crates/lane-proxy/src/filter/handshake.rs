//! What client libraries send when they connect, answered by the proxy:
//! `CLIENT SETNAME/GETNAME/SETINFO`, `HELLO [protover] [SETNAME name]` and
//! `INFO`. Pure: the filter (`crate::filter::agent`) classifies, the
//! command pump keeps the connection's name and protocol.
//!
//! A client name set upstream would show in `CLIENT LIST` to whoever may
//! read it, and `CLIENT` is a connection-changing command the proxy never
//! forwards; so the name lives in the proxy, for `CLIENT GETNAME` of the
//! same connection. `INFO` would tell an agent about every other lane's
//! memory and clients: the proxy answers a minimal one instead, with what
//! libraries read at connect (ioredis's ready check reads `loading`).

use crate::filter::text::upper;
use crate::filter::verdict::Verdict;
use crate::resp::{error_reply, Command};
use std::borrow::Cow;

/// The longest client name accepted, in bytes.
pub const MAX_NAME: usize = 256;

/// `CLIENT …`: the local answers, or a refusal.
pub fn client(cmd: &Command<'_>) -> Verdict {
    let mut buf = [0u8; 16];
    match upper(cmd.arg(1), &mut buf) {
        b"SETINFO" => Verdict::Reply(Cow::Borrowed(b"+OK\r\n")),
        b"SETNAME" if cmd.len() == 3 => match check_name(cmd.arg(2)) {
            Ok(()) => Verdict::SetName { arg: 2 },
            Err(e) => e,
        },
        b"SETNAME" => arity("client|setname"),
        b"GETNAME" if cmd.len() == 2 => Verdict::GetName,
        b"GETNAME" => arity("client|getname"),
        _ => Verdict::Reply(Cow::Borrowed(
            b"-NOPERM CLIENT commands other than SETNAME, GETNAME and SETINFO are not allowed \
              on an agent lane\r\n",
        )),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: forwarded as
/// `HELLO [protover]`, the name kept by the proxy; AUTH refused.
pub fn hello(cmd: &Command<'_>) -> Verdict {
    let mut name = None;
    let mut i = 2;
    while i < cmd.len() {
        let mut buf = [0u8; 16];
        let more = cmd.len() - i - 1;
        match upper(cmd.arg(i), &mut buf) {
            b"AUTH" => {
                return Verdict::Reply(Cow::Borrowed(
                    b"-NOPERM HELLO with AUTH is not allowed on an agent lane; the lane is \
                      already authenticated (send HELLO <protover>, with SETNAME if you like)\r\n",
                ))
            }
            b"SETNAME" if more >= 1 => {
                if let Err(e) = check_name(cmd.arg(i + 1)) {
                    return e;
                }
                name = Some(i + 1);
                i += 2;
            }
            _ => {
                return Verdict::Reply(Cow::Owned(error_reply(&format!(
                    "ERR Syntax error in HELLO option '{}'",
                    printable(cmd.arg(i))
                ))))
            }
        }
    }
    // Redis refuses any other version before it reads the options: then
    // the name must not be kept either (Redis answers the error).
    let protover = (cmd.len() > 1).then_some(1);
    if protover.is_some() && !matches!(cmd.arg(1), b"2" | b"3") {
        name = None;
    }
    Verdict::Hello { protover, name }
}

/// Validates a client name as Redis does, and bounds its length.
fn check_name(name: &[u8]) -> Result<(), Verdict> {
    if name.len() > MAX_NAME {
        return Err(Verdict::Reply(Cow::Owned(error_reply(&format!(
            "OXIDEPM client name: {} bytes is longer than the {MAX_NAME} bytes a client name \
             may have on an agent lane; use a shorter name",
            name.len()
        )))));
    }
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Verdict::Reply(Cow::Borrowed(
            b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        )));
    }
    Ok(())
}

fn arity(name: &str) -> Verdict {
    Verdict::Reply(Cow::Owned(error_reply(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ))))
}

/// The reply to `CLIENT GETNAME`: the name, or null (RESP3's own null
/// after `HELLO 3`). An empty name is no name, as in Redis.
pub fn getname_reply(name: Option<&[u8]>, resp3: bool) -> Vec<u8> {
    match name {
        Some(n) if !n.is_empty() => bulk(n),
        _ if resp3 => b"_\r\n".to_vec(),
        _ => b"$-1\r\n".to_vec(),
    }
}

/// The proxy's `INFO`, whatever sections were asked: only fields that
/// say nothing about other lanes.
pub fn info_reply(redis_version: &str) -> Vec<u8> {
    let text = format!(
        "# Server\r\nredis_version:{redis_version}\r\nredis_mode:standalone\r\n\r\n\
         # Persistence\r\nloading:0\r\n"
    );
    bulk(text.as_bytes())
}

fn bulk(b: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", b.len()).into_bytes();
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
    out
}

/// An argument for an error message (see [`crate::resp::printable`]).
fn printable(s: &[u8]) -> String {
    crate::resp::printable(s, 40)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::agent::tests::run;

    fn error(v: &Verdict) -> String {
        match v {
            Verdict::Reply(r) if r.starts_with(b"-") => String::from_utf8_lossy(r).into_owned(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn client_names_are_checked_like_redis_checks_them() {
        assert_eq!(
            run(&["client", "setname", "worker-1"]),
            Verdict::SetName { arg: 2 }
        );
        assert_eq!(run(&["CLIENT", "SETNAME", ""]), Verdict::SetName { arg: 2 });
        assert_eq!(run(&["CLIENT", "GETNAME"]), Verdict::GetName);
        for bad in ["a b", "a\nb", "caf\u{e9}", "\x01"] {
            assert!(
                error(&run(&["CLIENT", "SETNAME", bad])).starts_with("-ERR Client names cannot"),
                "{bad:?}"
            );
        }
        let long = "x".repeat(MAX_NAME + 1);
        assert!(error(&run(&["CLIENT", "SETNAME", &long])).starts_with("-OXIDEPM client name"));
        assert!(error(&run(&["CLIENT", "SETNAME"])).contains("wrong number"));
        assert!(error(&run(&["CLIENT", "KILL", "ID", "1"])).starts_with("-NOPERM"));
        assert!(error(&run(&["CLIENT", "NO-EVICT", "on"])).starts_with("-NOPERM"));
    }

    #[test]
    fn hello_keeps_the_protocol_and_drops_the_name() {
        assert_eq!(
            run(&["HELLO"]),
            Verdict::Hello {
                protover: None,
                name: None
            }
        );
        assert_eq!(
            run(&["HELLO", "3", "setname", "w"]),
            Verdict::Hello {
                protover: Some(1),
                name: Some(3)
            }
        );
        assert!(error(&run(&["HELLO", "3", "AUTH", "bridge", "pw"])).starts_with("-NOPERM"));
        assert!(
            error(&run(&["HELLO", "3", "SETNAME", "w", "AUTH", "u", "p"])).starts_with("-NOPERM")
        );
        assert!(error(&run(&["HELLO", "3", "SETNAME", "a b"])).starts_with("-ERR Client names"));
        assert!(error(&run(&["HELLO", "3", "FOO"])).starts_with("-ERR Syntax error"));
        assert_eq!(
            run(&["HELLO", "4", "SETNAME", "w"]),
            Verdict::Hello {
                protover: Some(1),
                name: None
            },
            "Redis refuses the version: no name is kept"
        );
    }

    #[test]
    fn replies() {
        assert_eq!(getname_reply(Some(b"w"), false), b"$1\r\nw\r\n");
        assert_eq!(getname_reply(None, false), b"$-1\r\n");
        assert_eq!(getname_reply(Some(b""), true), b"_\r\n");
        let info = String::from_utf8(info_reply("7.2.4")).unwrap();
        assert!(info.contains("\r\nredis_version:7.2.4\r\n"), "{info}");
        assert!(info.contains("\r\nloading:0\r\n"), "{info}");
        let body = info.split_once("\r\n").unwrap();
        assert_eq!(format!("${}", body.1.len() - 2), body.0);
    }
}
