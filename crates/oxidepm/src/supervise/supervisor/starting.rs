//! The parts of a start around the fork: the intent written before it, and
//! what a failed start leads to (a retry for a passing shortage of
//! descriptors, processes or memory; `errored` for a mistake that retrying
//! cannot fix).

use super::Supervisor;
use crate::supervise::lifecycle::Event;
use crate::supervise::Error;
use oxidepm_proto::Actor;

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

    /// After the start of app `id` failed with `e`: a passing failure is
    /// tried again under the restart policy (the retry counts toward
    /// `max_restarts`, as a queued restart); any other, or one past the
    /// limit, leaves the app `errored` (see `lifecycle`). Returns `e`.
    pub(super) fn start_failed(&mut self, id: u64, actor: &Actor, e: Error) -> Error {
        let Some(app) = self.apps.get_mut(&id) else {
            return e;
        };
        app.rt.pid = None;
        let event = Event::SpawnFailed {
            actor: actor.clone(),
            error: e.to_string(),
            transient: e.is_transient(),
        };
        self.transition(id, event);
        e
    }
}
