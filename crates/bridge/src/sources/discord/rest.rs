//! Posting an agent's answer through Discord's REST API (twilight-http).
//!
//! twilight-http keeps the rate limits: each route's bucket and the global
//! limit are waited for before a request, and a `429` is waited out (its
//! `retry_after`) and the same request sent again, never dropped. What is
//! left to this module is what Discord's answer means for the entry: a
//! timeout, a refused connection or a 5xx is worth trying again; a channel
//! the bot cannot see or post to (403, 404) or a request Discord refuses
//! as it is (400) never will be.
//!
//! Every part carries a `nonce` made from the outbox, the entry id and the
//! part's index, with `enforce_nonce`: Discord answers a second post of the
//! same part with the message it already made, so an entry delivered again
//! after a failure part-way does not post its first parts twice. Mentions
//! are limited to users: an agent's answer never pings `@everyone` or a
//! role.

use crate::config::{api_host, DiscordConfig};
use crate::source::DeliveryError;
use oxidepm_lanes::Secret;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::time::Duration;
use twilight_http::error::ErrorType;
use twilight_model::id::Id;

/// The most messages one entry becomes (20,000 characters): past it, a
/// delivery would take a channel's rate limit for minutes.
pub const MAX_PARTS: usize = 10;

/// The REST client of the bot.
pub struct Rest {
    client: twilight_http::Client,
}

/// One part of an answer, ready to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The channel id.
    pub channel: u64,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl Rest {
    /// A client with the bot's token, talking to `api_url` when set.
    pub fn new(
        token: &Secret,
        cfg: &DiscordConfig,
    ) -> Result<Rest, crate::config::DiscordConfigError> {
        let mut b = twilight_http::Client::builder()
            .token(token.expose().to_string())
            .timeout(Duration::from_millis(cfg.post_timeout_ms));
        if let Some(u) = &cfg.api_url {
            let (host, http) = api_host(u)?;
            b = b.proxy(host, http);
        }
        Ok(Rest { client: b.build() })
    }

    /// Posts one part.
    pub async fn post(&self, part: &Part) -> Result<(), DeliveryError> {
        let Some(channel) = Id::new_checked(part.channel) else {
            return Err(DeliveryError::Permanent("channel id 0".into()));
        };
        let res = self
            .client
            .create_message(channel)
            .payload_json(&part.body)
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) => Err(classify(part.channel, e)),
        }
    }
}

/// What a failed post means for the entry.
fn classify(channel: u64, e: twilight_http::Error) -> DeliveryError {
    match e.kind() {
        ErrorType::Response { status, body, .. } => {
            let code = status.get();
            let said = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            match code {
                403 => DeliveryError::Permanent(format!(
                    "Discord refused the post to channel {channel} (403: the bot may not see or write to it; invite it to the channel with Send Messages): {said}"
                )),
                404 => DeliveryError::Permanent(format!(
                    "Discord knows no channel {channel} the bot can reach (404): {said}"
                )),
                400..=499 if code != 408 && code != 429 && code != 401 => {
                    DeliveryError::Permanent(format!("Discord refused the message ({code}): {said}"))
                }
                401 => DeliveryError::Retry(
                    "Discord refused the bot token (401); put the right one in secrets/discord_token".into(),
                ),
                _ => DeliveryError::Retry(format!("Discord answered {code}: {said}")),
            }
        }
        ErrorType::Unauthorized => DeliveryError::Retry(
            "Discord refused the bot token; put the right one in secrets/discord_token and restart the bridge".into(),
        ),
        ErrorType::Validation => DeliveryError::Permanent(format!("the message cannot be sent: {e}")),
        _ => DeliveryError::Retry(format!("cannot reach Discord: {e}")),
    }
}

