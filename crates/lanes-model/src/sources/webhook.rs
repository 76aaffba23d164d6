//! The webhook source: `[lanes.webhook]` of daemon.toml ([`WebhookSettings`])
//! and the bridge's `webhook` section ([`WebhookConfig`]), which is those
//! settings as they are plus the token's file and the bridge's own knobs.
//!
//! ```json
//! "webhook": {
//!   "listen": "127.0.0.1:8787",
//!   "deliver": { "c1": "http://127.0.0.1:9000/out", "*": "http://127.0.0.1:9000/all" },
//!   "token_file": "/home/u/.oxidepm/bridge/webhook_token"
//! }
//! ```
//!
//! Settings (daemon.toml and the file): `listen` (default 127.0.0.1:8787),
//! `deliver` (channel → `http://` URL that outbox entries of that channel
//! are POSTed to; `"*"` for every other channel), and `limits`, which
//! bound what a connection may hold before it sends the token:
//! `first_byte_ms` (from accept to the first byte of a request, default
//! 2,000), `headers_ms` (a request's headers from their first byte, and a
//! keep-alive connection's wait for its next request, default 5,000),
//! `body_ms` (a request's body, default 10,000), `max_connections`
//! (default 256) and `max_connections_per_ip` (default 16).
//!
//! The file only: `token_file` (the bearer token inbound requests must
//! carry; a copy the daemon makes of `secrets/webhook_token`),
//! `allow_non_loopback` (another `listen` address than loopback),
//! `relay` (other sources whose outboxes the webhook delivers too, for an
//! outside gateway that posts to `/in/<source>` and receives by HTTP;
//! default none), `max_body` (bytes, default 1 MiB) and `timeout_ms` (one
//! delivery, default 10,000).

use super::registry::{SecretOrigin, SecretSpec, SourceSettings};
use super::section::{Presence, Section};
use crate::consult::CONSULT;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The webhook's settings: `[lanes.webhook]`, and the same keys of the
/// bridge's `webhook` section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    /// Address of the HTTP listener (`POST /in/<source>`).
    pub listen: SocketAddr,
    /// Channel (or `*`) → URL outbox entries are POSTed to.
    pub deliver: BTreeMap<String, String>,
    /// Deadlines and connection caps of the listener.
    pub limits: WebhookLimits,
}

impl Default for WebhookSettings {
    fn default() -> WebhookSettings {
        WebhookSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            deliver: BTreeMap::new(),
            limits: WebhookLimits::default(),
        }
    }
}

/// The bridge's `webhook` section: the settings, the token's file and the
/// keys only the file has.
// The settings are flattened so that the file keeps one flat section; an
// unknown key is still refused (by this struct, which takes what the
// settings do not).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// What daemon.toml sets.
    #[serde(flatten)]
    pub settings: WebhookSettings,
    /// Allow a listener on another address than loopback.
    #[serde(default)]
    pub allow_non_loopback: bool,
    /// File holding the bearer token inbound requests must carry.
    pub token_file: PathBuf,
    /// Other sources whose outboxes the webhook delivers.
    #[serde(default)]
    pub relay: Vec<String>,
    /// Largest inbound body, in bytes.
    #[serde(default = "default_max_body")]
    pub max_body: usize,
    /// Timeout of one outbound POST, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

/// The webhook listener's deadlines and caps: no connection holds a slot
/// long without sending a request that carries the token.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookLimits {
    /// From accept to a request's first byte, in milliseconds.
    pub first_byte_ms: u64,
    /// For a request's headers from their first byte (and for a keep-alive
    /// connection's next request), in milliseconds.
    pub headers_ms: u64,
    /// For a request's body, in milliseconds.
    pub body_ms: u64,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one source address.
    pub max_connections_per_ip: usize,
}

impl Default for WebhookLimits {
    fn default() -> WebhookLimits {
        WebhookLimits {
            first_byte_ms: 2_000,
            headers_ms: 5_000,
            body_ms: 10_000,
            max_connections: 256,
            max_connections_per_ip: 16,
        }
    }
}

impl WebhookLimits {
    /// The first limit that is 0 (which would refuse every request).
    pub fn zero(&self) -> Option<&'static str> {
        [
            ("first_byte_ms", self.first_byte_ms),
            ("headers_ms", self.headers_ms),
            ("body_ms", self.body_ms),
            ("max_connections", self.max_connections as u64),
            ("max_connections_per_ip", self.max_connections_per_ip as u64),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0)
        .map(|(k, _)| k)
    }
}

fn default_max_body() -> usize {
    1 << 20
}

fn default_timeout_ms() -> u64 {
    10_000
}

impl WebhookConfig {
    /// The section of `settings`, with the token in `token_file` and the
    /// defaults of every key only the file has.
    pub fn of(settings: WebhookSettings, token_file: PathBuf) -> WebhookConfig {
        WebhookConfig {
            settings,
            allow_non_loopback: false,
            token_file,
            relay: Vec::new(),
            max_body: default_max_body(),
            timeout_ms: default_timeout_ms(),
        }
    }

