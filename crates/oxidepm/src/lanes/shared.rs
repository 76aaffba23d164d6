//! The lanes on a shared server (`[lanes] redis_url`): claiming this
//! host's names in the registry before anything is made for them,
//! renewing their leases, telling which gone lanes are still this host's
//! to delete, and `lanes release --force`.

use super::error::Error;
use super::handle::{AgentLane, Lanes};
use super::live::Own;
use super::purge::Gone;
use super::registry::{self, Forced, Taken};
use super::responders::ResponderLane;
use crate::supervise::Shared;
use oxidepm_lanes::acl::{AGENT_PREFIX, RESPONDER_PREFIX};
use oxidepm_proto::{NameLease, SharedLanesReport};
use std::time::Duration;

/// How often the daemon looks for the other hosts' agents: a new agent on
/// another host is reachable through this host's bridge about this long
/// after it starts (two reads on the shared server a second per host).
const DISCOVERY_EVERY: Duration = Duration::from_secs(1);

fn registry_error(what: &str) -> impl FnOnce(redis::RedisError) -> Error + '_ {
    move |source| Error::Redis {
        command: format!("EVAL ({what} in {})", registry::REGISTRY_KEY),
        source,
    }
}

fn taken(t: Taken) -> Error {
    Error::NameTaken {
        name: t.name,
        host: t.host,
        secs_left: t.ms_left.div_ceil(1000),
    }
}

impl Lanes {
    fn lease_ms(&self) -> u64 {
        self.settings.lease_secs.saturating_mul(1000)
    }

    /// Claims the names of the agents and responders about to be defined
    /// (`extra*`: all or none; refused with the host holding one), and
    /// renews the others'; returns the names another host holds now,
    /// whose lanes this host stops serving.
    pub(super) async fn claim_names(
        &self,
        extra: &[AgentLane],
        extra_responders: &[ResponderLane],
        agents: &[AgentLane],
        responders: &[ResponderLane],
    ) -> Result<Vec<String>, Error> {
        let new: Vec<String> = extra
            .iter()
            .map(|a| a.name.to_string())
            .chain(extra_responders.iter().map(|r| r.name.to_string()))
            .collect();
        let held: Vec<String> = agents
            .iter()
            .map(|a| a.name.to_string())
            .chain(responders.iter().map(|r| r.name.to_string()))
            .filter(|n| !new.contains(n))
            .collect();
        let mut con = self.connect_admin().await?;
        let (host, ms) = (self.host_id.as_str(), self.lease_ms());
        registry::claim(&mut con, host, ms, &new)
            .await
            .map_err(registry_error("claim"))?
            .map_err(taken)?;
        let lost = registry::renew(&mut con, host, ms, &held)
            .await
            .map_err(registry_error("renew"))?;
        Ok(lost.into_iter().map(lost_name).collect())
    }

    /// Of the gone lanes (their password files), which this host may
    /// delete: agents nobody else holds, responders this host holds, and
    /// every user with this host's id. Returns that, and the password
    /// files of the lanes another host holds now (left alone).
    pub(super) async fn own_scope(
        &self,
        gone: &[Gone],
        gone_responders: &[String],
    ) -> Result<(Own, Vec<String>), Error> {
        let mut files: Vec<(String, String, bool)> = gone
            .iter()
            .filter_map(|g| Some((g.secret.clone(), g.agent.as_ref()?.to_string(), true)))
            .collect();
        files.extend(gone_responders.iter().filter_map(|u| {
            let name = u.strip_prefix(RESPONDER_PREFIX)?;
            Some((u.clone(), name.to_string(), false))
        }));
        let names: Vec<String> = files.iter().map(|(_, n, _)| n.clone()).collect();
        let mut con = self.connect_admin().await?;
        let leases = registry::leases(&mut con, &names)
            .await
            .map_err(registry_error("HMGET"))?;
        let mut own = Own {
            suffix: format!("@{}", self.host_id),
            deletable: Vec::new(),
        };
        let mut not_ours = Vec::new();
        for ((file, _, agent), lease) in files.into_iter().zip(leases) {
            let ours = match lease {
                Some(l) => l.host == self.host_id,
                // An agent's name nobody holds is still this host's user
                // (its password file says so); a responder of
                // `[lanes] responders` is never claimed, its user is
                // host-qualified.
                None => agent,
            };
            if ours {
                own.deletable.push(file);
            } else {
                log::warn!("lanes: {file} is another host's now; its user and keys are left alone");
                not_ours.push(file);
            }
        }
        // Bad names (no agent in them) have no lease to look at: ours only
        // when this host made them, which their prefix cannot tell.
        own.deletable
            .retain(|u| u.starts_with(AGENT_PREFIX) || u.starts_with(RESPONDER_PREFIX));
        Ok((own, not_ours))
    }

