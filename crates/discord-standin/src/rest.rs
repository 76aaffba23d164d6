//! The stand-in's REST API: the bot's posts, checked and recorded.

use crate::{gateway, lock, payload, Post, Shared, State};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Instant;
use tokio::net::TcpListener;

/// Accepts connections until the listener fails.
pub async fn serve(listener: TcpListener, state: Shared) {
    while let Ok((tcp, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(req, &state).await) }
            });
            let io = hyper_util::rt::TokioIo::new(tcp);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        "application/json".parse().expect("a header value"),
    );
    r
}

async fn answer(req: Request<Incoming>, state: &Shared) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, json!({"message": "bad body"})),
    };
    let mut st = lock(state);
    if auth.as_deref() != Some(format!("Bot {}", st.token).as_str()) {
        return reply(
            StatusCode::UNAUTHORIZED,
            json!({"message": "401: Unauthorized", "code": 0}),
        );
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["api", "v10", "gateway", "bot"]) => reply(
            StatusCode::OK,
            json!({ "url": st.gateway_url, "shards": 1, "session_start_limit":
                { "total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1 } }),
        ),
        ("POST", ["api", "v10", "channels", channel, "messages"]) => {
            let Ok(channel) = channel.parse::<u64>() else {
                return reply(
                    StatusCode::NOT_FOUND,
                    json!({"message": "Unknown Channel", "code": 10003}),
                );
            };
            post(&mut st, channel, &body)
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            json!({"message": "404: Not Found", "code": 0}),
        ),
    }
}

/// A post to `channel`: refused as the test set it up to be (throttled,
/// failing), or checked as Discord checks it and recorded.
fn post(st: &mut State, channel: u64, body: &[u8]) -> Response<Full<Bytes>> {
    if st.throttle > 0 {
        return rate_limited(st);
    }
    match st.fail_after {
        (0, n) if n > 0 => {
            st.fail_after.1 -= 1;
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"message": "500: Internal Server Error", "code": 0}),
            );
        }
        (skip, n) if skip > 0 && n > 0 => st.fail_after.0 -= 1,
        _ => {}
    }
    if !st.channels.contains(&channel) {
        return reply(
            StatusCode::FORBIDDEN,
            json!({"message": "Missing Access", "code": 50001}),
        );
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"message": "Cannot parse the body", "code": 50109}),
        );
    };
    let content = v["content"].as_str().unwrap_or_default().to_string();
    if content.trim().is_empty() || content.chars().count() > 2000 {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"message": "Invalid Form Body", "code": 50035}),
        );
    }
    let nonce = match &v["nonce"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if let (Some(n), true) = (&nonce, v["enforce_nonce"].as_bool() == Some(true)) {
        if let Some(id) = st.nonces.get(&(channel, n.clone())) {
            return reply(StatusCode::OK, payload::bot_message(*id, channel, &content));
        }
    }
    st.next_id += 1;
    let id = st.next_id;
    if let Some(n) = &nonce {
        st.nonces.insert((channel, n.clone()), id);
    }
    st.posts.push(Post {
        channel,
        id,
        content: content.clone(),
        nonce,
        reply_to: v["message_reference"]["message_id"]
            .as_str()
            .map(str::to_string),
        at: Instant::now(),
    });
    let m = payload::bot_message(id, channel, &content);
    if st.echo_posts {
        gateway::dispatch(st, "MESSAGE_CREATE", m.clone());
    }
    reply(StatusCode::OK, m)
}

/// A 429, global or per route as the test asked, with Discord's headers;
/// one throttled post fewer to come.
fn rate_limited(st: &mut State) -> Response<Full<Bytes>> {
    st.throttle -= 1;
    st.rate_limited.push(Instant::now());
    let ra = st.reset_after;
    let global = st.global_limit;
    let mut r = reply(
        StatusCode::TOO_MANY_REQUESTS,
        json!({ "message": "You are being rate limited.", "retry_after": ra, "global": global }),
    );
    let retry_after = ("retry-after", format!("{}", ra.ceil() as u64));
    let headers = if global {
        vec![
            ("x-ratelimit-global", "true".to_string()),
            ("x-ratelimit-scope", "global".to_string()),
            retry_after,
        ]
    } else {
        vec![
            ("x-ratelimit-scope", "user".to_string()),
            ("x-ratelimit-bucket", "standin-bucket".to_string()),
            ("x-ratelimit-limit", "5".to_string()),
            ("x-ratelimit-remaining", "0".to_string()),
            ("x-ratelimit-reset-after", format!("{ra:.3}")),
            retry_after,
        ]
    };
    let h = r.headers_mut();
    for (k, v) in headers {
        h.insert(k, v.parse().expect("a header value"));
    }
    r
}
