//! The bridge's configuration file (JSON), written by the daemon.
//!
//! ```json
//! {
//!   "redis": "unix:///home/u/.oxidepm/redis/redis.sock",
//!   "password_file": "/home/u/.oxidepm/bridge/password",
//!   "agents": ["alice", "bob"],
//!   "sources": ["webhook", "email"],
//!   "routes": [
//!     { "source": "webhook", "channel": "c1", "agent": "alice" },
//!     { "source": "webhook", "guild": "g1", "agent": "bob" },
//!     { "source": "email", "address": "alice@example.org", "agent": "alice" }
//!   ],
//!   "default_agent": null,
//!   "webhook": {
//!     "listen": "127.0.0.1:8787",
//!     "token_file": "/home/u/.oxidepm/bridge/webhook_token",
//!     "deliver": { "c1": "http://127.0.0.1:9000/out", "*": "http://127.0.0.1:9000/all" }
//!   },
//!   "retry": { "attempts": 5, "base_ms": 200, "max_ms": 30000 }
//! }
//! ```
//!
//! Required: `redis` (a [`crate::redis_url`]; `redis_socket`, a bare path,
//! is read too), `password_file` (the clear password of the ACL
//! user, one line), and a `webhook` section when `webhook` is a source.
//! Defaults: `user` "bridge"; `agents` none; `sources` webhook and email;
//! `routes` none; `default_agent` none (unrouted messages go to
//! `bridge:unrouted`); `retry` as above.
//!
//! A route has a `source`, an `agent` and exactly one of `channel`, `guild`
//! or `address` (matched without regard to case). A route whose agent is
//! not in `agents` or whose source is not in `sources`, a malformed one, or
//! one an earlier route shadows is parked, not refused (see
//! [`crate::bridge_routes`]); so is a `default_agent` not in `agents`.
//!
//! `inbox_maxlen` caps every stream the bridge writes inbound messages to
//! (`<agent>:<source>:inbox`, `bridge:unrouted`) with `MAXLEN ~`; default
//! 10,000 entries.
//!
//! `webhook`, `email`, `discord` and `consult`: each source's section, see
//! [`crate::sources`] (the same settings as daemon.toml's
//! `[lanes.<source>]`, plus the secret's file the daemon fills in).
//!
//! `outbox` keys: `consumer` (the stable consumer name in group `bridge`,
//! default "bridge-1"), `block_ms` (the blocking read's timeout, which is
//! also how soon a reload is noticed; default 1,000), `batch` (entries read
//! per stream at once, default 64), `concurrency` (deliveries in flight over
//! all outboxes, default 32), `claim_idle_ms` (entries pending that long
//! with another consumer are claimed, default 60,000), `deliver_timeout_ms`
//! (default 30,000), `max_entry_bytes` (an entry larger than this, field
//! names and values together, is dead-lettered without being delivered or
//! copied; default 1 MiB, the proxy's value limit), `buffer_bytes` (bytes
//! of one outbox's entries the bridge holds at once, read and not yet done;
//! one entry is read even when it alone is larger; default 2 MiB),
//! `dead_maxlen` (cap of each dead-letter stream, `MAXLEN ~`; default
//! 1,000), `dead_entry_bytes` (bytes of an entry's fields a dead letter
//! keeps, the rest cut and the size noted in `truncated`; default 4096: an
//! agent's dead letters stay within about `dead_maxlen` × that per
//! stream, whatever it writes). Delivered entries are trimmed from their outbox (`XTRIM MINID`
//! below the oldest entry not yet acknowledged), never undelivered ones.
//!
//! `shared_routes` (default false): also take the routes of the hash
//! `oxidepm:routes` that the daemons of every host sharing the Redis write
//! (see [`crate::shared_routes`]), re-read about once a second.
//!
//! Unknown keys are errors, so that a typo does not silently turn something
//! off.

use crate::config::{load_json, ConfigError};
use crate::consult::ConsultConfig;
use crate::name::{AgentName, NameError};
use crate::sources::section::{self, SectionError};
use crate::sources::SourceSettings;
pub use crate::sources::{DiscordConfig, EmailSettings, WebhookConfig, WebhookSettings};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The hash where the bridge says whether its last reload failed
/// (`reload_error`, `reload_failed_at`; absent when it did not), so that
/// the daemon can show it.
pub const STATUS_KEY: &str = "bridge:status";

pub use crate::bridge_routes::{
    Parked, ParkedRoute, RouteConfig, RouteConfigError, RoutePlan, RouteSelector, RouteSpec,
};
pub use crate::sources::discord::{api_host, channels_key, DiscordConfigError};
pub use crate::sources::webhook::{check_http_url, UrlError, WebhookLimits};

