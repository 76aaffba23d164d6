//! Posting an agent's answer through Discord's REST API.
//!
//! The request is made here, on hyper, with twilight's rate limiter
//! (twilight-http-ratelimiting) keeping each route's bucket and the global
//! limit of 50 requests a second: twilight-http itself sends a request
//! answered `429` again at once, whatever the answer said, and reads an
//! error's body without a bound. Here a `429` is waited out: its
//! `retry_after` (the body's, else the `Retry-After` header's) is returned
//! as [`DeliveryError::Wait`], and the bridge sends the same part again
//! after it, without counting a failed try — never dropped, never
//! hammered. A global one (`X-RateLimit-Global: true`, `"global": true` or
//! the scope `global`) pauses the whole source: every post waits for it
//! before it is sent. Each request, its answer's head and its body
//! together have `post_timeout_ms`; a body is read up to [`MAX_BODY`].
//!
//! What is left is what Discord's answer means for the entry: a timeout, a
//! refused connection or a 5xx is worth trying again; a channel the bot
//! cannot see or post to (403, 404) or a request Discord refuses as it is
//! (400) never will be.
//!
//! Every part carries a `nonce` made from the outbox, the entry id and the
//! part's index, with `enforce_nonce`: Discord answers a second post of the
//! same part with the message it already made, so an entry delivered again
//! after a failure part-way does not post its first parts twice. Mentions
//! are limited to users: an agent's answer never pings `@everyone` or a
//! role.

use crate::source::DeliveryError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use oxidepm_lanes::bridge_config::{api_host, DiscordConfig};
use oxidepm_lanes::Secret;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use twilight_http_ratelimiting::{Endpoint, Method, RateLimitHeaders, RateLimiter};

/// The most messages one entry becomes (20,000 characters): past it, a
/// delivery would take a channel's rate limit for minutes.
pub const MAX_PARTS: usize = 10;

/// The most bytes of an answer's body read (a message Discord made is a
/// few KiB; an error far less).
pub const MAX_BODY: usize = 64 << 10;

/// The longest wait a `429` is taken at its word for.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Discord's API when `api_url` is not set.
const DISCORD: &str = "https://discord.com";

/// The `Authorization` header of `token`, marked sensitive (kept out of
/// hyper's debug output).
fn auth(token: &Secret) -> HeaderValue {
    let mut auth = HeaderValue::from_str(&format!("Bot {}", token.expose()))
        .unwrap_or_else(|_| HeaderValue::from_static("Bot"));
    auth.set_sensitive(true);
    auth
}

/// The bot's REST client.
pub struct Rest {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    base: String,
    /// `Bot <token>`; replaced when the token file changes.
    auth: std::sync::RwLock<HeaderValue>,
    timeout: Duration,
    limiter: RateLimiter,
    /// Until when a global rate limit holds every post back.
    paused: Mutex<Option<Instant>>,
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
    /// A client with the bot's token, talking to `api_url` when set (call
    /// inside a tokio runtime: the rate limiter is a task).
    pub fn new(
        token: &Secret,
        cfg: &DiscordConfig,
    ) -> Result<Rest, oxidepm_lanes::bridge_config::DiscordConfigError> {
        let base = match &cfg.settings.api_url {
            Some(u) => {
                api_host(u)?;
                u.trim_end_matches('/').to_string()
            }
            None => DISCORD.to_string(),
        };
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(
                |_| oxidepm_lanes::bridge_config::DiscordConfigError::ApiUrl { url: base.clone() },
            )?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(tls);
        Ok(Rest {
            client,
            base,
            auth: std::sync::RwLock::new(auth(token)),
            timeout: Duration::from_millis(cfg.post_timeout_ms),
            limiter: RateLimiter::default(),
            paused: Mutex::new(None),
        })
    }

    /// Posts with `token` from now on.
    pub fn set_token(&self, token: &Secret) {
        *self.auth.write().unwrap_or_else(|p| p.into_inner()) = auth(token);
    }

