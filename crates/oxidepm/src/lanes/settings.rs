//! The `[lanes]` section of daemon.toml.

use oxidepm_lanes::proxy_config::DEFAULT_MAX_CONNECTIONS;
use oxidepm_lanes::stream_key::is_family_name;
use oxidepm_lanes::{AgentName, LimitsConfig, NameError, ProxyConfigError};
use oxidepm_proto::{Route, RouteError};
use serde::Deserialize;
use std::net::SocketAddr;

/// Where lanes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One private Redis run by the daemon (the default).
    #[default]
    Redis,
    /// No lanes: agents run without one.
    Off,
}

/// Settings of the lanes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanesSettings {
    /// `redis` or `off`.
    #[serde(default)]
    pub backend: Backend,
    /// Redis `appendfsync`: `everysec` (default), `always` or `no`.
    #[serde(default = "everysec")]
    pub appendfsync: String,
    /// Outside channels each agent has an inbox and an outbox for.
    #[serde(default = "default_sources")]
    pub sources: Vec<String>,
    /// Host services agents ask things of.
    #[serde(default = "default_responders")]
    pub responders: Vec<String>,
    /// Commands per second one agent may send through its socket.
    #[serde(default)]
    pub rate_limit: Option<f64>,
    /// Length cap (`MAXLEN ~`) applied to every XADD of an agent.
    #[serde(default)]
    pub maxlen: Option<u64>,
    /// Routes of the bridge (more can be added at runtime).
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Agent that gets messages no route matches (else `bridge:unrouted`).
    #[serde(default)]
    pub default_agent: Option<AgentName>,
    /// The webhook source.
    #[serde(default)]
    pub webhook: Option<WebhookSettings>,
    /// The email source.
    #[serde(default)]
    pub email: Option<EmailSettings>,
    /// Redis's `maxmemory`, bytes (default: see `lanes::budgets`).
    #[serde(default)]
    pub maxmemory: Option<u64>,
    /// Bytes one agent's outboxes may hold (default: maxmemory / 8; 0: none).
    #[serde(default)]
    pub agent_quota: Option<u64>,
    /// Connections one agent may have open on its lane at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// `[lanes.limits]`: the proxy's bounds on what clients send.
    #[serde(default)]
    pub limits: LimitsConfig,
}

/// `[lanes.webhook]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Where to listen for `POST /in/<source>` (loopback by default).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where outbox entries of each channel are POSTed (`"*"` for any).
    #[serde(default)]
    pub deliver: std::collections::BTreeMap<String, String>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8787))
}

/// `[lanes.email]`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// Maildir whose `new/` mail is routed into inboxes.
    pub maildir: String,
    /// SMTP relay (`host:port`) for outbox mail.
    pub smtp: String,
    /// Sender address of each agent (`alice = "alice@example.org"`).
    #[serde(default)]
    pub from: std::collections::BTreeMap<String, String>,
    /// Domain for agents without an address: `<agent>@<domain>`.
    #[serde(default)]
    pub domain: Option<String>,
}

fn everysec() -> String {
    "everysec".into()
}

fn default_sources() -> Vec<String> {
    vec!["webhook".into(), "email".into()]
}

fn default_responders() -> Vec<String> {
    vec!["ops".into()]
}

fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

impl Default for LanesSettings {
    fn default() -> LanesSettings {
        toml::from_str("").expect("defaults parse")
    }
}

impl LanesSettings {
    /// Sources and responders: every stream family an agent has.
    pub fn families(&self) -> Vec<String> {
        let mut v = self.sources.clone();
        v.extend(self.responders.iter().cloned());
        v
    }

    /// Checks the names and values.
    pub fn check(&self) -> Result<(), SettingsError> {
        for r in &self.routes {
            r.check()?;
            r.agent
                .parse::<AgentName>()
                .map_err(|source| SettingsError::RouteAgent {
                    route: Box::new(r.clone()),
                    source,
                })?;
            if !self.sources.contains(&r.source) {
                return Err(SettingsError::RouteSource {
                    route: Box::new(r.clone()),
                    sources: self.sources.clone(),
                });
            }
        }
        if !matches!(self.appendfsync.as_str(), "everysec" | "always" | "no") {
            return Err(SettingsError::AppendFsync {
                value: self.appendfsync.clone(),
            });
        }
        for s in self.families() {
            if !is_family_name(&s) {
                return Err(SettingsError::FamilyName { name: s });
            }
        }
        self.check_bounds()
    }

    /// Checks that the bounds can be met.
    fn check_bounds(&self) -> Result<(), SettingsError> {
        let min = super::budgets::MIN_MAXMEMORY;
        if let Some(m) = self.maxmemory.filter(|m| *m < min) {
            return Err(SettingsError::MaxMemory { value: m, min });
        }
        if self.max_connections == 0 {
            return Err(SettingsError::MaxConnections);
        }
        self.limits.validate().map_err(SettingsError::Limits)
    }
}

/// Why the `[lanes]` settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A route is malformed.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A route names an agent that cannot be one.
    #[error("route {}: {source}", .route.describe())]
    RouteAgent {
        /// The route.
        route: Box<Route>,
        /// Why its agent is not a name.
        source: NameError,
    },
    /// A route's source is not among `lanes.sources`.
    #[error("route {}: {:?} is not one of lanes.sources {:?}", .route.describe(), .route.source, .sources)]
    RouteSource {
        /// The route.
        route: Box<Route>,
        /// The lanes' sources.
        sources: Vec<String>,
    },
    /// `appendfsync` is none of Redis's values.
    #[error("lanes.appendfsync = {value:?}: use everysec, always or no")]
    AppendFsync {
        /// The value as given.
        value: String,
    },
    /// A source or responder name cannot be a stream family.
    #[error("lanes source or responder {name:?}: use 1 to 32 of a-z, 0-9, '_' and '-'")]
    FamilyName {
        /// The name as given.
        name: String,
    },
    /// `maxmemory` too small for Redis to work in.
    #[error("lanes.maxmemory = {value}: Redis needs at least {min} bytes")]
    MaxMemory {
        /// The value as given.
        value: u64,
        /// The least accepted.
        min: u64,
    },
    /// `max_connections` 0.
    #[error("lanes.max_connections must be at least 1")]
    MaxConnections,
    /// `[lanes.limits]` cannot be met.
    #[error("lanes.{0}")]
    Limits(#[source] ProxyConfigError),
}
