//! Reports about the lanes and the bridge (`lanes`, `routes`). Fields are
//! declared in the order the daemon writes them (sorted keys).

use crate::route::Route;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Answer to `lanes`: every agent's lane, then the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanesReport {
    /// One entry per agent.
    pub agents: Vec<AgentLaneReport>,
    /// The bridge's routes and counters.
    pub bridge: RoutesReport,
    /// What the caller should know about the lanes' isolation (agents that
    /// share a uid are not isolated from each other).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// One entry per responder app.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub responders: Vec<ResponderLaneReport>,
    /// The shared server the lanes are on (`[lanes] redis_url`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedLanesReport>,
    /// How close Redis is to its memory bound (absent when it cannot be
    /// read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<LanesMemory>,
}

/// The lanes' Redis memory: what it uses, its bound, and the part of the
/// bound the agents' outboxes share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanesMemory {
    /// Bytes each agent's outboxes may hold now (`None`: no quota).
    pub agent_quota: Option<u64>,
    /// Redis's bound (`maxmemory`; 0: none, on a server oxidepm does not run).
    pub maxmemory: u64,
    /// Bytes every agent's outboxes may hold together (half of
    /// `[lanes] maxmemory`); the rest is kept for inboxes, replies and the
    /// bridge.
    pub outbox_budget: u64,
    /// Bytes Redis uses now (`used_memory`).
    pub used: u64,
}

impl LanesMemory {
    /// `used` as a percentage of `maxmemory`, if there is a bound.
    pub fn used_percent(&self) -> Option<f64> {
        (self.maxmemory > 0).then(|| self.used as f64 * 100.0 / self.maxmemory as f64)
    }
}

/// Where the lanes are when they are on a shared server, and this host's
/// names in its registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedLanesReport {
    /// `[lanes] redis_url` (never a credential).
    pub url: String,
    /// This host's id.
    pub host_id: String,
    /// This host's agent and responder names with their registry entry.
    pub names: Vec<NameLease>,
}

/// A name's entry in the shared registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameLease {
    /// The agent or responder name.
    pub name: String,
    /// The host holding it (`None`: nobody).
    pub host: Option<String>,
    /// Milliseconds its lease has left (negative: ended).
    pub lease_ms_left: Option<i64>,
}

/// One responder app's lane: its identity, its socket and the requests
/// agents left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponderLaneReport {
    /// The responder's name (its family and consumer group).
    pub responder: String,
    /// Its ACL user.
    pub acl_user: String,
    /// Its proxy socket.
    pub socket: PathBuf,
    /// Entries in the agents' `<agent>:<responder>:outbox`es together.
    pub requests: i64,
    /// Of those, read by the responder and not acknowledged yet.
    pub pending: i64,
}

/// One agent's lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLaneReport {
    /// The agent's ACL user in the private Redis.
    pub acl_user: String,
    /// The agent's name.
    pub agent: String,
    /// The agent's proxy socket.
    pub socket: PathBuf,
    /// Its inboxes, then its outboxes.
    pub streams: Vec<StreamReport>,
}

/// One stream of a lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReport {
    /// The stream's key.
    pub key: String,
    /// Entries in the stream.
    pub length: i64,
    /// Entries delivered to its reader and not acknowledged yet.
    pub pending: i64,
}

/// Answer to `routes`: the routing table, the default agent and the
/// bridge's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesReport {
    /// The counters; `null` only if reading them failed unexpectedly.
    pub counters: Option<Counters>,
    /// Where unrouted messages go, if anywhere.
    pub default_agent: Option<String>,
    /// Why the bridge does not run, when the daemon decided it cannot (its
    /// user cannot be had, cannot reach its files or its Maildir, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Why the default agent is parked (not an agent): its messages go to
    /// `bridge:unrouted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_agent_parked: Option<String>,
    /// Why the running bridge refused its newest configuration, if it
    /// did: it runs with the one before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload_error: Option<String>,
    /// Routes of daemon.toml, then those added at runtime.
    pub routes: Vec<RouteReport>,
    /// The `[[lanes.consult]]` rules in force: who may ask whom.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consult: Vec<ConsultRuleReport>,
    /// How each of the running bridge's sources is, by name (empty when
    /// no bridge said: none runs, or Redis did not answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceReport>,
}