    /// Renews this host's leases every third of `lease_secs`, for as long
    /// as the daemon runs; a name another host holds now is logged and
    /// its lane no longer served (the next reconcile drops it). Every
    /// second in between, looks for the other hosts' agents coming and
    /// going, which this host's bridge routes to and drains.
    pub fn spawn_renewal(&self, shared: Shared) {
        if !self.is_shared() {
            return;
        }
        let lanes = self.clone();
        tokio::spawn(async move {
            let every = Duration::from_millis((lanes.lease_ms() / 3).max(1000));
            let mut renewed_at = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(DISCOVERY_EVERY).await;
                match lanes.refresh_server_agents().await {
                    Ok(true) => {
                        let own = lanes.agents(&shared);
                        if let Err(e) = lanes.ensure_bridge(&shared, &own).await {
                            log::error!("lanes: {e}");
                        }
                    }
                    Ok(false) => {}
                    Err(e) => log::warn!("lanes: cannot read the other hosts' agents: {e}"),
                }
                if renewed_at.elapsed() >= every {
                    renewed_at = tokio::time::Instant::now();
                    lanes.renew(&shared).await;
                }
            }
        });
    }

    /// This host's agent and responder names.
    fn own_names(&self, shared: &Shared) -> Vec<String> {
        let agents = self.agents(shared).into_iter().map(|a| a.name.to_string());
        let responders = self
            .responders(shared)
            .into_iter()
            .map(|r| r.name.to_string());
        agents.chain(responders).collect()
    }

    /// One renewal of this host's names.
    async fn renew(&self, shared: &Shared) {
        let names = self.own_names(shared);
        let renewed = async {
            let mut con = self.connect_admin().await?;
            registry::renew(&mut con, &self.host_id, self.lease_ms(), &names)
                .await
                .map_err(registry_error("renew"))
        }
        .await;
        match renewed {
            Ok(lost) if lost.is_empty() => {}
            Ok(lost) => {
                for t in lost {
                    lost_name(t);
                }
                if let Err(e) = self.reconcile(shared, &[]).await {
                    log::error!("lanes: {e}");
                }
            }
            Err(e) => log::warn!("lanes: cannot renew this host's names: {e}"),
        }
    }

    /// `lanes release <name> --force`: frees a name another host holds
    /// (one that is gone for good); says whose it was.
    pub async fn release_force(&self, name: &str) -> Result<String, Error> {
        if !self.is_shared() {
            return Err(Error::NoRegistry);
        }
        let mut con = self.connect_admin().await?;
        let forced = registry::force_release(&mut con, &self.host_id, name)
            .await
            .map_err(registry_error("force release"))?;
        match forced {
            Forced::Own => Err(Error::ReleaseOwn {
                name: name.to_string(),
                host: self.host_id.clone(),
            }),
            Forced::Free => Ok(format!("nobody held {name:?}; it is free")),
            Forced::Freed { host } => Ok(format!(
                "released {name:?}, which host {host} held; that host stops serving it at its next renewal"
            )),
        }
    }

    /// Where the shared server is, this host's id, and the registry's
    /// entry of each of this host's names (`None` without `redis_url`).
    pub async fn shared_report(&self, shared: &Shared) -> Option<SharedLanesReport> {
        let url = self.settings.redis_url.as_ref()?.to_string();
        let names = self.own_names(shared);
        let read = async {
            let mut con = self.connect_admin().await.ok()?;
            let leases = registry::leases(&mut con, &names).await.ok()?;
            let now = registry::now_ms(&mut con).await.ok()?;
            Some((leases, now))
        }
        .await;
        let names = match read {
            Some((leases, now)) => names
                .into_iter()
                .zip(leases)
                .map(|(name, l)| NameLease {
                    name,
                    host: l.as_ref().map(|l| l.host.clone()),
                    lease_ms_left: l.map(|l| l.ends_ms as i64 - now as i64),
                })
                .collect(),
            // The server did not answer: the names, without their entries.
            None => names
                .into_iter()
                .map(|name| NameLease {
                    name,
                    host: None,
                    lease_ms_left: None,
                })
                .collect(),
        };
        Some(SharedLanesReport {
            url,
            host_id: self.host_id.clone(),
            names,
        })
    }
}

/// Logs a name lost to another host; returns it.
fn lost_name(t: Taken) -> String {
    log::error!(
        "lanes: host {} holds the name {} now (this host's lease ended): this host stops serving its lane; \
         delete the app here, or free the name on that host",
        t.host,
        t.name
    );
    t.name
}
