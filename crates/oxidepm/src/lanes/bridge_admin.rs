//! The bridge's side of the lanes: its configuration, the app that runs
//! it, and the routing table with its counters.
//!
//! A route whose agent is not (or no longer) defined is parked, not
//! dropped and not a reason to refuse the bridge's configuration: the
//! bridge sends its messages to `bridge:unrouted` with the reason, and
//! `route list` shows it. It is in force again once the agent is defined.

use super::admin::{
    connect, ensure_app, find_app, group_pending, is_running, sibling, write_json, AgentLane, Lanes,
};
use super::error::Error;
use super::layout::BRIDGE_APP;
use crate::supervise::{lock, Shared};
use oxidepm_lanes::bridge_config::{
    BridgeConfig, EmailConfig, RouteConfig, WebhookConfig, STATUS_KEY,
};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::stream_key::{BRIDGE_GROUP, STATS_KEY, UNROUTED_KEY};
use oxidepm_lanes::{AclUser, Secret, StreamKey};
use oxidepm_proto::{
    AppKind, AppSpec, BridgeCounters, Counters, Route, RouteOrigin, RouteReport, RoutesReport,
};

/// The name of the webhook's bearer token among the secrets.
const WEBHOOK_TOKEN: &str = "webhook_token";

impl Lanes {
    /// Routes: those of daemon.toml (`config`) then those added at runtime.
    pub fn routes(&self, shared: &Shared) -> Vec<(Route, RouteOrigin)> {
        let mut out: Vec<(Route, RouteOrigin)> = self
            .settings
            .routes
            .iter()
            .cloned()
            .map(|r| (r, RouteOrigin::Config))
            .collect();
        match lock(shared).store.routes() {
            Ok(rs) => out.extend(rs.into_iter().map(|r| (r, RouteOrigin::Runtime))),
            Err(e) => log::error!("cannot read routes: {e}"),
        }
        out
    }

