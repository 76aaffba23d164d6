//! Connections of the proxy's own to the lanes' Redis, as a lane's user:
//! the meter's, the consumer count's, a reply's check and the version
//! asked for INFO, on which the proxy asks and reads the answers itself
//! ([`Upstream::call`]). A client's connection is relayed byte-wise
//! instead (`crate::conn::serve`).

use crate::upstream::cluster_map;
use crate::upstream::exchange::Exchange;
use crate::upstream::reply::Reply;
use crate::upstream::route::{lane_of, Route};
use oxidepm_lanes::{AclUser, AgentName, Secret};
use std::io;
use std::sync::Arc;

/// A connection on which the proxy asks Redis things itself.
#[derive(Debug)]
pub struct Upstream {
    exchange: Exchange,
    /// The route it was opened on, and for which lane: told when a reply
    /// says the lane is served elsewhere.
    route: Arc<Route>,
    lane: String,
}

impl Upstream {
    /// Connects and authenticates as `agent_<agent>`.
    pub async fn open(
        route: &Arc<Route>,
        agent: &AgentName,
        password: &Secret,
    ) -> io::Result<Upstream> {
        Self::open_as(route, &AclUser::Agent(agent.clone()), password).await
    }

    /// Connects and authenticates as `user`.
    pub async fn open_as(
        route: &Arc<Route>,
        user: &AclUser,
        password: &Secret,
    ) -> io::Result<Upstream> {
        let lane = lane_of(user);
        let link = route.connect(&lane, user, password).await?;
        Ok(Upstream {
            exchange: Exchange::new(link),
            route: route.clone(),
            lane,
        })
    }

    /// Sends `commands` in one write and reads their replies, in order.
    pub async fn call(&mut self, commands: &[Vec<Vec<u8>>]) -> io::Result<Vec<Reply>> {
        let replies = self.exchange.call(commands).await?;
        if !self.route.is_unix() {
            for r in &replies {
                if let Reply::Error(e) = r {
                    if let Some(m) = cluster_map::moved(e.as_bytes()) {
                        // This connection is on the wrong node now: the
                        // caller drops it, the next one goes elsewhere.
                        self.route.moved(&self.lane, m);
                        return Err(io::Error::other(format!(
                            "the lane moved to another node ({e})"
                        )));
                    }
                }
            }
        }
        Ok(replies)
    }
}
