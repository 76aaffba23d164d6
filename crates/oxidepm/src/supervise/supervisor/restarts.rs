//! The supervisor's side of automatic restarts: exits seen by the reaper,
//! the start-limit rule, and the restarts the restart task spawns (see
//! `supervise::restart_queue` for the queue, `supervise::restarts` for the
//! task).

use super::Supervisor;
use crate::supervise::lifecycle::{Event, Limit};
use crate::supervise::policy::{self, Exit};
use crate::supervise::restart_queue::Due;
use oxidepm_proto::{Actor, EventKind, Status};
use std::time::Instant;

/// An exit as the reaper saw it, handled later in a batch.
#[derive(Debug, Clone, Copy)]
pub struct SeenExit {
    /// The app.
    pub id: u64,
    /// Its main process.
    pub pid: u32,
    /// How it ended.
    pub exit: Exit,
    /// When that process was spawned (`None`: adopted); the exit is only
    /// handled while the app still runs that same process.
    pub started: Option<Instant>,
    /// When its death was seen (waitpid or pidfd).
    pub seen: Instant,
}

impl SeenExit {
    /// How long the run lasted: from its spawn to its death being seen,
    /// not to the exit being handled. Unknown (adopted) counts as long.
    pub fn uptime_ms(&self) -> u64 {
        self.started
            .map(|s| self.seen.saturating_duration_since(s).as_millis() as u64)
            .unwrap_or(u64::MAX)
    }
}

impl Supervisor {
    /// Takes the exit of our child `pid` as the reaper sees it: `None`
    /// when it is no app's main process. The pid is forgotten at once, so
    /// a new process given the same pid before the exit is handled is
    /// never taken for this one.
    pub fn seen_exit(&mut self, pid: u32, exit: Exit, seen: Instant) -> Option<SeenExit> {
        let id = self.by_pid.remove(&pid)?;
        let started = self.apps.get(&id).and_then(|a| a.started);
        Some(SeenExit {
            id,
            pid,
            exit,
            started,
            seen,
        })
    }

    /// Whether the app of an exit seen earlier still runs that process.
    pub(super) fn exit_current(&self, e: &SeenExit) -> bool {
        self.apps
            .get(&e.id)
            .is_some_and(|a| a.rt.pid == Some(e.pid) && a.started == e.started)
    }

    /// The start-limit rule: records an automatic restart of app `id` at
    /// `at`, or returns the count and window it would exceed.
    pub(super) fn admit_restart(&mut self, id: u64, at: Instant) -> Result<(), (u32, u64)> {
        let Some(app) = self.apps.get(&id) else {
            return Ok(());
        };
        let window = policy::start_limit_window(&app.spec);
        let max = app.spec.max_restarts;
        if self.restarts.limit(id).admit(at, window, max) {
            Ok(())
        } else {
            Err((max, window.as_millis() as u64))
        }
    }

    /// Queues a restart the daemon decided on (health, memory limit, cron)
    /// after the app was stopped: through the restart queue like a crash's,
    /// and, when it `counts`, through the start limit too.
    pub fn queue_restart_by_daemon(&mut self, id: u64, actor: &Actor, counts: bool) {
        if counts {
            if let Err((max, window_ms)) = self.admit_restart(id, Instant::now()) {
                let limit = Limit::StartLimit { max, window_ms };
                let actor = actor.clone();
                self.transition(id, Event::LimitHit { limit, actor });
                return;
            }
        }
        self.schedule_restart(id, 0, actor);
    }

    /// Whether a queued restart is still wanted: the app waits in
    /// `starting` for exactly this restart and the daemon is not going down.
    pub fn restart_current(&self, d: &Due) -> bool {
        !self.shutting_down
            && self
                .apps
                .get(&d.id)
                .is_some_and(|a| a.generation == d.generation && a.rt.status == Status::Starting)
    }

    /// Spawns a queued restart (the restart task checked it is current).
    pub fn restart_now(&mut self, d: Due) {
        let _ = self.spawn_now(d.id, &d.actor, EventKind::Restarted);
    }
}
