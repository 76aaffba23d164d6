//! The agents' lanes and the bridge's routes.

use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::lanes::admin::AgentLane;
use crate::lanes::Error as LanesError;
use crate::supervise::lock;
use oxidepm_proto::{
    AppKind, AppSpec, KeysMigrated, LanesReport, NameReleased, Route, RouteAdded, RouteRemoved,
};

impl Daemon {
    /// Makes the lanes of the agents among `apps` before they are defined.
    pub(super) async fn prepare_lanes(&self, apps: &[AppSpec]) -> Result<(), OpError> {
        // Whatever the lanes' state: a user taken now would hold what the
        // bridge or a responder holds once they run.
        self.lanes.check_own_users(&self.sup, apps)?;
        if apps.iter().any(|a| a.kind == AppKind::Responder) {
            // Checked with the lanes off too: the responder gets its lane,
            // its family's ACL and groups once they are turned on, and a
            // source's or an agent's name would then be taken over.
            self.lanes.check_responders(&self.sup, apps)?;
            let lanes_on = self.lanes.settings.backend != crate::lanes::settings::Backend::Off;
            // A responder's lane, too, exists before its first process.
            if lanes_on && !apps.iter().any(|a| a.kind == AppKind::Agent) {
                let responders = crate::lanes::admin::Lanes::responder_lanes(apps);
                self.lanes
                    .reconcile_with(&self.sup, &[], &responders)
                    .await?;
                return Ok(());
            }
        }
        if apps.iter().any(|a| a.kind == AppKind::Agent) {
            self.lanes.check_responders(&self.sup, apps)?;
            // The lane exists before the agent's first process.
            self.lanes.check_agents(apps)?;
            lock(&self.sup)
                .check_agent_uids(apps)
                .map_err(crate::supervise::Error::from)?;
            let agents = apps
                .iter()
                .filter(|a| a.kind == AppKind::Agent)
                .map(|a| {
                    Ok(AgentLane {
                        name: a.name.parse().map_err(LanesError::BadName)?,
                        uid: a
                            .user
                            .as_deref()
                            .and_then(|u| crate::supervise::spawn::resolve_user(u).ok())
                            .map(|c| c.uid.as_raw())
                            .filter(|u| *u != nix::unistd::getuid().as_raw()),
                    })
                })
                .collect::<Result<Vec<AgentLane>, LanesError>>()?;
            let responders = crate::lanes::admin::Lanes::responder_lanes(apps);
            self.lanes
                .reconcile_with(&self.sup, &agents, &responders)
                .await?;
        }
        Ok(())
    }

    /// `lanes`: every agent's lane, then the bridge.
    pub(super) async fn lanes_report(&self) -> Result<LanesReport, OpError> {
        let agents = self.lanes.report(&self.sup).await?;
        let bridge = self.lanes.routes_report(&self.sup).await?;
        let responders = self.lanes.responder_report(&self.sup).await?;
        let shared = self.lanes.shared_report(&self.sup).await;
        let mut warnings: Vec<String> =
            lock(&self.sup).agent_uid_warnings().into_values().collect();
        warnings.extend(crate::lanes::budgets::quota_note(
            &self.lanes.settings,
            agents.len(),
        ));
        // Without agents the private Redis does not run.
        let memory = if agents.is_empty() {
            None
        } else {
            self.lanes.memory_report(&self.sup).await.ok()
        };
        Ok(LanesReport {
            agents,
            bridge,
            warnings,
            responders,
            shared,
            memory,
        })
    }

    /// `lanes_release`: frees a name another host holds on the shared
    /// server.
    pub(super) async fn lanes_release(&self, name: String) -> Result<NameReleased, OpError> {
        let note = self.lanes.release_force(&name).await?;
        Ok(NameReleased {
            released: name,
            note,
        })
    }

    /// `lanes_migrate_keys`: this host's agents' plain keys to the tagged
    /// form.
    pub(super) async fn lanes_migrate_keys(&self) -> Result<KeysMigrated, OpError> {
        let m = self.lanes.migrate_keys(&self.sup).await?;
        Ok(KeysMigrated {
            migrated: m.renamed.into_iter().map(|(a, b)| [a, b]).collect(),
            kept: m.skipped.into_iter().map(|(a, b)| [a, b]).collect(),
        })
    }

    /// `route_add`: kept in the store; the bridge reloads.
    pub(super) async fn route_add(&self, route: Route) -> Result<RouteAdded, OpError> {
        self.lanes.check_route(&self.sup, &route)?;
        let added = if self.lanes.routes_shared() {
            self.lanes.add_shared_route(&route).await?
        } else {
            lock(&self.sup).store.add_route(&route)?
        };
        if !added {
            return Err(OpError::RouteExists {
                route: Box::new(route),
            });
        }
        let agents = self.lanes.agents(&self.sup);
        self.lanes.ensure_bridge(&self.sup, &agents).await?;
        Ok(RouteAdded { added: route })
    }

    /// `route_rm`: only routes added at runtime; daemon.toml's stay.
    pub(super) async fn route_rm(&self, route: Route) -> Result<RouteRemoved, OpError> {
        if self.lanes.settings.routes.contains(&route) {
            return Err(OpError::RouteInConfig {
                route: Box::new(route),
            });
        }
        let removed = if self.lanes.routes_shared() {
            self.lanes.remove_shared_route(&route).await?
        } else {
            lock(&self.sup).store.remove_route(&route)?
        };
        if !removed {
            return Err(OpError::NoSuchRoute {
                route: Box::new(route),
            });
        }
        let agents = self.lanes.agents(&self.sup);
        self.lanes.ensure_bridge(&self.sup, &agents).await?;
        Ok(RouteRemoved { removed: route })
    }
}
