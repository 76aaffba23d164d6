//! The webhook's inbound HTTP listener: `POST /in/<source>`.
//!
//! HTTP/1.1 with keep-alive. Every request is checked before anything is
//! written: path, method, bearer token (constant time), source, body size,
//! body shape. Only then is the message published, and the answer says
//! where it went — or 503 when Redis did not take it.
//!
//! A connection must send a request's first byte, its headers and its body
//! within the deadlines of `webhook.limits`; until one of its requests has
//! carried the token, every answer closes it, and a newcomer may take its
//! slot ([`super::slots`]).

use super::slots::{Caps, ConnState, Refusal, Slots};
use super::{current, LiveSettings, SharedSettings};
use crate::message::Inbound;
use crate::publish::{PublishError, Publisher};
use crate::shutdown::Shutdown;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use oxidepm_lanes::bridge_config::WebhookLimits;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// How long in-flight requests get to finish when the bridge stops.
const GRACE: Duration = Duration::from_secs(5);

/// What every connection shares.
struct Ctx {
    settings: SharedSettings,
    publisher: Publisher,
}

/// Serves until `shutdown`; then lets in-flight requests finish (up to a
/// grace period) and closes every connection.
pub async fn serve(
    listener: TcpListener,
    settings: SharedSettings,
    publisher: Publisher,
    mut shutdown: Shutdown,
) {
    let ctx = Arc::new(Ctx {
        settings,
        publisher,
    });
    let slots = Arc::new(Slots::default());
    let mut refusals = Refusals::default();
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.wait() => break,
        };
        // Reap finished connection tasks so the set does not grow.
        while conns.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and the like: wait rather than spin.
                log::warn!("webhook: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let limits = current(&ctx.settings).limits;
        let caps = Caps {
            max: limits.max_connections,
            per_ip: limits.max_connections_per_ip,
        };
        let slot = match slots.admit(peer.ip(), caps) {
            Ok(s) => s,
            Err(r) => {
                refusals.note(r, peer, caps);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let ctx = ctx.clone();
        let conn_shutdown = shutdown.clone();
        conns.spawn(async move {
            let state = slot.state.clone();
            tokio::select! {
                _ = state.evicted() => log::debug!("webhook: {peer} gave its slot to a newcomer"),
                _ = serve_conn(stream, peer, ctx, state.clone(), limits, conn_shutdown) => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(GRACE, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
}

/// Serves one connection within `limits`' deadlines.
async fn serve_conn(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    state: Arc<ConnState>,
    limits: WebhookLimits,
    mut shutdown: Shutdown,
) {
    let first_byte = Duration::from_millis(limits.first_byte_ms);
    if !matches!(
        tokio::time::timeout(first_byte, stream.readable()).await,
        Ok(Ok(()))
    ) {
        log::debug!("webhook: {peer} sent nothing within {first_byte:?}; closed");
        return;
    }
    let service = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        let state = state.clone();
        async move {
            let mut r = handle(req, &ctx, &state, &limits).await;
            if !state.is_authenticated() {
                // Nothing more is read from a connection that has not
                // shown the token.
                r.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(r)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.headers_ms))
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                log::debug!("webhook: connection from {peer} ended: {e}");
            }
        }
        _ = shutdown.wait() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Says in the log that connections are refused, at most once every 10 s
/// (a flood would otherwise write a line per connection).
#[derive(Default)]
struct Refusals {
    last: Option<Instant>,
    quiet: u64,
}

impl Refusals {
    fn note(&mut self, r: Refusal, peer: SocketAddr, caps: Caps) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            self.quiet += 1;
            return;
        }
        let why = match r {
            Refusal::AddressFull => format!(
                "{} already holds {} authenticated connections (webhook.limits.max_connections_per_ip)",
                peer.ip(),
                caps.per_ip
            ),
            Refusal::Full => format!(
                "all {} connections are authenticated (webhook.limits.max_connections)",
                caps.max
            ),
        };
        let more = match std::mem::take(&mut self.quiet) {
            0 => String::new(),
            n => format!("; {n} more refused since the last notice"),
        };
        log::warn!("webhook: closed a new connection from {peer}: {why}{more}");
        self.last = Some(Instant::now());
    }
}

/// A JSON answer.
fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A JSON error answer: `{"error": message}`.
fn error(status: StatusCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    reply(status, json!({ "error": message.into() }))
}

/// The body of `POST /in/<source>`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Posted {
    channel: String,
    #[serde(default)]
    guild: Option<String>,
    #[serde(default)]
    address: Option<String>,
    sender: String,
    text: String,
    #[serde(default)]
    id: Option<Value>,
}

const SHAPE: &str = r#"expected a JSON object {"channel": string, "guild"?: string, "address"?: string, "sender": string, "text": string, "id"?: string}"#;

/// Why a body is not a message; the sender gets this with a 400.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("bad body: {0}; {SHAPE}")]
    Json(#[source] serde_json::Error),
    #[error("bad body: channel is empty; {SHAPE}")]
    NoChannel,
    #[error("bad body: sender is empty; {SHAPE}")]
    NoSender,
    #[error("bad body: id must be a string or a number, not {0}; {SHAPE}")]
    Id(Value),
}

/// Parses and checks a body into a message of `source`.
fn parse_body(source: &str, body: &[u8]) -> Result<Inbound, BodyError> {
    let p: Posted = serde_json::from_slice(body).map_err(BodyError::Json)?;
    if p.channel.is_empty() {
        return Err(BodyError::NoChannel);
    }
    if p.sender.is_empty() {
        return Err(BodyError::NoSender);
    }
    let external_id = match p.id {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => return Err(BodyError::Id(other)),
    };
    Ok(Inbound {
        source: source.to_string(),
        channel: p.channel,
        guild: p.guild.filter(|g| !g.is_empty()),
        address: p.address.filter(|a| !a.is_empty()),
        sender: p.sender,
        text: p.text,
        external_id,
        extra: Vec::new(),
    })
}

/// Checks `Authorization: Bearer <token>`, in constant time.
fn authorized(req: &Request<Incoming>, s: &LiveSettings) -> Result<(), &'static str> {
    let Some(h) = req.headers().get(AUTHORIZATION) else {
        return Err("missing bearer token: send the header Authorization: Bearer <token> (the token is in the bridge's webhook token file)");
    };
    let h = h.as_bytes();
    let token = match h.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &h[7..],
        _ => return Err("the Authorization header must be of the form: Bearer <token>"),
    };
    let digest: [u8; 32] = Sha256::digest(token.trim_ascii()).into();
    if bool::from(digest.ct_eq(&s.token_digest)) {
        Ok(())
    } else {
        Err("wrong bearer token")
    }
}

