//! Commands re-encoded for upstream: with a key replaced (an agent's
//! shared outbox form), or written piece by piece when large, their
//! values from where they lie in the read buffer (never copied whole).

use crate::resp::{encode_args, encode_command, Command};
use std::io;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// `cmd` in canonical form, with argument 1 replaced by `key` if given.
pub fn encode_with_key(out: &mut Vec<u8>, cmd: &Command<'_>, key: Option<&[u8]>) {
    match key {
        None => encode_command(out, cmd),
        Some(k) => encode_args(out, &with_key(cmd, Some(k))),
    }
}

/// Writes large `cmd`, with argument 1 replaced by `key` if given.
pub async fn write_with_key(
    uw: &mut (impl AsyncWrite + Unpin),
    cmd: &Command<'_>,
    key: Option<&[u8]>,
) -> io::Result<()> {
    write_args(uw, &with_key(cmd, key)).await
}

fn with_key<'c>(cmd: &'c Command<'_>, key: Option<&'c [u8]>) -> Vec<&'c [u8]> {
    cmd.args()
        .enumerate()
        .map(|(i, a)| match (i, key) {
            (1, Some(k)) => k,
            _ => a,
        })
        .collect()
}

/// Writes a large command piece by piece: its headers are encoded, its
/// long arguments written from where they lie.
pub async fn write_args(uw: &mut (impl AsyncWrite + Unpin), args: &[&[u8]]) -> io::Result<()> {
    let mut head = Vec::with_capacity(4096);
    head.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        head.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        if a.len() > 4096 {
            uw.write_all(&head).await?;
            head.clear();
            uw.write_all(a).await?;
        } else {
            head.extend_from_slice(a);
        }
        head.extend_from_slice(b"\r\n");
    }
    uw.write_all(&head).await
}
