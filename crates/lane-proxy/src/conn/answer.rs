//! One reply per request: a responder's reply to `<agent>:<name>:inbox`
//! goes upstream as [`SCRIPT`], which in one step of Redis's checks that
//! the request it names is pending in the group `<name>` of
//! `<agent>:<name>:outbox`, appends the reply and acknowledges the
//! request. Nothing can run between the check and the acknowledgement, so
//! a request has at most one reply whatever the batching: pipelined, in
//! `MULTI`, two replies naming one request, a reply behind the `XACK` of
//! its own request, two connections of the responder racing — the second
//! finds the request acknowledged. Redis's pending entries list is the
//! truth: the proxy holds no state about requests, and a restart of it
//! changes nothing.
//!
//! The script runs as `resp_<name>` (its ACL has a selector granting only
//! `EVAL`, on its outboxes and inboxes together): each command it calls is
//! checked against the user's rules as if sent alone. The two keys share
//! the agent's hash tag in the tagged form, so a cluster serves them on
//! one node. The responder itself may not send `EVAL`.
//!
//! Inside `MULTI` a reply is also checked when it is queued and again at
//! `EXEC`, with one `XPENDING` on a connection of the proxy's own
//! ([`Answers`]), so that a reply seen to answer nothing aborts the
//! transaction (`EXECABORT`) instead of failing alone inside it. Those
//! checks only refuse earlier: the script decides.

use crate::filter::verdict::Verdict;
use crate::lane::settings::LaneSettings;
use crate::resp::{encode_args, error_reply, Command};
use crate::upstream::connection::Upstream;
use oxidepm_lanes::responder::group;
use std::borrow::Cow;
use std::io;
use std::time::Duration;
use tokio::io::AsyncWrite;

/// How long a check may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `KEYS[1]` the outbox, `KEYS[2]` the inbox; `ARGV[1]` the group,
/// `ARGV[2]` the request, `ARGV[3]` the refusal, then the XADD's
/// arguments after its key. The reply is appended before the request is
/// acknowledged: a reply Redis refuses (out of memory) leaves the request
/// pending, to be answered again.
pub const SCRIPT: &str = "\
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) ~= 'table' or p.err or #p == 0 then return redis.error_reply(ARGV[3]) end
local id = redis.call('XADD', KEYS[2], unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id";

/// What the script adds to a reply: its body and six arguments.
pub const OVERHEAD: usize = SCRIPT.len() + 256;

/// The refusal of a reply to `request` of `outbox`, which is not pending.
pub fn not_pending(name: &str, outbox: &str, request: &[u8]) -> String {
    let agent = outbox
        .parse::<oxidepm_lanes::StreamKey>()
        .map_or_else(|_| outbox.to_string(), |k| k.agent.to_string());
    format!(
        "NOPERM reply refused: request {} of agent '{agent}' is not pending in group '{}' of \
         {outbox}; a responder replies once to each request, only to the agent whose request \
         it read (XREADGROUP), and a reply acknowledges its request",
        crate::resp::printable(request, 40),
        group(name),
    )
}

/// The script's arguments for the reply `cmd` (an XADD the responder
/// filter judged an answer to `request` of `outbox`).
fn eval_args<'c>(
    cmd: &'c Command<'_>,
    name: &'c str,
    outbox: &'c str,
    request: &'c [u8],
    refusal: &'c str,
) -> Vec<&'c [u8]> {
    let mut args: Vec<&[u8]> = vec![
        b"EVAL",
        SCRIPT.as_bytes(),
        b"2",
        outbox.as_bytes(),
        cmd.arg(1),
        group(name).as_bytes(),
        request,
        refusal.as_bytes(),
    ];
    args.extend(cmd.args().skip(2));
    args
}

/// Appends the script of reply `cmd` to `out`.
pub fn encode(out: &mut Vec<u8>, cmd: &Command<'_>, name: &str, outbox: &str, request: &[u8]) {
    let refusal = not_pending(name, outbox, request);
    encode_args(out, &eval_args(cmd, name, outbox, request, &refusal));
}

/// Writes the script of a large reply `cmd` to `uw`, its values from
/// where they lie.
pub async fn write(
    uw: &mut (impl AsyncWrite + Unpin),
    cmd: &Command<'_>,
    name: &str,
    outbox: &str,
    request: &[u8],
) -> io::Result<()> {
    let refusal = not_pending(name, outbox, request);
    crate::conn::upstream_write::write_args(uw, &eval_args(cmd, name, outbox, request, &refusal))
        .await
}

/// A connection's side channel for checking its queued replies early.
#[derive(Default)]
pub struct Answers {
    side: Option<Upstream>,
}

impl Answers {
    /// `None` when `outbox` has `request` pending now, else the refusal
    /// the responder gets.
    pub async fn judge(
        &mut self,
        s: &LaneSettings,
        outbox: &str,
        request: &[u8],
    ) -> Option<Verdict> {
        let name = s.agent.as_str();
        match tokio::time::timeout(TIMEOUT, self.pending(s, outbox, request)).await {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => {
                log::info!(
                    "responder {name}: reply refused: request {} of {outbox} is not pending",
                    String::from_utf8_lossy(request)
                );
                Some(refused(not_pending(name, outbox, request)))
            }
            Ok(Err(e)) => {
                self.side = None;
                log::warn!("responder {name}: cannot check a reply: {e}");
                Some(refused(format!(
                    "ERR lane proxy: cannot check that the reply answers a request ({e}); \
                     try again"
                )))
            }
            Err(_) => {
                self.side = None;
                Some(refused(
                    "ERR lane proxy: Redis did not answer the reply's check in time; try again"
                        .into(),
                ))
            }
        }
    }

    async fn pending(
        &mut self,
        s: &LaneSettings,
        outbox: &str,
        request: &[u8],
    ) -> io::Result<bool> {
        if self.side.is_none() {
            self.side = Some(Upstream::open_as(&s.route, &s.user(), &s.password).await?);
        }
        let Some(up) = self.side.as_mut() else {
            return Err(io::Error::other("no connection"));
        };
        let cmd = vec![
            b"XPENDING".to_vec(),
            outbox.as_bytes().to_vec(),
            group(s.agent.as_str()).as_bytes().to_vec(),
            request.to_vec(),
            request.to_vec(),
            b"1".to_vec(),
        ];
        let replies = up.call(&[cmd]).await?;
        // An error (no such group, no such key) means nothing is pending.
        Ok(replies.first().is_some_and(|r| !r.items().is_empty()))
    }
}

fn refused(text: String) -> Verdict {
    Verdict::Reply(Cow::Owned(error_reply(&text)))
}
