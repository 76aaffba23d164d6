//! The parts of a start around the fork: the intent written before it, and
//! what a failed start leads to (a retry for a passing shortage of
//! descriptors, processes or memory; `errored` for a mistake that retrying
//! cannot fix).

use super::Supervisor;
use crate::supervise::policy::MAX_BACKOFF_MS;
use crate::supervise::Error;
use oxidepm_proto::{Actor, EventKind, RestartPolicy, Status};

/// The shortest wait before a start that failed for a passing reason is
/// tried again (never at once: the shortage is likely still there).
const MIN_RETRY_MS: u64 = 250;

impl Error {
    /// Whether the failure may pass by itself: descriptors, processes or
    /// memory short (EMFILE, ENFILE, EAGAIN, ENOMEM), or the state that
    /// could not be written before the fork.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Spawn(e) => e.is_transient(),
            Error::Store(_) => true,
            _ => false,
        }
    }
}

/// The state writes of one request, committed together when this is
/// dropped (see [`Supervisor::batch`]).
pub struct Batch {
    shared: super::Shared,
    began: bool,
}

impl Drop for Batch {
    fn drop(&mut self) {
        super::lock(&self.shared).store.end_batch(self.began);
    }
}

impl Supervisor {
    /// Opens a batch of state writes for a request that changes many apps
    /// (define, start): one commit instead of one per write; a start's
    /// intent is still committed before its fork. Must be dropped with the
    /// supervisor unlocked, and no task may run while it is open (the
    /// request holds it across no `.await`).
    pub fn batch(shared: &super::Shared) -> Batch {
        let began = super::lock(shared).store.begin_batch();
        Batch {
            shared: shared.clone(),
            began,
        }
    }

    /// Writes the intent to start app `id` (a run without a pid yet, the app
    /// `starting` and wanted running) and returns the run's id. Committed
    /// before the fork: a daemon killed after the fork leaves a record that
    /// recovery completes from the process's marker.
    pub(super) fn begin_run(&mut self, id: u64, actor: &Actor) -> Result<i64, Error> {
        let Some(app) = self.apps.get(&id) else {
            return Err(Error::NoSuchApp { id });
        };
        let mut row = app.rt.clone();
        row.status = Status::Starting;
        row.desired_running = true;
        row.pid = None;
        row.pid_start = None;
        let run = self.store.begin_run(id, actor, &mut row)?;
        Ok(run)
    }

    /// After the start of app `id` failed with `e`: a passing failure is
    /// tried again under the restart policy (the retry counts toward
    /// `max_restarts`, through `schedule_restart`); any other, or one
    /// past the limit, leaves the app `errored`. Returns `e`.
    pub(super) fn start_failed(&mut self, id: u64, actor: &Actor, e: Error) -> Error {
        let Some(app) = self.apps.get_mut(&id) else {
            return e;
        };
        app.rt.pid = None;
        let retry = e.is_transient()
            && app.spec.restart != RestartPolicy::Never
            && !self.shutting_down
            && app.unstable < app.spec.max_restarts;
        if retry {
            app.unstable += 1;
            let shift = (app.unstable - 1).min(16);
            let delay = (app.spec.restart_delay_ms
                + app.spec.exp_backoff_ms.saturating_mul(1 << shift))
            .clamp(MIN_RETRY_MS, MAX_BACKOFF_MS.max(app.spec.restart_delay_ms));
            app.rt.desired_running = true;
            let attempt = app.unstable;
            self.event(
                id,
                EventKind::Failed,
                actor,
                &format!("{e}; a passing failure: trying again in {delay} ms (attempt {attempt})"),
            );
            self.schedule_restart(id, delay, &Actor::system("retry"));
            return e;
        }
        app.rt.status = Status::Errored;
        app.rt.desired_running = false;
        self.persist(id);
        self.event(id, EventKind::Failed, actor, &e.to_string());
        e
    }
}
