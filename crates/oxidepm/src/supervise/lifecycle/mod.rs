//! The lifecycle of an app: which status follows which, for every request,
//! exit, timer, verdict and limit, as one pure function ([`on`]) over the
//! few fields that make up an app's place in its lifecycle ([`Life`]).
//!
//! Nothing here touches a process, the store or the clock: [`on`] answers
//! with the next [`Life`] and the [`Effect`]s to carry out, in order, and
//! the supervisor (`supervisor/effects.rs`) applies both. So an app's
//! `status`, and the generation that makes stale timers harmless, are
//! written in this module only, and every transition can be tested without
//! a process (see `tests.rs`).

mod event;
mod transitions;

pub use event::{DaemonRestart, Effect, Event, Gone, Limit, StopOutcome};
pub use transitions::{on, restart_why};

use super::app::{App, Runtime};
use oxidepm_proto::{AppSpec, Status};

/// An app's place in its lifecycle: what the transitions read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// Last known status.
    pub status: Status,
    /// Whether the app should be running.
    pub desired_running: bool,
    /// Bumped at every spawn, stop and queued restart, so a timer armed for
    /// an earlier state of the app does nothing.
    pub generation: u64,
    /// Restarts in a row whose run lasted less than `min_uptime`.
    pub unstable: u32,
}

impl Life {
    /// The lifecycle fields of `app`.
    pub fn of(app: &App) -> Life {
        Life {
            status: app.rt.status,
            desired_running: app.rt.desired_running,
            generation: app.generation,
            unstable: app.unstable,
        }
    }
}

/// What a transition may read besides the app's [`Life`].
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The app's lifecycle fields.
    pub life: Life,
    /// Its spec (restart policy, limits, delays).
    pub spec: &'a AppSpec,
    /// Whether the app holds a main process.
    pub has_pid: bool,
    /// Set once the daemon is going down: exits are not restarted.
    pub shutting_down: bool,
}

impl<'a> View<'a> {
    /// `app` as the transitions see it.
    pub fn of(app: &'a App, shutting_down: bool) -> View<'a> {
        View {
            life: Life::of(app),
            spec: &app.spec,
            has_pid: app.rt.pid.is_some(),
            shutting_down,
        }
    }
}

/// Writes `life` into `app`: the one place an app's status changes.
pub fn write(app: &mut App, life: Life) {
    app.rt.status = life.status;
    app.rt.desired_running = life.desired_running;
    app.generation = life.generation;
    app.unstable = life.unstable;
}

/// The runtime row written before a fork: the app `starting` and wanted
/// running, without a process yet (recovery completes it from the new
/// process's marker if the daemon dies after the fork).
pub fn intent(rt: &Runtime) -> Runtime {
    Runtime {
        status: Status::Starting,
        desired_running: true,
        pid: None,
        pid_start: None,
        ..rt.clone()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pure_tests;
