//! Transitions that wait on something outside the app: its dependencies,
//! or the exit of a process that is not the daemon's child.

use super::Supervisor;
use crate::supervise::lifecycle::Event;
use crate::supervise::policy::Exit;
use oxidepm_proto::Actor;
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
        let Some(app) = self.apps.get(&id) else {
            return 0;
        };
        let waiting: Vec<String> = app
            .spec
            .depends_on
            .iter()
            .map(|d| format!("{} ({:?})", d.app, d.condition).to_lowercase())
            .collect();
        let event = Event::WaitForDependencies {
            actor: actor.clone(),
            detail: format!("for {}", waiting.join(", ")),
        };
        self.transition(id, event);
        self.apps.get(&id).map_or(0, |a| a.generation)
    }

    /// Gives up starting app `id` because a dependency failed.
    pub fn dependency_failed(&mut self, id: u64, actor: &Actor, why: &str) {
        let event = Event::DependencyFailed {
            actor: actor.clone(),
            why: why.to_string(),
        };
        self.transition(id, event);
    }
}
