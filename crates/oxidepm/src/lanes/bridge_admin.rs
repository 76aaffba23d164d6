//! The bridge's side of the lanes: its configuration, the app that runs
//! it, and the routing table with its counters.

use super::admin::{
    connect, ensure_app, find_app, group_pending, is_running, sibling, unavailable, write_atomic,
    AgentLane, Lanes,
};
use super::layout::BRIDGE_APP;
use crate::supervise::{lock, Shared};
use oxidepm_lanes::acl;
use oxidepm_lanes::secret as secrets;
use oxidepm_proto::{
    AppKind, AppSpec, BridgeCounters, Counters, ErrorBody, ErrorCode, Route, RouteOrigin,
    RouteReport, RoutesReport,
};
use serde_json::json;

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
    pub async fn ensure_bridge(
        &self,
        shared: &Shared,
        agents: &[AgentLane],
    ) -> Result<(), ErrorBody> {
        let Some(exe) = sibling("oxidepm-bridge") else {
            log::warn!("oxidepm-bridge is missing beside oxidepmd: no bridge runs");
            return Ok(());
        };
        let l = &self.layout;
        let token = secrets::path(&l.secrets_dir(), "webhook_token");
        secrets::ensure(&l.secrets_dir(), "webhook_token")
            .map_err(|e| unavailable(format!("cannot make the webhook token: {e}")))?;
        // The bridge serves the sources it has settings for; outboxes of
        // the others keep their entries until one is configured.
        let served: Vec<&String> = self
            .settings
            .sources
            .iter()
            .filter(|s| match s.as_str() {
                "webhook" => self.settings.webhook.is_some(),
                "email" => self.settings.email.is_some(),
                _ => false,
            })
            .collect();
        if served.is_empty() {
            log::info!(
                "lanes: no source is configured ([lanes.webhook], [lanes.email]); no bridge runs"
            );
            return Ok(());
        }
        let routes: Vec<Route> = self
            .routes(shared)
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| served.contains(&&r.source))
            .collect();
        let mut conf = json!({
            "redis_socket": l.redis_socket(),
            "password_file": secrets::path(&l.secrets_dir(), acl::BRIDGE_USER),
            "agents": agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
            "sources": served,
            "routes": routes,
            "default_agent": self.settings.default_agent,
        });
        if let Some(w) = &self.settings.webhook {
            conf["webhook"] = json!({
                "listen": w.listen,
                "token_file": token,
                "deliver": w.deliver,
            });
        }
        if let Some(e) = &self.settings.email {
            conf["email"] = serde_json::to_value(e).unwrap_or_default();
        }
        write_atomic(&l.bridge_conf(), conf.to_string().as_bytes())
            .map_err(|e| unavailable(format!("cannot write the bridge configuration: {e}")))?;
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

    /// The routing table with where each route comes from, the default
    /// agent and the bridge's counters.
    pub async fn routes_report(&self, shared: &Shared) -> Result<RoutesReport, ErrorBody> {
        let routes: Vec<RouteReport> = self
            .routes(shared)
            .into_iter()
            .map(|(r, origin)| RouteReport::new(r, origin))
            .collect();
        let pw =
            std::fs::read_to_string(secrets::path(&self.layout.secrets_dir(), acl::ADMIN_USER));
        let sock = self.layout.redis_socket();
        let outboxes: Vec<String> = self
            .agents(shared)
            .iter()
            .flat_map(|a| {
                self.settings
                    .sources
                    .iter()
                    .map(move |s| format!("{}:{s}:outbox", a.name))
            })
            .collect();
        let counters = match pw {
            Err(_) => Some(Counters::Unread {}),
            Ok(pw) => tokio::task::spawn_blocking(move || -> Counters {
                let Ok(mut con) = connect(&sock, pw.trim()) else {
                    return Counters::Unread {};
                };
                let pending: i64 = outboxes
                    .iter()
                    .map(|k| group_pending(&mut con, k, "bridge"))
                    .sum();
                let stats: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                    .arg("bridge:stats")
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
                        .arg("bridge:unrouted")
                        .query::<i64>(&mut con)
                        .unwrap_or(0),
                })
            })
            .await
            .ok(),
        };
        Ok(RoutesReport {
            counters,
            default_agent: self.settings.default_agent.clone(),
            routes,
        })
    }

    /// Checks a route given at runtime.
    pub fn check_route(&self, shared: &Shared, r: &Route) -> Result<(), ErrorBody> {
        let bad = |m: String| ErrorBody::new(ErrorCode::BadRequest, m);
        r.check().map_err(bad)?;
        if !self.settings.sources.contains(&r.source) {
            return Err(bad(format!(
                "{:?} is not a source of the lanes ({}); add it to [lanes] sources in daemon.toml",
                r.source,
                self.settings.sources.join(", ")
            )));
        }
        if !self.agents(shared).iter().any(|a| a.name == r.agent) {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("no agent named {:?}; define it first", r.agent),
            ));
        }
        Ok(())
    }
}
