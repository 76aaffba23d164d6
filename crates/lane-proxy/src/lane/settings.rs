//! A lane's settings, made from the proxy's configuration file: what its
//! connections share is kept across reloads where it did not change.

use crate::conn::transaction::Queued;
use crate::lane::budget::Budget;
use crate::lane::consumers::Consumers;
use crate::lane::meter::{Bounds, Meter};
use crate::lane::rate_limit::TokenBucket;
use crate::upstream::route::Route;
use oxidepm_lanes::responder::ResponderConfig;
use oxidepm_lanes::{
    AclUser, AgentConfig, AgentName, LimitsConfig, ProxyConfig, Secret, SecretError,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a connection on one lane needs; a snapshot taken at accept (a
/// reload changes it for new connections only).
pub struct LaneSettings {
    /// The lane's agent: its identity upstream.
    pub agent: AgentName,
    /// The way to the lanes' Redis, shared by every lane.
    pub route: Arc<Route>,
    /// The password of `agent_<agent>`.
    pub password: Secret,
    /// The uid allowed besides the proxy's own.
    pub uid: Option<u32>,
    /// Whether peers' uids are checked at all.
    pub check_peer_uid: bool,
    /// What an XADD was admitted within at accept (the meter holds the
    /// bounds in force); on a responder's lane, what a reply may be.
    pub bounds: Bounds,
    /// Bounds on what clients send and what the proxy holds for them.
    pub limits: LimitsConfig,
    /// Client connections at once.
    pub max_connections: usize,
    /// How often the lane's outboxes are measured while in use.
    pub meter_interval: Duration,
    /// Shared by every connection of the lane.
    pub rate: Option<Arc<Mutex<TokenBucket>>>,
    /// The lane's buffer budget, shared by its connections.
    pub budget: Arc<Budget>,
    /// The lane's outboxes, shared by its connections.
    pub meter: Arc<Meter>,
    /// The lane's consumer names, shared by its connections.
    pub consumers: Arc<Consumers>,
    /// What the lane's open transactions have queued, shared by its
    /// connections.
    pub transactions: Arc<Queued>,
    /// A responder's lane (`agent` is then the responder's name): its
    /// commands go through `crate::filter::responder`, as `resp_<name>`.
    pub responder: bool,
}

impl LaneSettings {
    /// The ACL user the lane's connections are upstream.
    pub fn user(&self) -> AclUser {
        if self.responder {
            AclUser::Responder(self.agent.to_string())
        } else {
            AclUser::Agent(self.agent.clone())
        }
    }
}

impl std::fmt::Debug for LaneSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneSettings")
            .field("agent", &self.agent)
            .field("route", &self.route)
            .field("password", &"<redacted>")
            .field("uid", &self.uid)
            .field("check_peer_uid", &self.check_peer_uid)
            .field("bounds", &self.bounds)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("families", &self.meter.families())
            .field("rate", &self.rate.is_some())
            .field("responder", &self.responder)
            .finish()
    }
}

/// Why one agent's lane cannot be served; the other lanes are.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The password file cannot be read.
    #[error(transparent)]
    Unreadable(SecretError),
    /// The password file holds no password.
    #[error("agent '{agent}': password file {source}")]
    Password {
        /// The agent.
        agent: AgentName,
        /// What is wrong with the file.
        source: SecretError,
    },
    /// The lane cannot be served on this upstream.
    #[error("{0}")]
    Upstream(String),
}

/// Every lane of `cfg`, each with whether it is a responder's: a
/// responder's lane is served like an agent's, with the defaults of the
/// bounds it does not have (its replies are checked instead).
pub(crate) fn lanes(cfg: &ProxyConfig) -> Vec<(AgentConfig, bool)> {
    let responder = |r: &ResponderConfig| {
        let mut a = AgentConfig::new(r.name.clone(), r.password_file.clone());
        a.uid = r.uid;
        a.max_connections = r.max_connections;
        // On a responder's lane: the largest MAXLEN of a reply.
        a.maxlen = Some(r.inbox_maxlen);
        // And the largest reply, in bytes (a responder has no outbox quota).
        a.quota = Some(r.reply_max_bytes as u64);
        (a, true)
    };
    cfg.agents
        .iter()
        .map(|a| (a.clone(), false))
        .chain(cfg.responders.iter().map(responder))
        .collect()
}

