//! `oxidepm route add/remove/list` on a shared Redis (`[lanes]
//! redis_url`): routes go to the hash every host's bridge reads
//! (`oxidepm:routes`, see [`oxidepm_lanes::shared_routes`]), so a route
//! added on one host takes effect on all. On one host routes stay in the
//! store (SQLite) and the bridge's file, as before.

use super::error::Error;
use super::handle::{AgentLane, Lanes};
use super::server::Con;
use crate::supervise::Shared;
use oxidepm_lanes::bridge_config::RouteConfig;
use oxidepm_lanes::shared_routes::{decode, encode, field, MAX_SHARED_ROUTES, SHARED_ROUTES_KEY};
use oxidepm_lanes::{AgentName, KeyForm};
use oxidepm_proto::Route;

/// Adds `route`; false if a route of the same source and selector exists
/// (it is left as it is: remove it first).
pub async fn add(con: &mut Con, route: &RouteConfig) -> redis::RedisResult<bool> {
    redis::cmd("HSETNX")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(route))
        .arg(encode(route))
        .query_async(con)
        .await
}

/// Removes the route of `route`'s source and selector; false if there was
/// none.
pub async fn remove(con: &mut Con, route: &RouteConfig) -> redis::RedisResult<bool> {
    redis::cmd("HDEL")
        .arg(SHARED_ROUTES_KEY)
        .arg(field(route))
        .query_async(con)
        .await
}

/// The shared routes, sorted by field, and what could not be read (each
/// with why and what to do).
pub async fn list(con: &mut Con) -> redis::RedisResult<(Vec<RouteConfig>, Vec<String>)> {
    let n: usize = redis::cmd("HLEN")
        .arg(SHARED_ROUTES_KEY)
        .query_async(con)
        .await?;
    if n > MAX_SHARED_ROUTES {
        return Ok((
            Vec::new(),
            vec![format!(
                "{SHARED_ROUTES_KEY} holds {n} routes, more than the {MAX_SHARED_ROUTES} a bridge takes; \
                 remove some with `oxidepm route remove`"
            )],
        ));
    }
    let mut raw: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
        .arg(SHARED_ROUTES_KEY)
        .query_async(con)
        .await?;
    raw.sort();
    let mut routes = Vec::with_capacity(raw.len());
    let mut bad = Vec::new();
    for (f, v) in raw {
        match decode(&f, &v) {
            Ok(r) => routes.push(r),
            Err(e) => bad.push(e.to_string()),
        }
    }
    Ok((routes, bad))
}

/// The agents of every host on the shared server: names with a live lease
/// in the registry that are agents (an `agent_<name>` user exists; a
/// responder app's name has none), so that every bridge routes to and
/// drains the outboxes of all of them.
pub async fn server_agents(con: &mut Con) -> redis::RedisResult<Vec<AgentName>> {
    use super::registry::{now_ms, REGISTRY_KEY};
    let n: usize = redis::cmd("HLEN")
        .arg(REGISTRY_KEY)
        .query_async(con)
        .await?;
    if n > MAX_SHARED_ROUTES {
        log::error!(
            "lanes: {REGISTRY_KEY} holds {n} names, more than the {MAX_SHARED_ROUTES} a bridge \
             serves; only this host's agents are served"
        );
        return Ok(Vec::new());
    }
    let entries: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(REGISTRY_KEY)
        .query_async(con)
        .await?;
    let now = now_ms(con).await?;
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(con).await?;
    let mut out: Vec<AgentName> = entries
        .into_iter()
        .filter(|(_, v)| {
            v.split_once(' ')
                .and_then(|(_, ms)| ms.parse::<u64>().ok())
                .is_some_and(|ends| ends > now)
        })
        .filter_map(|(name, _)| name.parse::<AgentName>().ok())
        .filter(|a| {
            users
                .iter()
                .any(|u| *u == oxidepm_lanes::AclUser::Agent(a.clone()).to_string())
        })
        .collect();
    out.sort();
    Ok(out)
}