/// Defines [`BridgeConfig`] with a section for every source of
/// [`crate::with_sources`], where earlier releases wrote each (the file's
/// keys and the "expected one of" list of an unknown key keep their order).
macro_rules! bridge_config {
    (
        early { $($early:ident : $early_ty:ty,)* }
        late { $($late:ident : $late_ty:ty,)* }
    ) => {
        /// The whole file.
        #[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
        #[serde(deny_unknown_fields)]
        pub struct BridgeConfig {
            /// The lanes' Redis: the private one's unix socket, or `[lanes]
            /// redis_url` (see [`crate::redis_url`]).
            #[serde(alias = "redis_socket")]
            pub redis: crate::redis_url::RedisUrl,
            /// TLS files for a `rediss` server.
            #[serde(default, skip_serializing_if = "crate::redis_url::TlsFiles::is_empty")]
            pub tls: crate::redis_url::TlsFiles,
            /// How keys name their agent (see [`crate::stream_key::KeyForm`]).
            #[serde(default)]
            pub key_form: crate::stream_key::KeyForm,
            /// File holding the clear password of the ACL user.
            pub password_file: PathBuf,
            /// The ACL user (default `bridge`).
            #[serde(default = "bridge_user")]
            pub user: String,
            /// Agents whose outboxes are drained and who may be routed to.
            #[serde(default)]
            pub agents: Vec<AgentName>,
            /// Source names (the `<source>` of the stream keys).
            #[serde(default = "default_sources")]
            pub sources: Vec<String>,
            /// The routing table.
            #[serde(default)]
            pub routes: Vec<RouteConfig>,
            /// Agent of messages no route matches.
            #[serde(default)]
            pub default_agent: Option<AgentName>,
            $(
                #[doc = concat!("The ", stringify!($early), " source.")]
                #[serde(default)]
                pub $early: Option<<$early_ty as SourceSettings>::Section>,
            )*
            /// Delivery retries.
            #[serde(default)]
            pub retry: RetryConfig,
            /// The outbox reader.
            #[serde(default)]
            pub outbox: OutboxConfig,
            /// Cap (`MAXLEN ~`) of the inboxes and `bridge:unrouted`.
            #[serde(default = "default_inbox_maxlen")]
            pub inbox_maxlen: u64,
            /// Agents consulting each other: the rules and bounds of the `consult`
            /// source (see [`crate::consult`]).
            #[serde(default)]
            pub consult: Option<ConsultConfig>,
            $(
                #[doc = concat!("The ", stringify!($late), " source.")]
                #[serde(default)]
                pub $late: Option<<$late_ty as SourceSettings>::Section>,
            )*
            /// Whether routes are also read from the hash every host's daemon
            /// writes (`oxidepm:routes`, see [`crate::shared_routes`]): set with
            /// `[lanes] redis_url`; they follow the file's routes.
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub shared_routes: bool,
        }

        impl BridgeConfig {
            /// A configuration with the defaults of every optional key.
            pub fn new(
                redis: impl Into<crate::redis_url::RedisUrl>,
                password_file: PathBuf,
            ) -> BridgeConfig {
                BridgeConfig {
                    redis: redis.into(),
                    tls: Default::default(),
                    key_form: Default::default(),
                    password_file,
                    user: bridge_user(),
                    agents: Vec::new(),
                    sources: default_sources(),
                    routes: Vec::new(),
                    default_agent: None,
                    $($early: None,)*
                    retry: RetryConfig::default(),
                    outbox: OutboxConfig::default(),
                    inbox_maxlen: default_inbox_maxlen(),
                    consult: None,
                    $($late: None,)*
                    shared_routes: false,
                }
            }

            /// Checks each source's section against `sources`. (The email
            /// section's check cannot fail, so this is the order of
            /// earlier releases: webhook, discord, consult.)
            fn check_sections(&self) -> Result<(), SectionError> {
                $(section::check(self.$early.as_ref(), &self.sources)?;)*
                $(section::check(self.$late.as_ref(), &self.sources)?;)*
                section::check(self.consult.as_ref(), &self.sources)
            }

            /// The names of the sources the file has a section for.
            pub fn sections(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $(if self.$early.is_some() { v.push(stringify!($early)); })*
                if self.consult.is_some() { v.push(crate::consult::CONSULT); }
                $(if self.$late.is_some() { v.push(stringify!($late)); })*
                v
            }
        }
    };
}

crate::with_sources!(bridge_config);

fn default_inbox_maxlen() -> u64 {
    10_000
}

fn bridge_user() -> String {
    crate::acl::AclUser::Bridge.to_string()
}

fn default_sources() -> Vec<String> {
    vec!["webhook".into(), "email".into()]
}

/// Delivery retries: `attempts` tries in all, waiting `base_ms`, then twice
/// as long each time, at most `max_ms`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Tries in all (at least 1).
    pub attempts: u32,
    /// First wait, in milliseconds.
    pub base_ms: u64,
    /// Longest wait, in milliseconds.
    pub max_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 5,
            base_ms: 200,
            max_ms: 30_000,
        }
    }
}

impl RetryConfig {
    /// The wait after the `failed`-th failed try (1-based).
    pub fn backoff(&self, failed: u32) -> std::time::Duration {
        let shift = failed.saturating_sub(1).min(32);
        let ms = self.base_ms.saturating_mul(1u64 << shift).min(self.max_ms);
        std::time::Duration::from_millis(ms)
    }
}