    /// Writes the bridge's configuration and runs it (an adapter app with
    /// the `bridge` identity), or has it reload (SIGHUP) when it runs.
    pub async fn ensure_bridge(&self, shared: &Shared, agents: &[AgentLane]) -> Result<(), Error> {
        let Some(exe) = sibling("oxidepm-bridge") else {
            log::warn!("oxidepm-bridge is missing beside oxidepmd: no bridge runs");
            return Ok(());
        };
        let l = &self.layout;
        secrets::ensure(&l.secrets_dir(), WEBHOOK_TOKEN).map_err(Error::WebhookToken)?;
        let routes: Vec<Route> = self.routes(shared).into_iter().map(|(r, _)| r).collect();
        if !self.write_bridge_conf(agents, &routes)? {
            log::info!(
                "lanes: no source is configured ([lanes.webhook], [lanes.email]); no bridge runs"
            );
            return Ok(());
        }
        let id = find_app(shared, BRIDGE_APP);
        match id {
            Some(id) if is_running(shared, id) => {
                if let Some(pid) = lock(shared).app(id).and_then(|a| a.rt.pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGHUP,
                    );
                }
                Ok(())
            }
            _ => {
                let mut s = AppSpec::new(
                    BRIDGE_APP,
                    exe.display().to_string(),
                    vec!["--config".into(), l.bridge_conf().display().to_string()],
                );
                s.kind = AppKind::Adapter;
                s.protected = true;
                ensure_app(shared, s, id).await
            }
        }
    }

    /// Writes the bridge's configuration; false (and nothing written) when
    /// no source has settings.
    pub(super) fn write_bridge_conf(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<bool, Error> {
        let Some(conf) = self.bridge_conf(agents, routes)? else {
            return Ok(false);
        };
        write_json(&self.layout.bridge_conf(), &conf).map_err(Error::BridgeConf)?;
        Ok(true)
    }

    /// The bridge's configuration for `agents` and `routes`: the sources
    /// it has settings for, and their routes; `None` when there are none.
    fn bridge_conf(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<Option<BridgeConfig>, Error> {
        let l = &self.layout;
        // The bridge serves the sources it has settings for; outboxes of
        // the others keep their entries until one is configured.
        let served: Vec<String> = self
            .settings
            .sources
            .iter()
            .filter(|s| match s.as_str() {
                "webhook" => self.settings.webhook.is_some(),
                "email" => self.settings.email.is_some(),
                _ => false,
            })
            .cloned()
            .collect();
        if served.is_empty() {
            return Ok(None);
        }
        let mut conf = BridgeConfig::new(
            l.redis_socket(),
            secrets::path(&l.secrets_dir(), AclUser::Bridge),
        );
        conf.agents = agents.iter().map(|a| a.name.clone()).collect();
        conf.routes = routes
            .iter()
            .filter(|r| served.contains(&r.source))
            .filter_map(|r| match route_config(r) {
                Ok(c) => Some(c),
                Err(e) => {
                    // Shown by `route list`; the other routes go on.
                    log::warn!("route {} left out: {e}", r.describe());
                    None
                }
            })
            .collect();
        conf.sources = served;
        if let Some(m) = self.settings.maxlen {
            conf.inbox_maxlen = m;
        }
        let b = &self.settings.bridge;
        let o = &mut conf.outbox;
        o.max_entry_bytes = b.max_entry_bytes.unwrap_or(o.max_entry_bytes);
        o.buffer_bytes = b.buffer_bytes.unwrap_or(o.buffer_bytes);
        o.dead_maxlen = b.dead_maxlen.unwrap_or(o.dead_maxlen);
        conf.default_agent = self.settings.default_agent.clone();
        conf.webhook = self.settings.webhook.as_ref().map(|w| WebhookConfig {
            deliver: w.deliver.clone(),
            ..WebhookConfig::new(w.listen, secrets::path(&l.secrets_dir(), WEBHOOK_TOKEN))
        });
        conf.email = self.settings.email.as_ref().map(|e| EmailConfig {
            maildir: e.maildir.clone(),
            smtp: e.smtp.clone(),
            from: e.from.clone(),
            domain: e.domain.clone(),
        });
        Ok(Some(conf))
    }

    /// The routing table with where each route comes from, the default
    /// agent and the bridge's counters.
    pub async fn routes_report(&self, shared: &Shared) -> Result<RoutesReport, Error> {
        let all = self.routes(shared);
        let plain: Vec<Route> = all.iter().map(|(r, _)| r.clone()).collect();
        let (parked, default_agent_parked) = self.parked(&self.agents(shared), &plain)?;
        let routes: Vec<RouteReport> = all
            .into_iter()
            .zip(parked)
            .map(|((r, origin), why)| RouteReport {
                parked: why,
                ..RouteReport::new(r, origin)
            })
            .collect();
        let pw = Secret::read(&secrets::path(&self.layout.secrets_dir(), AclUser::Admin));
        let sock = self.layout.redis_socket();
        let outboxes: Vec<String> = self
            .agents(shared)
            .iter()
            .flat_map(|a| {
                self.settings
                    .sources
                    .iter()
                    .map(move |s| StreamKey::outbox(&a.name, s).to_string())
            })
            .collect();
        let (counters, reload_error) = match pw {
            Err(_) => (Some(Counters::Unread {}), None),
            Ok(pw) => match tokio::task::spawn_blocking(move || -> (Counters, Option<String>) {
                let Ok(mut con) = connect(&sock, &pw) else {
                    return (Counters::Unread {}, None);
                };
                let status: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(STATUS_KEY)
                    .arg("reload_error")
                    .arg("reload_failed_at")
                    .query(&mut con)
                    .unwrap_or_default();
                let reload_error = match status.as_slice() {
                    [Some(e), at] => Some(format!(
                        "{e} (at {}); the bridge runs with its previous configuration",
                        at.as_deref().unwrap_or("?")
                    )),
                    _ => None,
                };
                let pending: i64 = outboxes
                    .iter()
                    .map(|k| group_pending(&mut con, k, BRIDGE_GROUP))
                    .sum();
                let stats: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                    .arg(STATS_KEY)
                    .query(&mut con)
                    .unwrap_or_default();
                let stat = |k: &str| stats.get(k).copied().unwrap_or(0);
                let counters = Counters::Read(BridgeCounters {
                    dead: stat("dead"),
                    delivered: stat("delivered"),
                    malformed: stat("malformed"),
                    pending,
                    retried: stat("retried"),
                    routed: stat("routed"),
                    too_large: stat("too_large"),
                    trimmed: stat("trimmed"),
                    unrouted: stat("unrouted"),
                    unrouted_stream: redis::cmd("XLEN")
                        .arg(UNROUTED_KEY)
                        .query::<i64>(&mut con)
                        .unwrap_or(0),
                });
                (counters, reload_error)
            })
            .await
            {
                Ok((c, e)) => (Some(c), e),
                Err(_) => (None, None),
            },
        };
        Ok(RoutesReport {
            counters,
            default_agent: self.settings.default_agent.as_ref().map(|a| a.to_string()),
            default_agent_parked,
            reload_error,
            routes,
        })
    }

    /// Checks a route given at runtime.
    pub fn check_route(&self, shared: &Shared, r: &Route) -> Result<(), Error> {
        r.check()?;
        if !self.settings.sources.contains(&r.source) {
            return Err(Error::UnknownSource {
                family: r.source.clone(),
                sources: self.settings.sources.clone(),
            });
        }
        if !self
            .agents(shared)
            .iter()
            .any(|a| a.name == r.agent.as_str())
        {
            return Err(Error::NoSuchAgent {
                agent: r.agent.clone(),
            });
        }
        // The bridge keeps the first of two routes for the same messages;
        // a second one to another agent would do nothing but confuse.
        if let Some((existing, _)) = self
            .routes(shared)
            .into_iter()
            .find(|(o, _)| same_match(o, r) && o.agent != r.agent)
        {
            return Err(Error::RouteConflict {
                route: Box::new(r.clone()),
                existing: Box::new(existing),
            });
        }
        Ok(())
    }

    /// Why each of `routes` is parked (`None`: in force) with these
    /// agents, and why the default agent is, as the bridge decides it.
    fn parked(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<(Vec<Option<String>>, Option<String>), Error> {
        let Some(conf) = self.bridge_conf(agents, routes)? else {
            let why = "no source has settings ([lanes.webhook], [lanes.email]): no bridge runs";
            return Ok((vec![Some(why.to_string()); routes.len()], None));
        };
        let plan = conf.route_plan();
        let each = routes
            .iter()
            .map(|r| {
                if !conf.sources.contains(&r.source) {
                    return Some(format!(
                        "the bridge does not serve source {:?}: it has no [lanes.{}] section",
                        r.source, r.source
                    ));
                }
                match route_config(r) {
                    Ok(c) => plan.why_parked(&c).map(|w| w.to_string()),
                    Err(e) => Some(e.to_string()),
                }
            })
            .collect();
        Ok((each, plan.default_parked.map(|w| w.to_string())))
    }

    /// What deleting agent `agent` does to the routes: `None` when it has
    /// none (nor is it the default agent).
    pub fn parked_by_deleting(&self, shared: &Shared, agent: &str) -> Option<String> {
        let mine: Vec<String> = self
            .routes(shared)
            .into_iter()
            .filter(|(r, _)| r.agent == agent)
            .map(|(r, origin)| format!("{} ({})", r.describe(), origin.as_str()))
            .collect();
        let default = self
            .settings
            .default_agent
            .as_ref()
            .is_some_and(|d| d.as_str() == agent);
        if mine.is_empty() && !default {
            return None;
        }
        let mut what = Vec::new();
        if !mine.is_empty() {
            what.push(format!("its routes are parked: {}", mine.join(", ")));
        }
        if default {
            what.push("it was the default agent, which is parked".to_string());
        }
        Some(format!(
            "{}; their messages go to bridge:unrouted until an agent {agent:?} is defined again \
             (`oxidepm route list` shows them; `oxidepm route rm` removes a runtime route)",
            what.join("; ")
        ))
    }
}

/// The bridge's form of a route, or why its agent is not an agent name.
fn route_config(r: &Route) -> Result<RouteConfig, Error> {
    Ok(RouteConfig {
        source: r.source.clone(),
        channel: r.channel.clone(),
        guild: r.guild.clone(),
        address: r.address.clone(),
        agent: r.agent.parse().map_err(|source| Error::RouteAgent {
            route: Box::new(r.clone()),
            source,
        })?,
    })
}

/// Whether two routes match the same messages (addresses without regard
/// to case).
fn same_match(a: &Route, b: &Route) -> bool {
    let lower = |v: &Option<String>| v.as_ref().map(|s| s.to_lowercase());
    a.source == b.source
        && a.channel == b.channel
        && a.guild == b.guild
        && lower(&a.address) == lower(&b.address)
}
