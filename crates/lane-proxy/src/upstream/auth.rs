//! Authenticating a new upstream stream as a lane's ACL user, before
//! anything else is sent on it.

use crate::resp::encode_args;
use crate::upstream::link::Link;
use oxidepm_lanes::{AclUser, Secret};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Authenticates `link` as `user` (an agent's or a responder's).
pub async fn authenticate(link: &mut Link, user: &AclUser, password: &Secret) -> io::Result<()> {
    let user = user.to_string();
    let mut auth = Vec::with_capacity(64);
    encode_args(
        &mut auth,
        &[
            b"AUTH".as_slice(),
            user.as_bytes(),
            password.expose().as_bytes(),
        ],
    );
    link.write_all(&auth).await?;
    link.flush().await?;
    let mut reply = Vec::with_capacity(64);
    loop {
        if reply.len() > 4096 {
            return Err(io::Error::other("oversized reply to AUTH"));
        }
        let mut b = [0u8; 256];
        let n = link.read(&mut b).await?;
        if n == 0 {
            return Err(io::Error::other("Redis closed the connection during AUTH"));
        }
        reply.extend_from_slice(&b[..n]);
        if reply.ends_with(b"\r\n") {
            break;
        }
    }
    if reply == b"+OK\r\n" {
        return Ok(());
    }
    let text = String::from_utf8_lossy(reply.strip_prefix(b"-").unwrap_or(&reply))
        .trim_end()
        .to_string();
    Err(io::Error::other(format!(
        "Redis refused AUTH as {user}: {text}"
    )))
}