/// The `outbox` section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxConfig {
    /// Consumer name in group `bridge`; stable, so that a restarted bridge
    /// finds its own pending entries.
    pub consumer: String,
    /// Timeout of the blocking read, in milliseconds.
    pub block_ms: u64,
    /// Entries read per stream at once.
    pub batch: usize,
    /// Deliveries in flight over all outboxes.
    pub concurrency: usize,
    /// Entries pending this long (ms) with any consumer are claimed again.
    pub claim_idle_ms: u64,
    /// Timeout of one delivery, in milliseconds.
    pub deliver_timeout_ms: u64,
    /// Largest entry delivered, in bytes (field names and values).
    pub max_entry_bytes: usize,
    /// Bytes of one outbox's entries held at once.
    pub buffer_bytes: usize,
    /// Cap (`MAXLEN ~`) of each dead-letter stream.
    pub dead_maxlen: u64,
    /// Bytes of an entry's fields (names and values) a dead letter keeps;
    /// the rest is cut and the letter says how large the entry was.
    pub dead_entry_bytes: usize,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            consumer: "bridge-1".into(),
            block_ms: 1_000,
            batch: 64,
            concurrency: 32,
            claim_idle_ms: 60_000,
            deliver_timeout_ms: 30_000,
            max_entry_bytes: 1 << 20,
            buffer_bytes: 2 << 20,
            dead_maxlen: 1_000,
            dead_entry_bytes: 4096,
        }
    }
}

impl BridgeConfig {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<BridgeConfig, ConfigError> {
        let cfg: BridgeConfig = load_json(path)?;
        cfg.check()?;
        Ok(cfg)
    }

    /// Checks names and that the parts fit together. Routes are not
    /// checked here: a bad one is parked ([`BridgeConfig::route_plan`]).
    pub fn check(&self) -> Result<(), BridgeConfigError> {
        for s in &self.sources {
            check_source_name(s)?;
        }
        for a in &self.agents {
            a.check_families(&self.sources)?;
        }
        if self.retry.attempts == 0 {
            return Err(BridgeConfigError::RetryAttempts);
        }
        let o = &self.outbox;
        let zero = o.batch == 0
            || o.concurrency == 0
            || o.block_ms == 0
            || o.max_entry_bytes == 0
            || o.buffer_bytes == 0
            || o.dead_maxlen == 0
            || o.dead_entry_bytes == 0
            || self.inbox_maxlen == 0;
        if zero {
            return Err(BridgeConfigError::OutboxZero);
        }
        let consumer_ok = !o.consumer.is_empty()
            && o.consumer.len() <= 64
            && o.consumer.bytes().all(|b| b.is_ascii_graphic());
        if !consumer_ok {
            return Err(BridgeConfigError::Consumer {
                consumer: o.consumer.clone(),
            });
        }
        self.check_sections()?;
        Ok(())
    }
}

impl BridgeConfig {
    /// The routes in force and those parked, with why.
    pub fn route_plan(&self) -> RoutePlan {
        RoutePlan::new(
            &self.routes,
            self.default_agent.as_ref(),
            &self.agents,
            &self.sources,
        )
    }
}

/// Checks a source name: 1 to 32 of `a-z 0-9 _ -` (it becomes part of key
/// patterns, so no glob character or colon).
pub fn check_source_name(s: &str) -> Result<(), SourceNameError> {
    if crate::stream_key::is_family_name(s) {
        Ok(())
    } else {
        Err(SourceNameError {
            name: s.to_string(),
        })
    }
}

/// A source name that cannot be part of a key pattern.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("source {name:?}: use 1 to 32 of a-z, 0-9, '_' and '-'")]
pub struct SourceNameError {
    /// The name as given.
    pub name: String,
}

/// Why the bridge's values do not fit together.
#[derive(Debug, thiserror::Error)]
pub enum BridgeConfigError {
    /// A source's name cannot be one.
    #[error(transparent)]
    SourceName(#[from] SourceNameError),
    /// An agent is named like a source.
    #[error(transparent)]
    AgentName(#[from] NameError),
    /// `retry.attempts` 0.
    #[error("retry.attempts must be at least 1")]
    RetryAttempts,
    /// An outbox or stream size setting is 0.
    #[error(
        "outbox.batch, outbox.concurrency, outbox.block_ms, outbox.max_entry_bytes, \
         outbox.buffer_bytes, outbox.dead_maxlen, outbox.dead_entry_bytes and inbox_maxlen must be positive"
    )]
    OutboxZero,
    /// A consumer name Redis would not take as one word.
    #[error("outbox.consumer {consumer:?}: use 1 to 64 printable characters without spaces")]
    Consumer {
        /// The name as given.
        consumer: String,
    },
    /// A source's section is missing or cannot be used.
    #[error(transparent)]
    Section(#[from] SectionError),
}

impl From<BridgeConfigError> for ConfigError {
    fn from(e: BridgeConfigError) -> ConfigError {
        ConfigError::Invalid(Box::new(e))
    }
}

#[cfg(test)]
mod tests;