/// An answer to a request.
type Answer = Response<Full<Bytes>>;

/// The answer that refuses a request (boxed: a response is large).
type Refused = Box<Answer>;

/// Answers one request; `state` learns when the token was right.
async fn handle(
    req: Request<Incoming>,
    ctx: &Ctx,
    state: &ConnState,
    limits: &WebhookLimits,
) -> Answer {
    let (source, settings) = match admit(&req, ctx, state) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let body = match read_body(req, &settings, limits).await {
        Ok(b) => b,
        Err(refused) => return *refused,
    };
    let msg = match parse_body(&source, &body) {
        Ok(m) => m,
        Err(m) => return error(StatusCode::BAD_REQUEST, m.to_string()),
    };
    publish(ctx, msg).await
}

/// The source a request posts to, and the settings it is judged by; or
/// the answer that refuses it (a wrong path, method or token, or a source
/// the bridge does not take), before its body is read.
fn admit(
    req: &Request<Incoming>,
    ctx: &Ctx,
    state: &ConnState,
) -> Result<(String, Arc<LiveSettings>), Refused> {
    let Some(source) = req.uri().path().strip_prefix("/in/").map(str::to_string) else {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!("no such path {:?}: POST to /in/<source>", req.uri().path()),
        )));
    };
    if req.method() != Method::POST {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} is not allowed here: use POST", req.method()),
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return Err(Box::new(r));
    }
    let settings = current(&ctx.settings);
    if let Err(m) = authorized(req, &settings) {
        let mut r = error(StatusCode::UNAUTHORIZED, m);
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        return Err(Box::new(r));
    }
    if !state.authenticated() {
        // The place went to a newcomer a moment before: the connection is
        // closing, and a message taken now would go unanswered (and be sent
        // again).
        return Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook is full and this connection gave its place to a newcomer before \
             its request was read; send it again",
        )));
    }
    if !ctx.publisher.knows_source(&source) {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!(
                "unknown source {source:?}: the bridge takes messages for {}",
                ctx.publisher.sources().join(", ")
            ),
        )));
    }
    Ok((source, settings))
}

/// The request's body, within `max_body` bytes and `limits.body_ms`; or
/// the answer that refuses it.
async fn read_body(
    req: Request<Incoming>,
    settings: &LiveSettings,
    limits: &WebhookLimits,
) -> Result<Bytes, Refused> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {} bytes", settings.max_body),
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > settings.max_body as u64) {
        return Err(Box::new(too_large()));
    }
    let body_time = Duration::from_millis(limits.body_ms);
    let body = Limited::new(req.into_body(), settings.max_body).collect();
    match tokio::time::timeout(body_time, body).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(Box::new(too_large())),
        Err(_) => {
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {body_time:?}; send it at once after the headers"),
            );
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            Err(Box::new(r))
        }
        Ok(Err(e)) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        ))),
    }
}

/// Publishes `msg` and says where it went, or 503 when Redis did not take
/// it.
async fn publish(ctx: &Ctx, msg: Inbound) -> Answer {
    match ctx.publisher.publish(msg).await {
        Ok(p) => reply(
            StatusCode::ACCEPTED,
            json!({ "routed_to": p.agent, "stream": p.stream, "id": p.id }),
        ),
        Err(e @ PublishError::UnknownSource(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ PublishError::Unavailable(_)) => {
            log::warn!("webhook: refused a message: {e}");
            let mut r = error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{e}; try again later"),
            );
            r.headers_mut()
                .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies() {
        let m = parse_body(
            "webhook",
            br#"{"channel": "c1", "guild": "g", "sender": "s", "text": "hi", "id": 7}"#,
        )
        .unwrap();
        assert_eq!(m.channel, "c1");
        assert_eq!(m.guild.as_deref(), Some("g"));
        assert_eq!(m.external_id.as_deref(), Some("7"));
        for bad in [
            &b"not json"[..],
            br#"{"channel": "c1", "text": "hi"}"#,
            br#"{"channel": "", "sender": "s", "text": "hi"}"#,
            br#"{"channel": "c", "sender": "s", "text": "hi", "agent": "bob"}"#,
            br#"{"channel": "c", "sender": "s", "text": "hi", "id": [1]}"#,
            br#"[1, 2]"#,
        ] {
            let e = parse_body("webhook", bad).unwrap_err();
            assert!(e.to_string().starts_with("bad body"), "{e}");
        }
    }
}