/// A lane's settings from the configuration; what its connections share
/// (rate bucket, buffer budget, meter) is kept from `old` where unchanged.
pub(crate) fn lane_settings(
    cfg: &ProxyConfig,
    route: &Arc<Route>,
    a: &AgentConfig,
    old: Option<&LaneSettings>,
    responder: bool,
) -> Result<LaneSettings, LaneError> {
    if responder && route.is_cluster() {
        // A responder reads every agent's outbox of its family: keys in
        // every slot, which no one cluster node holds.
        return Err(LaneError::Upstream(format!(
            "responder '{}': a responder's lane cannot be served on a Redis Cluster yet \
             (its requests are in every agent's slot); run it with a standalone or \
             Sentinel redis_url",
            a.name
        )));
    }
    // A responder's lane has no outboxes of its own to measure.
    let families: &[String] = if responder { &[] } else { &cfg.families };
    let password = read_password(a)?;
    let rate = a.rate_limit.map(|r| {
        // Keep the bucket (and its level) when the rate did not change.
        match old.and_then(|o| o.rate.clone()) {
            Some(b) if b.lock().map(|b| b.rate() == r).unwrap_or(false) => b,
            _ => Arc::new(Mutex::new(TokenBucket::new(r, Instant::now()))),
        }
    });
    // A new budget or meter serves new connections; the old ones keep
    // theirs until they close.
    let budget = match old {
        Some(o) if o.budget.size() == cfg.limits.lane_buffer.min(u32::MAX as usize) => {
            o.budget.clone()
        }
        _ => Budget::new(cfg.limits.lane_buffer),
    };
    let meter = match old {
        Some(o) if o.meter.families() == families => o.meter.clone(),
        _ => Meter::new(a.name.clone(), families.to_vec()),
    };
    let bounds = Bounds {
        maxlen: a.maxlen,
        quota: a.quota,
    };
    if !responder {
        meter.set_bounds(bounds);
        // Connections on a meter replaced (its families changed) keep it
        // until they close: they are held to the new bounds too.
        if let Some(o) = old {
            o.meter.set_bounds(bounds);
        }
    }
    let consumers = consumers(cfg, a, old, responder, families);
    // Open transactions stay queued in Redis across a reload.
    let transactions = old.map(|o| o.transactions.clone()).unwrap_or_default();
    Ok(LaneSettings {
        agent: a.name.clone(),
        route: route.clone(),
        password,
        uid: a.uid,
        check_peer_uid: cfg.check_peer_uid,
        bounds,
        limits: cfg.limits,
        max_connections: a.max_connections,
        meter_interval: Duration::from_millis(cfg.meter_interval_ms),
        rate,
        budget,
        meter,
        consumers,
        transactions,
        responder,
    })
}

/// The password of `a`'s ACL user, from its file.
fn read_password(a: &AgentConfig) -> Result<Secret, LaneError> {
    Secret::read(&a.password_file).map_err(|source| match source {
        SecretError::Read(..) => LaneError::Unreadable(source),
        source => LaneError::Password {
            agent: a.name.clone(),
            source,
        },
    })
}

/// The lane's consumer names: they stay with the lane, whatever else
/// changes (`old`), and follow the agents (a responder's lane) or the
/// families (an agent's) of `cfg`.
fn consumers(
    cfg: &ProxyConfig,
    a: &AgentConfig,
    old: Option<&LaneSettings>,
    responder: bool,
    families: &[String],
) -> Arc<Consumers> {
    let agents: Vec<AgentName> = cfg.agents.iter().map(|a| a.name.clone()).collect();
    match old {
        Some(o) if responder => {
            o.consumers.set_agents(&agents);
            o.consumers.clone()
        }
        Some(o) => {
            o.consumers.set_families(families);
            o.consumers.clone()
        }
        None if responder => Arc::new(Consumers::for_responder(a.name.clone(), &agents)),
        None => Arc::new(Consumers::new(a.name.clone(), families)),
    }
}
