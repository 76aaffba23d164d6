//! Where an agent may post: one bot serves every agent of the host, so
//! an agent's answer goes only to a channel that is the agent's — one a
//! `discord` channel route sends to it, or one (a guild channel, a thread,
//! a DM) the bridge wrote it a message from. Anything else (another
//! agent's channel, a channel of a server nobody routed) is a permanent
//! failure, dead-lettered with the reason, and nothing is posted.
//!
//! The channels an agent was written from are kept per agent in Redis
//! (`bridge:discord:channels:<agent>`, a sorted set by time, the last
//! [`KEEP`]), so the rule holds across restarts of the bridge.

use crate::conn::Con;
use crate::routing::{RouteBy, RouteKey, Routes, Target};
use crate::source::DeliveryError;
use std::sync::{OnceLock, RwLock};

/// Channels remembered per agent.
pub const KEEP: usize = 1024;

/// The sorted set of the channels `agent` was written from.
pub fn key(agent: &str) -> String {
    oxidepm_lanes::bridge_config::channels_key(agent)
}

/// The routes in force and the bridge's connection.
#[derive(Default)]
pub struct Reach {
    routes: RwLock<Routes>,
    con: OnceLock<Con>,
}

impl Reach {
    /// Takes up the routes of a (new) configuration.
    pub fn set_routes(&self, routes: Routes) {
        *self.routes.write().unwrap_or_else(|p| p.into_inner()) = routes;
    }

    /// The connection to check and record with (the inbound side's).
    pub fn set_connection(&self, con: Con) {
        let _ = self.con.set(con);
    }

    /// Records that `agent` was written a message from `channel`.
    pub async fn record(&self, agent: &str, channel: &str) {
        let Some(con) = self.con.get() else { return };
        let now = chrono::Utc::now().timestamp_millis();
        let k = key(agent);
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD").arg(&k).arg(now).arg(channel).ignore();
        pipe.cmd("ZREMRANGEBYRANK")
            .arg(&k)
            .arg(0)
            .arg(-(KEEP as i64) - 1)
            .ignore();
        if let Err(e) = pipe.query_async::<()>(&mut con.clone()).await {
            log::warn!("discord: cannot record channel {channel} as {agent}'s ({e})");
        }
    }

    /// Whether `agent` may post to `channel`, or why not.
    pub async fn check(&self, agent: &str, channel: &str) -> Result<(), DeliveryError> {
        let routed = {
            let r = self.routes.read().unwrap_or_else(|p| p.into_inner());
            let k = RouteKey {
                source: super::NAME,
                channel: Some(channel),
                ..RouteKey::default()
            };
            matches!(r.route(&k), Some((Target::Agent(a), RouteBy::Channel)) if a.as_str() == agent)
        };
        if routed {
            return Ok(());
        }
        let Some(con) = self.con.get() else {
            return Err(DeliveryError::Retry(
                "the discord source is not started yet".into(),
            ));
        };
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key(agent))
            .arg(channel)
            .query_async(&mut con.clone())
            .await
            .map_err(|e| DeliveryError::Retry(format!("cannot check the channel: {e}")))?;
        if score.is_some() {
            return Ok(());
        }
        Err(DeliveryError::Permanent(format!(
            "channel {channel} is not {agent}'s: an agent posts only to a channel a discord route \
             sends to it, or one it was sent a message from; add a [[lanes.routes]] channel route \
             for it, or answer in the channel of a message it received"
        )))
    }
}