/// The parts of an answer to post, or why it cannot be posted.
///
/// `stream` and `id` name the entry (for the nonces); `reply_to` makes the
/// first part a reply to that message.
pub fn parts(
    stream: &str,
    id: &str,
    channel: &str,
    text: &str,
    reply_to: Option<&str>,
) -> Result<Vec<Part>, DeliveryError> {
    if channel.is_empty() {
        return Err(DeliveryError::Permanent(
            "the entry has no channel field: write the Discord channel id to answer in".into(),
        ));
    }
    let channel_id: u64 = channel
        .parse()
        .ok()
        .filter(|c| *c != 0)
        .ok_or_else(|| {
            DeliveryError::Permanent(format!(
                "channel {channel:?} is not a Discord channel id (digits, as in the inbox entry's channel field)"
            ))
        })?;
    let reply: Option<u64> = match reply_to.filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => Some(r.parse().ok().filter(|r| *r != 0).ok_or_else(|| {
            DeliveryError::Permanent(format!(
                "reply_to {r:?} is not a Discord message id (digits, as in the inbox entry's external_id field)"
            ))
        })?),
    };
    let texts = super::split::split(text, super::split::MAX_CHARS);
    if texts.is_empty() {
        return Err(DeliveryError::Permanent(
            "the entry has no text to post (a `text` field that is not blank)".into(),
        ));
    }
    if texts.len() > MAX_PARTS {
        return Err(DeliveryError::Permanent(format!(
            "the text would take {} messages, more than the {MAX_PARTS} an entry may become \
             (about {} characters); send it as several entries, or shorter",
            texts.len(),
            MAX_PARTS * super::split::MAX_CHARS
        )));
    }
    Ok(texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let mut body = json!({
                "content": t,
                "nonce": nonce(stream, id, i),
                "enforce_nonce": true,
                "allowed_mentions": { "parse": ["users"], "replied_user": true },
            });
            if let (0, Some(r)) = (i, reply) {
                body["message_reference"] =
                    json!({ "message_id": r.to_string(), "fail_if_not_exists": false });
            }
            Part {
                channel: channel_id,
                body: serde_json::to_vec(&body).unwrap_or_default(),
            }
        })
        .collect())
}

/// The nonce of part `index` of entry `id` of `stream`: the same for every
/// try, different for every part (at most 25 characters, as Discord asks).
pub fn nonce(stream: &str, id: &str, index: usize) -> String {
    let mut h = Sha256::new();
    for piece in [stream.as_bytes(), b"\0", id.as_bytes(), b"\0"] {
        h.update(piece);
    }
    h.update(index.to_le_bytes());
    let d = h.finalize();
    let mut n = [0u8; 8];
    n.copy_from_slice(&d[..8]);
    // Below 2^63: a nonce Discord also takes as a number.
    (u64::from_le_bytes(n) >> 1).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_without_a_place_are_permanent_failures() {
        for (channel, text, reply) in [
            ("", "hi", None),
            ("general", "hi", None),
            ("0", "hi", None),
            ("123", "", None),
            ("123", "  ", None),
            ("123", "hi", Some("x")),
            ("123", &"x ".repeat(10_001), None),
        ] {
            let e = parts("a:discord:outbox", "1-0", channel, text, reply).unwrap_err();
            assert!(
                matches!(e, DeliveryError::Permanent(_)),
                "{channel:?} {text:?}"
            );
        }
    }

    #[test]
    fn nonces_are_stable_and_distinct() {
        assert_eq!(nonce("s", "1-0", 0), nonce("s", "1-0", 0));
        assert_ne!(nonce("s", "1-0", 0), nonce("s", "1-0", 1));
        assert_ne!(nonce("s", "1-0", 0), nonce("s", "1-1", 0));
        assert!(nonce("s", "1-0", 0).len() <= 25);
    }

    #[test]
    fn a_reply_is_the_first_part_only() {
        let text = "x ".repeat(1500);
        let p = parts("s", "1-0", "42", &text, Some("7")).unwrap();
        assert_eq!(p.len(), 2);
        let first: serde_json::Value = serde_json::from_slice(&p[0].body).unwrap();
        let second: serde_json::Value = serde_json::from_slice(&p[1].body).unwrap();
        assert_eq!(first["message_reference"]["message_id"], "7");
        assert!(second.get("message_reference").is_none());
        assert_eq!(first["enforce_nonce"], true);
        assert_eq!(p[0].channel, 42);
    }
}
