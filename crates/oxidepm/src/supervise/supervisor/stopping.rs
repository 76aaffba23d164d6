//! The stop transitions: begin (signal every process of the app and hand
//! back what to wait on) and finish (once they are all gone). The waiting
//! itself is `control::wait_stopped`.

use super::{StopTicket, Supervisor};
use crate::supervise::spawn;
use nix::sys::signal::Signal;
use oxidepm_proto::{Actor, EventKind, Status};
use std::time::Duration;

impl Supervisor {
    /// Begins stopping app `id`. Returns what to wait on, or `None` when no
    /// process was running (the app is then already stopped). With
    /// `keep_desired` the app stays in the set to bring back (restart,
    /// daemon shutdown).
    pub fn begin_stop(&mut self, id: u64, actor: &Actor, keep_desired: bool) -> Option<StopTicket> {
        let app = self.apps.get_mut(&id)?;
        if !keep_desired {
            app.rt.desired_running = false;
            // Recorded even when it was already down: a person who stops
            // an app means it to stay stopped.
            app.rt.stopped_by = Some(actor.class);
        }
        match app.rt.status {
            Status::Online => {
                let pid = app.rt.pid?;
                app.rt.status = Status::Stopping;
                app.generation += 1;
                app.stopping_actor = Some(actor.clone());
                let sig = spawn::parse_signal(&app.spec.stop_signal).unwrap_or(Signal::SIGTERM);
                let ticket = StopTicket {
                    id,
                    kill_timeout: Duration::from_millis(app.spec.kill_timeout_ms),
                    exits: app.exits.subscribe(),
                    members: self.members(id),
                };
                self.signal_app(id, pid, sig);
                self.persist(id);
                Some(ticket)
            }
            Status::Stopping => {
                app.rt.pid?;
                let kill_timeout = Duration::from_millis(app.spec.kill_timeout_ms);
                let exits = app.exits.subscribe();
                Some(StopTicket {
                    id,
                    kill_timeout,
                    exits,
                    members: self.members(id),
                })
            }
            Status::Starting => {
                app.generation += 1;
                app.rt.status = Status::Stopped;
                self.persist(id);
                self.event(id, EventKind::Stopped, actor, "pending start cancelled");
                None
            }
            Status::Stopped | Status::Errored => {
                self.persist(id);
                None
            }
        }
    }

    /// Completes a stop once the app's tree is gone.
    pub fn finish_stop(&mut self, id: u64, actor: &Actor, how: &str) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        if app.rt.status != Status::Stopping {
            return;
        }
        if app.rt.pid.is_some() && how.starts_with("killed") {
            // Its exit is not handled yet (and will not be, once stopped):
            // the run ended by the SIGKILL, not as the last one did.
            app.rt.last_exit = None;
            app.last_signal = Some(Signal::SIGKILL as i32);
        }
        if let Some(pid) = app.rt.pid.take() {
            // Stopped but never reaped here (adopted, or the exit is still
            // queued): forget the pid so it is never signalled again.
            self.by_pid.remove(&pid);
        }
        self.stopped_members(id);
        let app = self.apps.get_mut(&id).expect("present");
        app.rt.status = Status::Stopped;
        app.stopping_actor = None;
        app.unstable = 0;
        self.persist(id);
        self.event(id, EventKind::Stopped, actor, how);
    }
}