    /// How long a global rate limit still holds posts back.
    fn paused_for(&self) -> Option<Duration> {
        let p = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        p.and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// Holds every post back for `wait`.
    fn pause(&self, wait: Duration) {
        let mut p = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        let until = Instant::now() + wait;
        if p.is_none_or(|t| t < until) {
            *p = Some(until);
        }
    }

    /// Posts one part.
    pub async fn post(&self, part: &Part) -> Result<(), DeliveryError> {
        if part.channel == 0 {
            return Err(DeliveryError::Permanent("channel id 0".into()));
        }
        if let Some(wait) = self.paused_for() {
            return Err(DeliveryError::Wait(
                "Discord's global rate limit holds every post back".into(),
                wait,
            ));
        }
        let path = format!("channels/{}/messages", part.channel);
        let permit = self
            .limiter
            .acquire(Endpoint {
                method: Method::Post,
                path: path.clone(),
            })
            .await;
        let req = Request::post(format!("{}/api/v10/{path}", self.base))
            .header(
                AUTHORIZATION,
                self.auth.read().unwrap_or_else(|p| p.into_inner()).clone(),
            )
            .header(CONTENT_TYPE, "application/json")
            .header(
                USER_AGENT,
                concat!("DiscordBot (oxidepm, ", env!("CARGO_PKG_VERSION"), ")"),
            )
            .body(Full::new(Bytes::from(part.body.clone())))
            .map_err(|e| DeliveryError::Permanent(format!("the request cannot be made: {e}")))?;
        let exchange = async {
            let res = self.client.request(req).await?;
            let (head, body) = res.into_parts();
            // An error's body is only for the reason; past the bound it
            // is not read on.
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .ok()
                .map(|b| b.to_bytes());
            Ok::<_, hyper_util::client::legacy::Error>((head, body))
        };
        let (head, body) = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                return Err(DeliveryError::Retry(format!(
                    "Discord did not answer within {} ms",
                    self.timeout.as_millis()
                )))
            }
            Ok(Err(e)) => return Err(DeliveryError::Retry(format!("cannot reach Discord: {e}"))),
            Ok(Ok(r)) => r,
        };
        permit.complete(bucket(&head.headers));
        let body = body.unwrap_or_else(|| Bytes::from_static(b"(a body over 64 KiB)"));
        if head.status.is_success() {
            return Ok(());
        }
        if head.status == StatusCode::TOO_MANY_REQUESTS {
            let (wait, global) = rate_limited(&head.headers, &body);
            if global {
                self.pause(wait);
            }
            let scope = if global { "global" } else { "route" };
            return Err(DeliveryError::Wait(
                format!(
                    "Discord's {scope} rate limit (429): sent again in {} ms",
                    wait.as_millis()
                ),
                wait,
            ));
        }
        Err(classify(part.channel, head.status.as_u16(), &body))
    }
}

/// The bucket a response's headers describe, for the rate limiter (as
/// twilight-http reads them).
fn bucket(h: &HeaderMap) -> Option<RateLimitHeaders> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let scope = text(RateLimitHeaders::SCOPE);
    let name = h.get(RateLimitHeaders::BUCKET)?.as_bytes().to_vec();
    if scope == Some("shared") {
        let secs: u16 = text(RETRY_AFTER.as_str())?.parse().ok()?;
        return Some(RateLimitHeaders::shared(name, secs));
    }
    let reset: f64 = text(RateLimitHeaders::RESET_AFTER)?.parse().ok()?;
    let reset = Duration::try_from_secs_f64(reset).ok()?.min(MAX_WAIT);
    Some(RateLimitHeaders {
        bucket: name,
        limit: text(RateLimitHeaders::LIMIT)?.parse().ok()?,
        remaining: text(RateLimitHeaders::REMAINING)?.parse().ok()?,
        reset_at: Instant::now() + reset,
    })
}

/// How long a `429` asks to wait (the body's `retry_after`, else the
/// header's, else a second; at most [`MAX_WAIT`]) and whether it is global.
fn rate_limited(h: &HeaderMap, body: &[u8]) -> (Duration, bool) {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let secs = v["retry_after"]
        .as_f64()
        .or_else(|| text(RETRY_AFTER.as_str())?.trim().parse().ok())
        .unwrap_or(1.0);
    let wait = Duration::try_from_secs_f64(secs)
        .unwrap_or(Duration::from_secs(1))
        .min(MAX_WAIT);
    let global = text("x-ratelimit-global").is_some_and(|g| g.eq_ignore_ascii_case("true"))
        || text(RateLimitHeaders::SCOPE) == Some("global")
        || v["global"].as_bool() == Some(true);
    (wait, global)
}

/// What a failed post means for the entry.
fn classify(channel: u64, code: u16, body: &[u8]) -> DeliveryError {
    let said = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    match code {
        403 => DeliveryError::Permanent(format!(
            "Discord refused the post to channel {channel} (403: the bot may not see or write to it; invite it to the channel with Send Messages): {said}"
        )),
        404 => DeliveryError::Permanent(format!(
            "Discord knows no channel {channel} the bot can reach (404): {said}"
        )),
        401 => DeliveryError::Retry(
            "Discord refused the bot token (401); put the right one in secrets/discord_token".into(),
        ),
        400..=499 if code != 408 => {
            DeliveryError::Permanent(format!("Discord refused the message ({code}): {said}"))
        }
        _ => DeliveryError::Retry(format!("Discord answered {code}: {said}")),
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
