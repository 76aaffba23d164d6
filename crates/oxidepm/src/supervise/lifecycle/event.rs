//! The vocabulary of the lifecycle: what happens to an app ([`Event`]),
//! what a transition asks the supervisor to do ([`Effect`]), and the
//! outcomes that travel between them.

use crate::supervise::policy::Exit;
use oxidepm_proto::{Actor, EventKind};
use std::fmt;

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Every process was gone before `kill_timeout`.
    Signalled,
    /// Something was left at `kill_timeout` and killed.
    Killed,
}

impl StopOutcome {
    /// The detail of the `stopped` event.
    pub fn as_str(self) -> &'static str {
        match self {
            StopOutcome::Signalled => "stopped by signal",
            StopOutcome::Killed => "killed after kill_timeout",
        }
    }
}

impl fmt::Display for StopOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A limit that ends automatic restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// More than `max` automatic restarts within `window_ms`.
    StartLimit {
        /// `max_restarts`.
        max: u32,
        /// The start-limit window.
        window_ms: u64,
    },
}

/// Why the daemon restarts an app on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonRestart {
    /// Its memory went over `max_memory_bytes`; counts toward
    /// `max_restarts` like a crash.
    MemoryLimit {
        /// What it used, bytes.
        used: u64,
        /// The limit, bytes.
        limit: u64,
    },
    /// It failed its health checks.
    Health {
        /// The event's detail.
        detail: String,
    },
    /// Its cron schedule fired.
    Cron {
        /// The schedule.
        expr: String,
    },
    /// A file it watches changed.
    Watch {
        /// The first path that changed, as the watch names it.
        path: String,
    },
}

impl DaemonRestart {
    /// Whom the restart is credited to.
    pub fn actor(&self) -> Actor {
        Actor::system(match self {
            DaemonRestart::MemoryLimit { .. } => "limit",
            DaemonRestart::Health { .. } => "health",
            DaemonRestart::Cron { .. } => "cron",
            DaemonRestart::Watch { .. } => "watch",
        })
    }

    /// The event recorded before the stop.
    pub fn kind(&self) -> EventKind {
        match self {
            DaemonRestart::MemoryLimit { .. } => EventKind::MemoryLimit,
            DaemonRestart::Health { .. } => EventKind::Unhealthy,
            DaemonRestart::Cron { .. } => EventKind::Cron,
            DaemonRestart::Watch { .. } => EventKind::Watch,
        }
    }

    /// That event's detail.
    pub fn detail(&self) -> String {
        match self {
            DaemonRestart::MemoryLimit { used, limit } => format!(
                "memory {} MiB over the limit of {} MiB",
                used >> 20,
                limit >> 20
            ),
            DaemonRestart::Health { detail } => detail.clone(),
            DaemonRestart::Cron { expr } => format!("scheduled by {expr:?}"),
            DaemonRestart::Watch { path } => format!("{path} changed"),
        }
    }

    /// Whether the restart counts toward `max_restarts` like a crash.
    pub fn counts(&self) -> bool {
        matches!(self, DaemonRestart::MemoryLimit { .. })
    }
}

/// How recovery found an app that was running when the last daemon died,
/// with no live process to adopt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Its recorded process is gone (or is another process now).
    Died,
    /// It had no process: it waited (restart delay, dependencies), or its
    /// fork never happened.
    NeverForked,
}

