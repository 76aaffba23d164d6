//! The bridge's side of the lanes: its configuration, the app that runs
//! it, and the routing table with its counters.

use super::admin::{
    connect, ensure_app, find_app, group_pending, is_running, sibling, write_json, AgentLane, Lanes,
};
use super::error::Error;
use super::layout::BRIDGE_APP;
use crate::supervise::{lock, Shared};
use oxidepm_lanes::bridge_config::{BridgeConfig, EmailConfig, RouteConfig, WebhookConfig};
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
            .map(|r| {
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
            })
            .collect::<Result<_, Error>>()?;
        conf.sources = served;
        conf.default_agent = self.settings.default_agent.clone();
        conf.webhook = self.settings.webhook.as_ref().map(|w| WebhookConfig {
            deliver: w.deliver.clone(),
            limits: w.limits,
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
        let routes: Vec<RouteReport> = self
            .routes(shared)
            .into_iter()
            .map(|(r, origin)| RouteReport::new(r, origin))
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
        let counters = match pw {
            Err(_) => Some(Counters::Unread {}),
            Ok(pw) => tokio::task::spawn_blocking(move || -> Counters {
                let Ok(mut con) = connect(&sock, &pw) else {
                    return Counters::Unread {};
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
                Counters::Read(BridgeCounters {
                    dead: stat("dead"),
                    delivered: stat("delivered"),
                    pending,
                    retried: stat("retried"),
                    routed: stat("routed"),
                    unrouted: stat("unrouted"),
                    unrouted_stream: redis::cmd("XLEN")
                        .arg(UNROUTED_KEY)
                        .query::<i64>(&mut con)
                        .unwrap_or(0),
                })
            })
            .await
            .ok(),
        };
        Ok(RoutesReport {
            counters,
            default_agent: self.settings.default_agent.as_ref().map(|a| a.to_string()),
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
        Ok(())
    }
}
