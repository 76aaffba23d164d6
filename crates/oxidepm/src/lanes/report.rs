//! What `oxidepm lanes` shows of each agent's lane: its socket, its ACL
//! user, and each of its streams with its length and what its reader has
//! pending.

use super::error::Error;
use super::handle::Lanes;
use super::layout;
use super::server::Con;
use crate::supervise::Shared;
use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::responder::{group, responder_socket};
use oxidepm_lanes::stream_key::BRIDGE_GROUP;
use oxidepm_lanes::StreamKey;
use oxidepm_proto::{AgentLaneReport, LanesMemory, ResponderLaneReport, StreamReport};

impl Lanes {
    /// Per agent: socket, ACL user, and each stream with its length and
    /// pending count.
    pub async fn report(&self, shared: &Shared) -> Result<Vec<AgentLaneReport>, Error> {
        let agents = self.agents(shared);
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let (user, pw) = self.admin()?;
        let server = self.server();
        let families = self.families_now();
        let sources = self.settings.sources.clone();
        let layout = self.layout.clone();
        let mut con = server.connect(&user, &pw).await?;
        let mut out = Vec::new();
        for a in agents {
            let (inboxes, outboxes) = layout::streams(&a.name, &families);
            let mut streams = Vec::new();
            for (key, group) in inboxes.iter().map(|k| (k, a.name.as_str())).chain(
                outboxes.iter().zip(&families).map(|(k, f)| {
                    // A responder's outbox is read by its own group.
                    let bridge = sources.contains(f);
                    (k, if bridge { BRIDGE_GROUP } else { f.as_str() })
                }),
            ) {
                let len: i64 = redis::cmd("XLEN")
                    .arg(key)
                    .query_async(&mut con)
                    .await
                    .unwrap_or(0);
                let pending = group_pending(&mut con, key, group).await;
                streams.push(StreamReport {
                    key: key.clone(),
                    length: len,
                    pending,
                });
            }
            out.push(AgentLaneReport {
                acl_user: AclUser::Agent(a.name.clone()).to_string(),
                agent: a.name.to_string(),
                socket: layout.agent_socket(&a.name),
                streams,
            });
        }
        Ok(out)
    }
}

impl Lanes {
    /// How close Redis is to its bound, and the outbox budget and quota
    /// of each agent now.
    pub async fn memory_report(&self, shared: &Shared) -> Result<LanesMemory, Error> {
        let agents = self.agents(shared).len();
        let outbox_budget = super::budgets::outbox_budget(&self.settings);
        let agent_quota = super::budgets::agent_quota(&self.settings, agents);
        let (user, pw) = self.admin()?;
        let server = self.server();
        let mut con = server.connect(&user, &pw).await?;
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut con)
            .await
            .map_err(|source| Error::Redis {
                command: "INFO memory".into(),
                source,
            })?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(LanesMemory {
            used: field("used_memory"),
            maxmemory: field("maxmemory"),
            outbox_budget,
            agent_quota,
        })
    }
}

impl Lanes {
    /// Per responder app: its user, its socket, and the requests in the
    /// agents' outboxes of its family, with how many it has pending.
    pub async fn responder_report(
        &self,
        shared: &Shared,
    ) -> Result<Vec<ResponderLaneReport>, Error> {
        let responders = self.responders(shared);
        if responders.is_empty() {
            return Ok(Vec::new());
        }
        let agents: Vec<_> = self.agents(shared).into_iter().map(|a| a.name).collect();
        let (user, pw) = self.admin()?;
        let server = self.server();
        let lanes_dir = self.layout.lanes_dir();
        let mut con = server.connect(&user, &pw).await?;
        let mut out = Vec::new();
        for r in responders {
            let (mut requests, mut pending) = (0i64, 0i64);
            for a in &agents {
                let key = StreamKey::outbox(a, r.name.as_str()).to_string();
                let len: i64 = redis::cmd("XLEN")
                    .arg(&key)
                    .query_async(&mut con)
                    .await
                    .unwrap_or(0);
                requests += len;
                pending += group_pending(&mut con, &key, group(r.name.as_str())).await;
            }
            out.push(ResponderLaneReport {
                responder: r.name.to_string(),
                acl_user: AclUser::Responder(r.name.to_string()).to_string(),
                socket: responder_socket(&lanes_dir, &r.name),
                requests,
                pending,
            });
        }
        Ok(out)
    }
}

pub(super) async fn group_pending(con: &mut Con, key: &str, group: &str) -> i64 {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(key)
        .query_async(con)
        .await
        .unwrap_or_default();
    groups
        .iter()
        .filter(|g| {
            g.get("name")
                .and_then(|v| redis::from_redis_value::<String>(v).ok())
                .is_some_and(|n| n == group)
        })
        .filter_map(|g| {
            g.get("pending")
                .and_then(|v| redis::from_redis_value::<i64>(v).ok())
        })
        .sum()
}