/// What happens to an app.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A stop is asked for by `actor`; with `keep_desired` the app stays
    /// in the set to bring back (restart, daemon shutdown).
    Stop {
        /// Who asks.
        actor: Actor,
        /// Whether the app stays wanted running.
        keep_desired: bool,
    },
    /// Every process of a stopping app is gone.
    StopDone {
        /// Who asked for the stop.
        actor: Actor,
        /// How it ended.
        outcome: StopOutcome,
    },
    /// A start is asked for (by a person, a dependent's start, cron).
    StartAsked,
    /// A process of the app was spawned for `actor`, recorded as `kind`
    /// (`started` or `restarted`).
    Spawned {
        /// Who asked for the start.
        actor: Actor,
        /// The event to record.
        kind: EventKind,
        /// The new process.
        pid: u32,
    },
    /// The spawn failed with `error`; `transient` when it may pass.
    SpawnFailed {
        /// Who asked for the start.
        actor: Actor,
        /// The failure, as the `failed` event tells it.
        error: String,
        /// Whether it may pass by itself.
        transient: bool,
    },
    /// A restart is queued, due in `delay_ms`, credited to `actor`.
    QueueRestart {
        /// The delay.
        delay_ms: u64,
        /// Whom it is credited to.
        actor: Actor,
        /// Why (`status` shows it while the app waits).
        why: String,
    },
    /// The app waits in `starting` for its dependencies.
    WaitForDependencies {
        /// Who asked for the start.
        actor: Actor,
        /// What it waits for (`for db (healthy)`).
        detail: String,
    },
    /// A dependency failed in a way waiting cannot fix.
    DependencyFailed {
        /// Who asked for the start.
        actor: Actor,
        /// Why.
        why: String,
    },
    /// The app runs again under a process it did not spawn.
    Adopted {
        /// That process.
        pid: u32,
    },
    /// The app's main process exited, and no stop or reload claims it.
    Exited {
        /// How it ended.
        exit: Exit,
        /// How long the run lasted.
        uptime_ms: u64,
    },
    /// The start limit admitted the restart an exit asked for.
    RestartAdmitted {
        /// Its delay.
        delay_ms: u64,
        /// Why (`after exit code 3`).
        why: String,
    },
    /// A limit refused an automatic restart asked for by `actor`.
    LimitHit {
        /// The limit.
        limit: Limit,
        /// Who asked for the restart.
        actor: Actor,
    },
    /// The daemon stopped the app to restart it (`before`: its unstable
    /// count before the stop); the stop is over.
    DaemonRestarted {
        /// Why.
        reason: DaemonRestart,
        /// The unstable count before the stop.
        before: u32,
    },
    /// `reset`: the restart counters are zeroed.
    Reset,
    /// A reload took the running process out of the app's slot.
    ReloadAside,
    /// A run taken aside by a reload is back in the slot.
    Restored,
    /// Recovery found the app's process gone.
    Recovered(Gone),
}

/// What a transition asks the supervisor to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write the app's runtime state.
    Persist,
    /// Record (and publish) an event of the app.
    Record {
        /// Its kind.
        kind: EventKind,
        /// Who caused it.
        actor: Actor,
        /// Its detail.
        detail: String,
    },
    /// Hand back what to wait on for the stop in progress.
    AwaitStop,
    /// Send the app's stop signal to every process of it, for `actor`.
    Signal {
        /// Who asked for the stop.
        actor: Actor,
    },
    /// Forget the stopped run's process (`killed`: the stop killed it
    /// before its exit was seen).
    EndStop {
        /// Whether the stop ended by SIGKILL.
        killed: bool,
    },
    /// What the exited run left behind goes with it.
    EndRuns,
    /// Ask the start limit whether an exit's restart may happen.
    AdmitRestart {
        /// Its delay.
        delay_ms: u64,
        /// Why.
        why: String,
        /// Whom the refusal is credited to.
        actor: Actor,
    },
    /// Take the adopted process's cgroup and session as the app's.
    AdoptMembers,
    /// Count a restart credited to `actor` and arm its timer for the
    /// app's (new) generation.
    ArmRestart {
        /// Its delay.
        delay_ms: u64,
        /// Whom it is credited to.
        actor: Actor,
        /// Why.
        why: String,
    },
    /// Queue a restart the daemon decided on, through the start limit when
    /// it `counts`.
    QueueByDaemon {
        /// Who decided.
        actor: Actor,
        /// Whether it counts toward the start limit.
        counts: bool,
    },
    /// Forget the app's recent automatic restarts.
    ForgetStartLimit,
    /// Handle the exit of the app's recorded process, unknown.
    ExitUnknown,
    /// Forget the app's process.
    ForgetPid,
    /// Start the app (recovery: in dependency order, with the others).
    Spawn,
}

impl Effect {
    /// An event to record.
    pub fn record(kind: EventKind, actor: &Actor, detail: impl Into<String>) -> Effect {
        Effect::Record {
            kind,
            actor: actor.clone(),
            detail: detail.into(),
        }
    }
}
