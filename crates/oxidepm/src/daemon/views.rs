//! The supervisor seen through the narrow views that deciding who is asking
//! needs, so that layer 2 never holds the supervisor itself.

use crate::access::peer::{AppOrigin, ProcessIndex};
use crate::supervise::Supervisor;

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
