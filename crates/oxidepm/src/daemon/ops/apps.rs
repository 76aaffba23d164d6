//! Reading and changing apps: status, show, define, start, stop, restart,
//! delete.

use crate::access::Caller;
use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::supervise::{control, define, lock, logfile, logwriters};
use oxidepm_proto::{Actor, AppAction, AppInfo, AppKind, AppSpec, Class, Defined, Status, Stopped};

/// Environment values are shown to humans only.
fn reveal(caller: &Caller) -> bool {
    caller.actor.class == Class::Human
}

/// Writes down whom a non-human's apps without a `user` run as: the
/// non-human itself (the gate checked that uid), never the daemon.
pub(super) fn run_as_definer(caller: &Caller, apps: &mut [AppSpec], daemon_uid: u32) {
    let Some(uid) = caller.uid.filter(|u| *u != daemon_uid) else {
        return;
    };
    if caller.actor.class == Class::Human {
        return;
    }
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    for spec in apps.iter_mut().filter(|s| s.user.is_none()) {
        spec.user = Some(name.clone());
    }
}

impl Daemon {
    /// `status`: every app, briefly.
    pub(super) fn status(&self, caller: &Caller) -> Vec<AppInfo> {
        let s = lock(&self.sup);
        s.apps()
            .map(|a| a.info(false, reveal(caller), None))
            .collect()
    }

    /// `show`: the selected apps with their spec and log files.
    pub(super) fn show(&self, caller: &Caller, target: &str) -> Result<Vec<AppInfo>, OpError> {
        let s = lock(&self.sup);
        let ids = s.resolve(target)?;
        Ok(ids
            .iter()
            .filter_map(|id| s.app(*id))
            .map(|a| {
                let [o, e] = s.log_paths(&a.spec.name);
                let dropped = logfile::dropped_bytes(&o) + logfile::dropped_bytes(&e);
                let files = [o.display().to_string(), e.display().to_string()];
                let mut info = a.info(true, reveal(caller), Some(files));
                info.containment = s.containment_of(a.id);
                info.log_dropped_bytes = Some(dropped);
                if a.rt.status == Status::Online {
                    info.log_pipes_kept = Some(logwriters::kept(&o));
                }
                info
            })
            .collect())
    }

    /// `define`: creates or changes apps, after their lanes when they are
    /// agents.
    pub(super) async fn define(
        &self,
        apps: Vec<AppSpec>,
        update: bool,
        actor: &Actor,
    ) -> Result<Vec<Defined>, OpError> {
        if apps.is_empty() {
            return Err(OpError::NothingToDefine);
        }
        self.prepare_lanes(&apps).await?;
        let agents = apps
            .iter()
            .any(|a| matches!(a.kind, AppKind::Agent | AppKind::Responder));
        // An agent or responder updated into another kind loses its lane.
        let had_lane = {
            let s = lock(&self.sup);
            let lanes: std::collections::HashMap<&str, AppKind> = s
                .apps()
                .filter(|o| matches!(o.spec.kind, AppKind::Agent | AppKind::Responder))
                .map(|o| (o.spec.name.as_str(), o.spec.kind))
                .collect();
            apps.iter()
                .any(|a| lanes.get(a.name.as_str()).is_some_and(|k| *k != a.kind))
        };
        let mut out = match define::define(&self.sup, apps, actor, update).await {
            Ok(out) => out,
            Err(e) => {
                // A refused or undone request leaves no lane for an agent
                // it did not leave defined.
                if agents {
                    if let Err(l) = self.lanes.reconcile(&self.sup, &[]).await {
                        log::error!("cannot remove the lanes of agents not defined: {l}");
                    }
                }
                return Err(e.into());
            }
        };
        if had_lane {
            self.lanes.reconcile(&self.sup, &[]).await?;
        }
        let warnings = lock(&self.sup).agent_uid_warnings();
        for d in &mut out {
            if let Some(w) = d.name.as_ref().and_then(|n| warnings.get(n)) {
                d.warnings.push(w.clone());
            }
        }
        Ok(out)
    }

    /// `start`.
    pub(super) async fn start(
        &self,
        target: &str,
        actor: &Actor,
    ) -> Result<Vec<AppAction>, OpError> {
        let ids = lock(&self.sup).resolve(target)?;
        Ok(control::start(&self.sup, &ids, actor).await?)
    }

    /// `stop`: waits until every selected app is down.
    pub(super) async fn stop(&self, target: &str, actor: &Actor) -> Result<Vec<Stopped>, OpError> {
        let ids = lock(&self.sup).resolve(target)?;
        control::stop(&self.sup, &ids, actor, false).await;
        let s = lock(&self.sup);
        Ok(ids
            .iter()
            .filter_map(|id| s.app(*id))
            .map(|a| Stopped {
                id: a.id,
                name: a.spec.name.clone(),
                status: a.rt.status,
            })
            .collect())
    }

    /// `restart`.
    pub(super) async fn restart(
        &self,
        target: &str,
        actor: &Actor,
    ) -> Result<Vec<AppAction>, OpError> {
        let ids = lock(&self.sup).resolve(target)?;
        Ok(control::restart(&self.sup, &ids, actor).await?)
    }

    /// `delete`: an agent's lane goes with it; its routes are parked, and
    /// its answer says so.
    pub(super) async fn delete(
        &self,
        target: &str,
        actor: &Actor,
    ) -> Result<Vec<AppAction>, OpError> {
        let (ids, agents) = {
            let s = lock(&self.sup);
            let ids = s.resolve(target)?;
            let agents: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| {
                    s.app(*id)
                        .is_some_and(|a| matches!(a.spec.kind, AppKind::Agent | AppKind::Responder))
                })
                .collect();
            (ids, agents)
        };
        let mut out = control::delete(&self.sup, &ids, actor).await?;
        if !agents.is_empty() {
            self.lanes.reconcile(&self.sup, &[]).await?;
            for a in out.iter_mut().filter(|a| agents.contains(&a.id)) {
                a.note = self.lanes.parked_by_deleting(&self.sup, &a.name);
            }
        }
        Ok(out)
    }
}