    /// A section listening on `listen`, with the defaults of every other
    /// optional key.
    pub fn new(listen: SocketAddr, token_file: PathBuf) -> WebhookConfig {
        let settings = WebhookSettings {
            listen,
            ..WebhookSettings::default()
        };
        WebhookConfig::of(settings, token_file)
    }
}

impl Section for WebhookConfig {
    const SOURCE: &'static str = "webhook";
    const PRESENCE: Presence = Presence::Required {
        needs: "token_file",
    };
    type Error = WebhookConfigError;

    fn check(&self, sources: &[String]) -> Result<(), WebhookConfigError> {
        let listen = self.settings.listen;
        if !listen.ip().is_loopback() && !self.allow_non_loopback {
            return Err(WebhookConfigError::NotLoopback { listen });
        }
        for (channel, url) in &self.settings.deliver {
            check_http_url(url).map_err(|source| WebhookConfigError::DeliverUrl {
                channel: channel.clone(),
                source,
            })?;
        }
        for r in &self.relay {
            // Consult outboxes are the consult router's: never posted out.
            if r == Self::SOURCE || r == CONSULT || !sources.iter().any(|s| s == r) {
                return Err(WebhookConfigError::Relay { name: r.clone() });
            }
        }
        if self.max_body == 0 || self.timeout_ms == 0 {
            return Err(WebhookConfigError::Limits);
        }
        if let Some(key) = self.settings.limits.zero() {
            return Err(WebhookConfigError::Limit { key });
        }
        Ok(())
    }
}

impl SourceSettings for WebhookSettings {
    const NAME: &'static str = "webhook";
    const SECRET: Option<SecretSpec> = Some(SecretSpec {
        name: "webhook_token",
        origin: SecretOrigin::Made,
    });
    type Section = WebhookConfig;

    fn check_settings(&self, _sources: &[String]) -> Result<(), Box<dyn Error + Send + Sync>> {
        match self.limits.zero() {
            Some(key) => Err(Box::new(WebhookSettingsError::Limit { key })),
            None => Ok(()),
        }
    }

    fn section(self, bridge_dir: &Path) -> WebhookConfig {
        let token = Self::SECRET.map(|s| s.file(bridge_dir)).unwrap_or_default();
        WebhookConfig::of(self, token)
    }
}

/// Why `[lanes.webhook]` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebhookSettingsError {
    /// A deadline or cap of `[lanes.webhook.limits]` is 0.
    #[error("lanes.webhook.limits.{key} must be positive: 0 would refuse every request")]
    Limit {
        /// The key.
        key: &'static str,
    },
}

/// Why the bridge's `webhook` section cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebhookConfigError {
    /// A listen address off loopback without the setting that allows it.
    #[error(
        "webhook.listen {listen} is not a loopback address; set webhook.allow_non_loopback = true to listen there"
    )]
    NotLoopback {
        /// The address.
        listen: SocketAddr,
    },
    /// A delivery URL cannot be used.
    #[error("webhook.deliver[{channel:?}]: {source}")]
    DeliverUrl {
        /// The channel it is for.
        channel: String,
        /// Why.
        source: UrlError,
    },
    /// `webhook.relay` names no other source.
    #[error("webhook.relay names {name:?}, which is not another configured source")]
    Relay {
        /// The name.
        name: String,
    },
    /// `max_body` or `timeout_ms` is 0.
    #[error("webhook.max_body and webhook.timeout_ms must be positive")]
    Limits,
    /// A deadline or cap of `webhook.limits` is 0.
    #[error("webhook.limits.{key} must be positive: 0 would refuse every request")]
    Limit {
        /// The key.
        key: &'static str,
    },
}

/// Checks that `url` is an `http://` URL with a host.
pub fn check_http_url(url: &str) -> Result<http::Uri, UrlError> {
    let uri: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(source) => {
            return Err(UrlError::NotAUrl {
                url: url.to_string(),
                source,
            })
        }
    };
    if uri.scheme_str() != Some("http") {
        return Err(UrlError::NotHttp {
            url: url.to_string(),
        });
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost {
            url: url.to_string(),
        });
    }
    Ok(uri)
}

/// Why a delivery URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    /// It does not parse.
    #[error("{url:?} is not a URL: {source}")]
    NotAUrl {
        /// The URL as given.
        url: String,
        /// Why it does not parse.
        source: http::uri::InvalidUri,
    },
    /// Another scheme than `http`.
    #[error("{url:?}: only http:// URLs are supported")]
    NotHttp {
        /// The URL as given.
        url: String,
    },
    /// No host to connect to.
    #[error("{url:?} has no host")]
    NoHost {
        /// The URL as given.
        url: String,
    },
}