impl Lanes {
    /// Reads the agents of every host (see [`server_agents`]) into the
    /// lanes' state; true when they changed. Without `redis_url`, none.
    pub async fn refresh_server_agents(&self) -> Result<bool, Error> {
        if self.settings.redis_url.is_none() {
            return Ok(false);
        }
        // This runs every second: the connection of the last read is
        // used again (a TLS handshake and AUTH each time would cost the
        // server more than the reads), and dropped after an error.
        let kept = self.state.discovery_con.take();
        let mut con = match kept {
            Some(c) => c,
            None => self.connect_admin().await?,
        };
        let now = server_agents(&mut con)
            .await
            .map_err(|source| Error::Redis {
                command: "HGETALL oxidepm:agents / ACL USERS".into(),
                source,
            })?;
        self.state.discovery_con.put(con);
        let mut known = self
            .state
            .server_agents
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let changed = *known != now;
        *known = now;
        Ok(changed)
    }

    /// This host's agents and those of every other host sharing the server.
    pub(super) fn bridge_agents(&self, own: &[AgentLane]) -> Vec<AgentName> {
        let mut all: Vec<AgentName> = own.iter().map(|a| a.name.clone()).collect();
        all.extend(
            self.state
                .server_agents
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        all.sort();
        all.dedup();
        all
    }

    /// Whether routes are kept on the shared server: with `[lanes]
    /// redis_url` and the tagged key form, whose bridge users may read
    /// them (`acl::bridge_rules`); `key_form = "plain"` keeps each host's
    /// routes its own, as on one host.
    pub fn routes_shared(&self) -> bool {
        self.settings.redis_url.is_some() && self.settings.key_form() == KeyForm::Tagged
    }

    /// `route add` on a shared server: into `oxidepm:routes`, which every
    /// host's bridge reads; false when a route of its selector is there.
    pub async fn add_shared_route(&self, route: &Route) -> Result<bool, Error> {
        self.with_shared_routes(route, true).await
    }

    /// `route remove` on a shared server; false when there was none.
    pub async fn remove_shared_route(&self, route: &Route) -> Result<bool, Error> {
        self.with_shared_routes(route, false).await
    }

    async fn with_shared_routes(&self, route: &Route, adding: bool) -> Result<bool, Error> {
        let conf = super::bridge_admin::route_config(route)?;
        let mut con = self.connect_admin().await?;
        let done = match adding {
            true => add(&mut con, &conf).await,
            false => remove(&mut con, &conf).await,
        };
        done.map_err(|source| Error::Redis {
            command: format!("HSET/HDEL {SHARED_ROUTES_KEY}"),
            source,
        })
    }

    /// The routes on the shared server, as `Route`s (those that cannot be
    /// read are logged).
    pub async fn shared_routes(&self, shared: &Shared) -> Vec<Route> {
        let _ = shared;
        if !self.routes_shared() {
            return Vec::new();
        }
        let read = async {
            let mut con = self.connect_admin().await.ok()?;
            list(&mut con).await.ok()
        }
        .await;
        let Some((routes, bad)) = read else {
            log::warn!("lanes: the shared routes cannot be read now");
            return Vec::new();
        };
        for b in bad {
            log::warn!("lanes: {b}");
        }
        routes
            .into_iter()
            .map(|r| r.map_agent(|a| a.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_testkit::shared::{SharedRedis, OXIDEPM_PASSWORD, OXIDEPM_USER};

    #[tokio::test]
    async fn routes_added_on_one_host_are_listed_on_another_and_removed_once() {
        let server = SharedRedis::start(false);
        let at = super::super::server::Server::Shared {
            url: server.url().parse().unwrap(),
            tls: server.tls_files(),
        };
        // Two hosts' daemons, as the admin user a person creates.
        let pw = oxidepm_lanes::Secret::new(OXIDEPM_PASSWORD);
        let mut host_a = at.connect(OXIDEPM_USER, &pw).await.unwrap();
        let mut host_b = at.connect(OXIDEPM_USER, &pw).await.unwrap();
        let route = RouteConfig {
            source: "webhook".into(),
            channel: Some("ops".into()),
            guild: None,
            address: None,
            agent: "alice".parse().unwrap(),
        };
        assert!(add(&mut host_a, &route).await.unwrap());
        let other = RouteConfig {
            agent: "bob".parse().unwrap(),
            ..route.clone()
        };
        // The same selector from another host: refused, the first stays.
        assert!(!add(&mut host_b, &other).await.unwrap());
        assert_eq!(
            list(&mut host_b).await.unwrap(),
            (vec![route.clone()], vec![])
        );
        assert!(remove(&mut host_b, &route).await.unwrap());
        assert!(!remove(&mut host_a, &route).await.unwrap());
        assert_eq!(list(&mut host_a).await.unwrap(), (vec![], vec![]));
    }
}