/// One of the bridge's sources: whether its inbound side runs, and if it
/// was stopped by a failure, why and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// Why it stopped, and what to do (a failed source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it stopped (RFC 3339; a failed source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
    /// The source's name (`webhook`, `email`, `discord`, `consult`).
    pub name: String,
    /// Whether its inbound side runs.
    pub up: bool,
}

/// One rule of agents consulting each other: `from` may ask `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsultRuleReport {
    /// The agent that asks.
    pub from: String,
    /// The agent asked, who may answer.
    pub to: String,
}

/// The bridge's counters, or `{}` when Redis could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Counters {
    /// Read from the private Redis.
    Read(BridgeCounters),
    /// Redis could not be asked (lanes not set up, or not answering).
    Unread {},
}

/// What the bridge counted, and what waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeCounters {
    /// Outbox entries moved to a dead-letter stream.
    pub dead: i64,
    /// Outbox entries delivered and acknowledged.
    pub delivered: i64,
    /// Inbound messages given up: Redis did not take them in the tries a
    /// source makes.
    #[serde(default)]
    pub lost: i64,
    /// Of the dead, entries not deliverable as written (not UTF-8).
    #[serde(default)]
    pub malformed: i64,
    /// Outbox entries read by the bridge and not acknowledged yet.
    pub pending: i64,
    /// Delivery tries that failed and were tried again.
    pub retried: i64,
    /// Inbound messages written to an agent's inbox.
    pub routed: i64,
    /// Of the dead, entries over the bridge's entry size limit (their
    /// fields were not kept).
    #[serde(default)]
    pub too_large: i64,
    /// Delivered or dead-lettered entries trimmed from the outboxes.
    #[serde(default)]
    pub trimmed: i64,
    /// Inbound messages written to `bridge:unrouted`.
    pub unrouted: i64,
    /// Entries in `bridge:unrouted`.
    pub unrouted_stream: i64,
    /// Delivery tries the far end asked to wait for (rate limits), sent
    /// again once allowed.
    #[serde(default)]
    pub waited: i64,
    /// Milliseconds from XADD to delivery, summed over the delivered
    /// entries (not one of [`BridgeCounters::entries`]: a sum, for metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delivery_ms: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl BridgeCounters {
    /// Name and value of each counter, in the order they are shown.
    pub fn entries(&self) -> [(&'static str, i64); 12] {
        [
            ("dead", self.dead),
            ("delivered", self.delivered),
            ("lost", self.lost),
            ("malformed", self.malformed),
            ("pending", self.pending),
            ("retried", self.retried),
            ("routed", self.routed),
            ("too_large", self.too_large),
            ("trimmed", self.trimmed),
            ("unrouted", self.unrouted),
            ("unrouted_stream", self.unrouted_stream),
            ("waited", self.waited),
        ]
    }
}

/// Where a route comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteOrigin {
    /// daemon.toml.
    Config,
    /// Added with `route_add`.
    Runtime,
}

impl RouteOrigin {
    /// `config` or `runtime`.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteOrigin::Config => "config",
            RouteOrigin::Runtime => "runtime",
        }
    }
}

/// A route and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteReport {
    /// An address (an email recipient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The agent that gets the messages.
    pub agent: String,
    /// A channel of the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// A guild (a group of channels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild: Option<String>,
    /// Where the route comes from.
    pub origin: RouteOrigin,
    /// Why the route is not in force, if it is not (its agent is gone, …):
    /// its messages go to `bridge:unrouted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<String>,
    /// Source family.
    pub source: String,
}

impl RouteReport {
    /// A route with its origin.
    pub fn new(route: Route, origin: RouteOrigin) -> RouteReport {
        RouteReport {
            address: route.address,
            agent: route.agent,
            channel: route.channel,
            guild: route.guild,
            origin,
            parked: None,
            source: route.source,
        }
    }

    /// The matcher that is set, as `(name, value)`.
    pub fn matcher(&self) -> Option<(&'static str, &str)> {
        [
            ("channel", &self.channel),
            ("guild", &self.guild),
            ("address", &self.address),
        ]
        .into_iter()
        .find_map(|(k, v)| v.as_deref().map(|v| (k, v)))
    }
}
