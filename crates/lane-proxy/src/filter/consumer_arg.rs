//! Where a command names the consumer it may create, read as Redis reads
//! it, and whether the name is short enough. Pure, like the filter that
//! calls it (`crate::filter::agent`).

use crate::filter::text::upper;
use crate::filter::verdict::{Policy, Verdict};
use crate::resp::{error_reply, Command};
use std::borrow::Cow;

/// The index of XREADGROUP's consumer name, read as Redis reads its
/// options (`BLOCK n`, `COUNT n`, `NOACK`, `GROUP g c` in any order, until
/// `STREAMS`); `None` when Redis would refuse the options, creating
/// nothing.
pub fn xreadgroup_consumer(cmd: &Command<'_>) -> Result<Option<usize>, &'static str> {
    let mut found = None;
    let mut i = 1;
    while i < cmd.len() {
        let more = cmd.len() - i - 1;
        let mut buf = [0u8; 16];
        match upper(cmd.arg(i), &mut buf) {
            b"BLOCK" | b"COUNT" if more >= 1 => i += 2,
            b"STREAMS" if more >= 1 => return Ok(found),
            b"GROUP" if more >= 2 => {
                if found.is_some() {
                    return Err("OXIDEPM XREADGROUP with more than one GROUP clause is not \
                                accepted on an agent lane; give GROUP <group> <consumer> once");
                }
                found = Some(i + 2);
                i += 3;
            }
            b"NOACK" => i += 1,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// A command naming a consumer at `arg` (`None`: Redis will refuse it):
/// refused when the name is too long, else for the lane to admit.
pub fn consume(cmd: &Command<'_>, arg: Option<usize>, policy: &Policy<'_>) -> Verdict {
    let Some(arg) = arg else {
        return Verdict::Forward;
    };
    let len = cmd.arg(arg).len();
    if len > policy.max_consumer_name {
        return Verdict::Reply(Cow::Owned(error_reply(&format!(
            "OXIDEPM consumer name: {len} bytes is longer than the {} bytes a consumer name \
             may have on an agent lane (lanes.limits.max_consumer_name); use a shorter name",
            policy.max_consumer_name
        ))));
    }
    Verdict::Consume { arg }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::agent::tests::run;
    use oxidepm_testkit::words;

    #[test]
    fn consumer_names_are_found_where_redis_reads_them_and_bounded() {
        for (c, arg) in [
            (
                words("XREADGROUP GROUP alice c STREAMS alice:discord:inbox >"),
                3,
            ),
            (
                words(
                    "xreadgroup COUNT 1 NOACK BLOCK 0 group alice c STREAMS alice:discord:inbox >",
                ),
                8,
            ),
            (words("XCLAIM alice:discord:inbox alice c 0 1-1"), 3),
            (words("XAUTOCLAIM alice:discord:inbox alice c 0 0"), 3),
            (
                words("XGROUP createconsumer alice:discord:inbox alice c"),
                4,
            ),
        ] {
            assert_eq!(run(&c), Verdict::Consume { arg }, "{c:?}");
            let mut long = c.clone();
            long[arg] = "123456789".into();
            let v = run(&long);
            assert!(
                matches!(&v, Verdict::Reply(r) if r.starts_with(b"-OXIDEPM consumer name: 9 bytes")),
                "{long:?}: {v:?}"
            );
        }
        // What Redis refuses creates nothing: it answers.
        for c in [
            words("XREADGROUP GROUP alice"),
            words("XREADGROUP FOO GROUP alice c STREAMS alice:discord:inbox >"),
            words("XCLAIM alice:discord:inbox alice c 0"),
            words("XGROUP CREATECONSUMER alice:discord:inbox alice"),
        ] {
            assert_eq!(run(&c), Verdict::Forward, "{c:?}");
        }
        let twice = words("XREADGROUP GROUP alice a GROUP alice b STREAMS alice:discord:inbox >");
        assert!(matches!(run(&twice), Verdict::Reply(r) if r.starts_with(b"-OXIDEPM XREADGROUP")));
        assert_eq!(
            run(&["XGROUP", "DELCONSUMER", "alice:discord:inbox", "alice", "c"]),
            Verdict::DelConsumer
        );
    }
}
