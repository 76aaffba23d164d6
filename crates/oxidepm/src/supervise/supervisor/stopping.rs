//! The stop transitions: begin (signal every process of the app and hand
//! back what to wait on) and finish (once they are all gone). The waiting
//! itself is `control::wait_stopped`; what each step does to the app is
//! `lifecycle`'s.

use super::{StopTicket, Supervisor};
use crate::supervise::lifecycle::{Event, StopOutcome};
use oxidepm_proto::Actor;

impl Supervisor {
    /// Begins stopping app `id`. Returns what to wait on, or `None` when no
    /// process was running (the app is then already stopped). With
    /// `keep_desired` the app stays in the set to bring back (restart,
    /// daemon shutdown).
    pub fn begin_stop(&mut self, id: u64, actor: &Actor, keep_desired: bool) -> Option<StopTicket> {
        let app = self.apps.get_mut(&id)?;
        if !keep_desired {
            // Recorded even when it was already down: a person who stops
            // an app means it to stay stopped.
            app.rt.stopped_by = Some(actor.class);
        }
        let event = Event::Stop {
            actor: actor.clone(),
            keep_desired,
        };
        self.transition(id, event).ticket
    }

    /// Completes a stop once the app's tree is gone.
    pub fn finish_stop(&mut self, id: u64, actor: &Actor, outcome: StopOutcome) {
        let event = Event::StopDone {
            actor: actor.clone(),
            outcome,
        };
        self.transition(id, event);
    }
}
