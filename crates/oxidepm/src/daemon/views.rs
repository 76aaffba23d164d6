//! The supervisor seen through the narrow views that deciding who is asking
//! needs, so that layer 2 never holds the supervisor itself.

use crate::access::peer::{AppOrigin, CgroupPlace, ProcessIndex};
use crate::access::reach::{AppFacts, AppIndex, SnapshotFacts};
use crate::supervise::app::App;
use crate::supervise::supervisor::Membership;
use crate::supervise::{SelectError, Supervisor};
use oxidepm_proto::Status;

impl ProcessIndex for Supervisor {
    fn app_of_process(&self, pid: u32, start_ticks: u64) -> Option<AppOrigin> {
        let id = Supervisor::app_of_process(self, pid, start_ticks)?;
        // A probe can outlive its deleted app; its tree then belongs to no
        // app, as a descendant of the daemon: unattributed.
        origin(self, id)
    }

    fn app_of_cgroup(&self, path: &str) -> CgroupPlace {
        match Supervisor::app_of_cgroup(self, path) {
            Membership::App(id) => origin(self, id).map_or(CgroupPlace::Home, CgroupPlace::App),
            Membership::Home => CgroupPlace::Home,
            Membership::Elsewhere => CgroupPlace::Elsewhere,
        }
    }

    fn app_of_session(&self, sid: u32, leader_start: Option<u64>) -> Option<AppOrigin> {
        origin(self, Supervisor::app_of_session(self, sid, leader_start)?)
    }
}

fn origin(s: &Supervisor, id: u64) -> Option<AppOrigin> {
    let a = s.app(id)?;
    Some(AppOrigin {
        name: a.spec.name.clone(),
        kind: a.spec.kind,
        defined_by: a.defined_by.clone(),
    })
}

impl AppIndex for Supervisor {
    fn select(&self, target: &str) -> Result<Vec<AppFacts>, SelectError> {
        let ids = self.resolve(target)?;
        Ok(ids
            .iter()
            .filter_map(|id| self.app(*id))
            .map(facts)
            .collect())
    }

    fn named(&self, name: &str) -> Option<AppFacts> {
        self.apps().find(|a| a.spec.name == name).map(facts)
    }

    fn all(&self) -> Vec<AppFacts> {
        self.apps().map(facts).collect()
    }

    fn snapshot(&self, name: &str) -> Option<SnapshotFacts> {
        // A snapshot whose owner cannot be read counts as someone else's:
        // only a human replaces it.
        let saved_by = match self.store.snapshot_saved_by(name) {
            Ok(None) => return None,
            Ok(Some(by)) => by,
            Err(e) => {
                log::error!("cannot read snapshot {name:?}: {e}");
                None
            }
        };
        let apps = match self.store.load_snapshot(name) {
            Ok(Some(apps)) => apps.into_iter().map(|a| (a.spec, a.defined_by)).collect(),
            _ => Vec::new(),
        };
        Some(SnapshotFacts { saved_by, apps })
    }

    fn uid_of(&self, user: Option<&str>) -> Option<u32> {
        match user {
            None => Some(self.own_uid()),
            Some(u) => crate::supervise::spawn::resolve_user(u)
                .ok()
                .map(|c| c.uid.as_raw()),
        }
    }
}

fn facts(a: &App) -> AppFacts {
    AppFacts {
        name: a.spec.name.clone(),
        tags: a.spec.tags.clone(),
        protected: a.spec.is_protected(),
        kind: a.spec.kind,
        user: a.spec.user.clone(),
        stopped_by: a.rt.stopped_by,
        depends_on: a.spec.depends_on.iter().map(|d| d.app.clone()).collect(),
        running: a.is_running(),
        // The dependencies `control::launch` brings along: not running,
        // not waiting to start, not a one-shot that completed.
        idle: !a.is_running()
            && a.rt.status != Status::Starting
            && !(a.rt.status == Status::Stopped && a.rt.last_exit == Some(0)),
        desired: a.rt.desired_running,
    }
}
