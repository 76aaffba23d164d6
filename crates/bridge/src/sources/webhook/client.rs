//! The webhook's outbound side: one POST per outbox entry, over pooled
//! HTTP/1.1 keep-alive connections.

use crate::message::Outbound;
use crate::source::DeliveryError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Bytes of a sink's answer kept for the error message.
const ANSWER_SNIPPET: usize = 200;

/// A pooled HTTP client.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        Self::new()
    }
}

/// The JSON body of a delivery.
pub fn body(msg: &Outbound) -> Value {
    let mut fields = Map::new();
    for (k, v) in &msg.fields {
        // The first value of a repeated field, as `Outbound::field` reads it.
        fields
            .entry(k.clone())
            .or_insert_with(|| Value::String(v.clone()));
    }
    json!({
        "agent": msg.agent,
        "source": msg.source,
        "channel": msg.channel,
        "text": msg.text,
        "id": msg.id,
        "fields": fields,
    })
}

/// The error chain of `e` on one line (hyper's own message is terse).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl HttpClient {
    /// A client with keep-alive and no Nagle delay.
    pub fn new() -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        HttpClient { client }
    }

    /// POSTs `msg` to `url`: 2xx is delivered; 408, 429, 5xx, a timeout or
    /// a connection error is worth another try; anything else is not.
    pub async fn post(
        &self,
        url: &Uri,
        msg: &Outbound,
        timeout: Duration,
    ) -> Result<(), DeliveryError> {
        let payload = body(msg).to_string();
        let mut req = Request::new(Full::new(Bytes::from(payload)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = url.clone();
        let h = req.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(&format!("{}/{}", msg.stream, msg.id)) {
            h.insert("idempotency-key", v);
        }
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| {
                DeliveryError::Retry(format!("cannot POST to {url}: {}", chain(&e)))
            })?;
            let status = resp.status();
            // Read the answer to the end so the connection can be reused.
            let answer = match Limited::new(resp.into_body(), 64 << 10).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => Bytes::new(),
            };
            Ok::<_, DeliveryError>((status, answer))
        };
        let (status, answer) = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(DeliveryError::Retry(format!(
                    "{url} did not answer within {} ms",
                    timeout.as_millis()
                )))
            }
        };
        if status.is_success() {
            return Ok(());
        }
        let snippet: String = String::from_utf8_lossy(&answer)
            .chars()
            .take(ANSWER_SNIPPET)
            .collect();
        let reason = format!("{url} answered {status}: {}", snippet.trim());
        let retry = status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS;
        if retry {
            Err(DeliveryError::Retry(reason))
        } else if status.is_redirection() {
            Err(DeliveryError::Permanent(format!(
                "{reason} (redirects are not followed)"
            )))
        } else {
            Err(DeliveryError::Permanent(reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_the_agent_of_the_key() {
        let msg = Outbound {
            agent: "alice".into(),
            source: "webhook".into(),
            stream: "alice:webhook:outbox".into(),
            id: "1-0".into(),
            channel: "c1".into(),
            text: "hi".into(),
            fields: vec![
                ("agent".into(), "bob".into()),
                ("text".into(), "hi".into()),
                ("text".into(), "again".into()),
            ],
        };
        let b = body(&msg);
        assert_eq!(b["agent"], "alice");
        assert_eq!(b["fields"]["agent"], "bob");
        assert_eq!(b["fields"]["text"], "hi");
        assert_eq!(b["id"], "1-0");
    }
}
