//! A lane's settings, made from the proxy's configuration file: what its
//! connections share is kept across reloads where it did not change.

use crate::lane::budget::Budget;
use crate::conn::serve::LaneSettings;
use crate::lane::consumers::Consumers;
use crate::lane::meter::{Bounds, Meter};
use crate::lane::rate_limit::TokenBucket;
use crate::upstream::route::Route;
use crate::server::proxy::LaneError;
use oxidepm_lanes::responder::ResponderConfig;
use oxidepm_lanes::{AgentConfig, AgentName, ProxyConfig, Secret, SecretError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    let password = Secret::read(&a.password_file).map_err(|source| match source {
        SecretError::Read(..) => LaneError::Unreadable(source),
        source => LaneError::Password {
            agent: a.name.clone(),
            source,
        },
    })?;
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
    // The names stay with the lane, whatever else changes.
    let agents: Vec<AgentName> = cfg.agents.iter().map(|a| a.name.clone()).collect();
    let consumers = match old {
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
    };
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
