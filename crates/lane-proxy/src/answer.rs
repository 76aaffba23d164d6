//! Whether a responder's reply answers a request: Redis's own pending
//! entries list is the truth. A reply to `<agent>:<name>:inbox` passes
//! only while an entry of `<agent>:<name>:outbox` has been delivered to the
//! group `<name>` and not acknowledged — the one named by the reply's
//! `request_id` (or `re`) when it names one. So it needs no state of the
//! proxy's, and survives the proxy's restarts.
//!
//! The check is one `XPENDING` round trip on a connection of the proxy's
//! own (opened once per client connection, as `resp_<name>`), never on the
//! client's, which may be in a blocking read or a MULTI. It sees what Redis
//! has run when it runs: a reply pipelined right behind the XACK of its own
//! request may still pass, to the agent that asked.

use crate::command_filter::Verdict;
use crate::connection::LaneSettings;
use crate::resp::error_reply;
use crate::upstream::Upstream;
use oxidepm_lanes::responder::group;
use std::borrow::Cow;
use std::io;
use std::time::Duration;

/// How long the check may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A connection's side channel for checking its replies.
#[derive(Default)]
pub struct Answers {
    side: Option<Upstream>,
}

impl Answers {
    /// [`Verdict::Forward`] when `outbox` has the request pending (any, or
    /// `request`), else the refusal the responder gets.
    pub async fn judge(
        &mut self,
        s: &LaneSettings,
        outbox: &str,
        request: Option<&[u8]>,
    ) -> Verdict {
        let name = s.agent.as_str();
        match tokio::time::timeout(TIMEOUT, self.pending(s, outbox, request)).await {
            Ok(Ok(true)) => Verdict::Forward,
            Ok(Ok(false)) => {
                let agent = outbox
                    .parse::<oxidepm_lanes::StreamKey>()
                    .map_or_else(|_| outbox.to_string(), |k| k.agent.to_string());
                let what = match request {
                    Some(id) => format!(
                        "request {} of agent '{agent}' is not pending",
                        String::from_utf8_lossy(id)
                    ),
                    None => format!("agent '{agent}' has no request pending"),
                };
                log::info!("responder {name}: reply refused: {what}");
                refused(format!(
                    "NOPERM reply refused: {what} in group '{}' of {outbox}; a responder \
                     replies only to the agent whose request it read (XREADGROUP) and has \
                     not acknowledged yet",
                    group(name)
                ))
            }
            Ok(Err(e)) => {
                self.side = None;
                log::warn!("responder {name}: cannot check a reply: {e}");
                refused(format!(
                    "ERR lane proxy: cannot check that the reply answers a request ({e}); \
                     try again"
                ))
            }
            Err(_) => {
                self.side = None;
                refused(
                    "ERR lane proxy: Redis did not answer the reply's check in time; try again"
                        .into(),
                )
            }
        }
    }

    async fn pending(
        &mut self,
        s: &LaneSettings,
        outbox: &str,
        request: Option<&[u8]>,
    ) -> io::Result<bool> {
        if self.side.is_none() {
            self.side = Some(Upstream::open_as(&s.route, &s.user(), &s.password).await?);
        }
        let Some(up) = self.side.as_mut() else {
            return Err(io::Error::other("no connection"));
        };
        let (from, to) = match request {
            Some(id) => (id, id),
            None => (&b"-"[..], &b"+"[..]),
        };
        let cmd = vec![
            b"XPENDING".to_vec(),
            outbox.as_bytes().to_vec(),
            group(s.agent.as_str()).as_bytes().to_vec(),
            from.to_vec(),
            to.to_vec(),
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
