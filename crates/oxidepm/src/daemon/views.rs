//! The supervisor seen through the narrow views that deciding who is asking
//! needs, so that layer 2 never holds the supervisor itself.

use crate::access::gate::{AppFacts, AppIndex};
use crate::access::peer::{AppOrigin, ProcessIndex};
use crate::supervise::app::App;
use crate::supervise::{SelectError, Supervisor};

impl ProcessIndex for Supervisor {
    fn app_of_process(&self, pid: u32, start_ticks: u64) -> Option<AppOrigin> {
        let id = Supervisor::app_of_process(self, pid, start_ticks)?;
        // A probe can outlive its deleted app; its tree then belongs to no
        // app, as a descendant of the daemon: unattributed.
        let a = self.app(id)?;
        Some(AppOrigin {
            name: a.spec.name.clone(),
            kind: a.spec.kind,
            defined_by: a.defined_by.clone(),
        })
    }
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
}

fn facts(a: &App) -> AppFacts {
    AppFacts {
        name: a.spec.name.clone(),
        tags: a.spec.tags.clone(),
        protected: a.spec.is_protected(),
    }
}
