//! Transitions that wait on something outside the app: its dependencies,
//! or the exit of a process that is not the daemon's child.

use super::Supervisor;
use crate::supervise::policy::Exit;
use oxidepm_proto::{Actor, EventKind, Status};
use std::collections::BTreeMap;

impl Supervisor {
    /// Handles the exit of a process that is not our child (adopted), whose
    /// exit status went to its real parent.
    pub fn handle_exit_unowned(&mut self, id: u64, pid: u32) {
        // Uptime since adoption is unknown; count the run as stable so one
        // death after a long run is not taken for a crash loop. Only for
        // the app's current process: a run a reload took aside is not it.
        if let Some(a) = self.apps.get_mut(&id).filter(|a| a.rt.pid == Some(pid)) {
            a.started = None;
        }
        self.handle_exit(id, pid, Exit::UNKNOWN);
    }
}

impl Supervisor {
    /// App name → names of the apps it depends on.
    pub fn dependency_edges(&self) -> BTreeMap<String, Vec<String>> {
        self.apps
            .values()
            .map(|a| {
                (
                    a.spec.name.clone(),
                    a.spec.depends_on.iter().map(|d| d.app.clone()).collect(),
                )
            })
            .collect()
    }

    /// Puts app `id` in `starting` until its dependencies are ready;
    /// returns the generation the waiter must still see to spawn it.
    pub fn wait_for_dependencies(&mut self, id: u64, actor: &Actor) -> u64 {
        let Some(app) = self.apps.get_mut(&id) else {
            return 0;
        };
        app.rt.status = Status::Starting;
        app.generation += 1;
        let generation = app.generation;
        let waiting: Vec<String> = app
            .spec
            .depends_on
            .iter()
            .map(|d| format!("{} ({:?})", d.app, d.condition).to_lowercase())
            .collect();
        self.persist(id);
        self.event(
            id,
            EventKind::Waiting,
            actor,
            &format!("for {}", waiting.join(", ")),
        );
        generation
    }

    /// Gives up starting app `id` because a dependency failed.
    pub fn dependency_failed(&mut self, id: u64, actor: &Actor, why: &str) {
        if let Some(app) = self.apps.get_mut(&id) {
            app.rt.status = Status::Errored;
            app.rt.desired_running = false;
        }
        self.persist(id);
        self.event(id, EventKind::Errored, actor, why);
    }
}
