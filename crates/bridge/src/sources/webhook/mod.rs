//! The `webhook` source: HTTP in, HTTP out.
//!
//! **Inbound** ([`server`]): a listener (loopback by default) taking
//!
//! ```text
//! POST /in/<source>
//! Authorization: Bearer <token from webhook.token_file>
//! {"channel": "c1", "guild": "g1", "address": "a@b", "sender": "someone", "text": "hi", "id": "ext-1"}
//! ```
//!
//! (`guild`, `address` and `id` optional; `<source>` any configured source,
//! so that an outside gateway can post a discord message as `discord`).
//! The token is compared in constant time. Answers `202 {"routed_to":
//! "alice"|null, "stream": …, "id": <stream id>}`; a bad body, a missing or
//! wrong token, an unknown source → 4xx `{"error": …}` and nothing
//! written; Redis unavailable → 503, so that the sender tries again.
//! A connection holds its slot only while it keeps to the deadlines of
//! `webhook.limits`, and until it sends the token it gives way to newcomers
//! when its address or the listener is full ([`slots`]).
//!
//! **Outbound** ([`client`]): an outbox entry is POSTed as JSON
//! `{agent, source, channel, text, id, fields}` to the URL configured for
//! its channel in `webhook.deliver` (or `"*"`), with the header
//! `Idempotency-Key: <outbox key>/<entry id>`. 2xx is delivered; 408, 429,
//! 5xx and connection errors are tried again; any other answer is
//! permanent.

pub mod client;
pub mod server;
pub mod slots;

use crate::message::Outbound;
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use crate::source::{BoxFuture, DeliveryError, Source, SourceError};
use oxidepm_lanes::bridge_config::UrlError;
use oxidepm_lanes::bridge_config::{BridgeConfig, WebhookConfig, WebhookLimits};
use oxidepm_lanes::{Secret, SecretError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Why the webhook cannot run or take up its settings.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The bearer token cannot be read.
    #[error("webhook.token_file: {0}")]
    Token(#[source] SecretError),
    /// A delivery URL cannot be used.
    #[error("webhook.deliver[{channel:?}]: {source}")]
    Deliver {
        /// The channel it is for.
        channel: String,
        /// Why.
        source: UrlError,
    },
    /// The listen address cannot be bound.
    #[error("webhook: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The bound listener cannot be set up.
    #[error("webhook: {0}")]
    Listener(#[source] std::io::Error),
    /// The inbound loop was started twice.
    #[error("the webhook listener is already running")]
    Running,
}

impl From<WebhookError> for SourceError {
    fn from(e: WebhookError) -> SourceError {
        SourceError::new(NAME, e)
    }
}

/// The source's name.
pub const NAME: &str = "webhook";

/// Settings a reload may change.
#[derive(Debug)]
pub struct LiveSettings {
    /// SHA-256 of the bearer token: compared in constant time, and its
    /// length does not leak.
    pub token_digest: [u8; 32],
    /// Channel (or `*`) → URL.
    pub deliver: HashMap<String, hyper::Uri>,
    /// Largest inbound body.
    pub max_body: usize,
    /// Timeout of one outbound POST.
    pub timeout: Duration,
    /// Deadlines and caps of the listener.
    pub limits: WebhookLimits,
}

impl LiveSettings {
    /// The settings of a `webhook` section (reads the token file).
    pub fn from_config(w: &WebhookConfig) -> Result<LiveSettings, WebhookError> {
        let token = Secret::read(&w.token_file).map_err(WebhookError::Token)?;
        let mut deliver = HashMap::new();
        for (channel, url) in &w.settings.deliver {
            let uri = oxidepm_lanes::bridge_config::check_http_url(url).map_err(|source| {
                WebhookError::Deliver {
                    channel: channel.clone(),
                    source,
                }
            })?;
            deliver.insert(channel.clone(), uri);
        }
        Ok(LiveSettings {
            token_digest: Sha256::digest(token.expose().as_bytes()).into(),
            deliver,
            max_body: w.max_body,
            timeout: Duration::from_millis(w.timeout_ms),
            limits: w.settings.limits,
        })
    }

    /// The URL entries of `channel` go to.
    pub fn url_for(&self, channel: &str) -> Option<&hyper::Uri> {
        self.deliver.get(channel).or_else(|| self.deliver.get("*"))
    }
}

/// Shared, replaceable settings.
pub type SharedSettings = Arc<RwLock<Arc<LiveSettings>>>;

fn current(s: &SharedSettings) -> Arc<LiveSettings> {
    s.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The webhook source.
pub struct WebhookSource {
    settings: SharedSettings,
    /// Bound at construction (so that a taken port is a start-up error);
    /// taken by the inbound loop.
    listener: Mutex<Option<std::net::TcpListener>>,
    listen: SocketAddr,
    local_addr: SocketAddr,
    client: client::HttpClient,
}

impl WebhookSource {
    /// Reads the settings and binds the listener.
    pub fn bind(w: &WebhookConfig) -> Result<WebhookSource, WebhookError> {
        let settings = LiveSettings::from_config(w)?;
        let listener = std::net::TcpListener::bind(w.settings.listen).map_err(|source| {
            WebhookError::Listen {
                addr: w.settings.listen,
                source,
            }
        })?;
        listener
            .set_nonblocking(true)
            .map_err(WebhookError::Listener)?;
        let local_addr = listener.local_addr().map_err(WebhookError::Listener)?;
        Ok(WebhookSource {
            settings: Arc::new(RwLock::new(Arc::new(settings))),
            listener: Mutex::new(Some(listener)),
            listen: w.settings.listen,
            local_addr,
            client: client::HttpClient::new(),
        })
    }
}

impl Source for WebhookSource {
    fn name(&self) -> &str {
        NAME
    }

    // The address actually listened on (the port, when 0 was asked for).
    fn listen_addr(&self) -> Option<SocketAddr> {
        Some(self.local_addr)
    }

    fn inbound(
        &self,
        publisher: Publisher,
        shutdown: Shutdown,
    ) -> BoxFuture<'_, Result<(), SourceError>> {
        Box::pin(async move {
            let std_listener = self
                .listener
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or(WebhookError::Running)?;
            let listener =
                tokio::net::TcpListener::from_std(std_listener).map_err(WebhookError::Listener)?;
            log::info!(
                "webhook: listening on http://{}/in/<source>",
                self.local_addr
            );
            server::serve(listener, self.settings.clone(), publisher, shutdown).await;
            Ok(())
        })
    }

    fn deliver<'a>(&'a self, msg: &'a Outbound) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let settings = current(&self.settings);
            let Some(url) = settings.url_for(&msg.channel) else {
                return Err(DeliveryError::Permanent(format!(
                    "no delivery URL for channel {:?}: webhook.deliver has neither it nor \"*\"",
                    msg.channel
                )));
            };
            self.client.post(url, msg, settings.timeout).await
        })
    }

    fn reload(&self, config: &BridgeConfig) -> Result<Vec<String>, SourceError> {
        let Some(w) = &config.webhook else {
            return Ok(vec!["removing the webhook source".into()]);
        };
        let new = LiveSettings::from_config(w)?;
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        let mut restart = Vec::new();
        let listen = w.settings.listen;
        if listen != self.listen {
            restart.push(format!("webhook.listen ({} → {listen})", self.listen));
        }
        Ok(restart)
    }
}
