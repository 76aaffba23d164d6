//! The transitions: for an app as it is and what happens to it, the app as
//! it will be and what to do about it.

use super::event::{DaemonRestart, Effect, Event, Gone, Limit, StopOutcome};
use super::{Life, View};
use crate::supervise::policy::{self, Decision, Exit, MAX_BACKOFF_MS};
use oxidepm_proto::{Actor, EventKind, RestartPolicy, Status};

/// The shortest wait before a start that failed for a passing reason is
/// tried again (never at once: the shortage is likely still there).
const MIN_RETRY_MS: u64 = 250;

/// The next state of the app `v` after `event`, and what to do, in order.
pub fn on(v: &View<'_>, event: Event) -> (Life, Vec<Effect>) {
    let l = v.life;
    match event {
        Event::Stop {
            actor,
            keep_desired,
        } => stop(v, actor, keep_desired),
        Event::StopDone { actor, outcome } => stop_done(l, &actor, outcome),
        Event::StartAsked => (
            Life {
                unstable: 0,
                desired_running: true,
                ..l
            },
            vec![Effect::ForgetStartLimit],
        ),
        Event::Spawned { actor, kind, pid } => (
            spawned(l),
            vec![
                Effect::Persist,
                Effect::record(kind, &actor, format!("pid {pid}")),
            ],
        ),
        Event::SpawnFailed {
            actor,
            error,
            transient,
        } => spawn_failed(v, &actor, &error, transient),
        Event::QueueRestart {
            delay_ms,
            actor,
            why,
        } => queue_restart(l, delay_ms, actor, why),
        Event::WaitForDependencies { actor, detail } => (
            starting(l),
            vec![
                Effect::Persist,
                Effect::record(EventKind::Waiting, &actor, detail),
            ],
        ),
        Event::DependencyFailed { actor, why } => (
            rest(l, Status::Errored),
            vec![
                Effect::Persist,
                Effect::record(EventKind::Errored, &actor, why),
            ],
        ),
        Event::Adopted { pid } => adopted(l, pid),
        Event::Exited { exit, uptime_ms } => exited(v, exit, uptime_ms),
        Event::RestartAdmitted { delay_ms, why } => {
            queue_restart(l, delay_ms, Actor::system("crash"), why)
        }
        Event::LimitHit { limit, actor } => limit_hit(l, limit, &actor),
        Event::DaemonRestarted { reason, before } => daemon_restarted(v, &reason, before),
        Event::Reset => reset(l),
        Event::ReloadAside => (with_status(l, Status::Stopped), Vec::new()),
        Event::Restored => (spawned(l), vec![Effect::Persist]),
        Event::Recovered(gone) => recovered(l, gone),
    }
}

/// `l` in `status`, nothing else changed.
fn with_status(l: Life, status: Status) -> Life {
    Life { status, ..l }
}

/// The app waits in `starting` (for a restart, or its dependencies).
fn starting(l: Life) -> Life {
    Life {
        status: Status::Starting,
        generation: l.generation + 1,
        ..l
    }
}

/// The app runs again under a process it did not spawn.
fn adopted(l: Life, pid: u32) -> (Life, Vec<Effect>) {
    let l = Life {
        status: Status::Online,
        generation: l.generation + 1,
        ..l
    };
    let adopt = Actor::system("adopt");
    (
        l,
        vec![
            Effect::Persist,
            Effect::AdoptMembers,
            Effect::record(EventKind::Adopted, &adopt, format!("pid {pid}")),
        ],
    )
}

/// `reset`: the crash loop is forgotten, and `errored` becomes `stopped`.
fn reset(l: Life) -> (Life, Vec<Effect>) {
    let status = match l.status {
        Status::Errored => Status::Stopped,
        st => st,
    };
    let l = Life {
        unstable: 0,
        status,
        ..l
    };
    (l, vec![Effect::ForgetStartLimit, Effect::Persist])
}

/// A new process runs (spawned, or a reload's old run put back).
fn spawned(l: Life) -> Life {
    Life {
        status: Status::Online,
        desired_running: true,
        generation: l.generation + 1,
        ..l
    }
}

/// The app at rest in `status`, not wanted running.
fn rest(l: Life, status: Status) -> Life {
    Life {
        status,
        desired_running: false,
        ..l
    }
}

fn stop(v: &View<'_>, actor: Actor, keep_desired: bool) -> (Life, Vec<Effect>) {
    let mut l = v.life;
    if !keep_desired {
        l.desired_running = false;
    }
    match l.status {
        Status::Online if v.has_pid => {
            l.status = Status::Stopping;
            l.generation += 1;
            (
                l,
                vec![Effect::AwaitStop, Effect::Signal { actor }, Effect::Persist],
            )
        }
        Status::Stopping if v.has_pid => (l, vec![Effect::AwaitStop]),
        // No process to wait on: nothing else changes (not even stored).
        Status::Online | Status::Stopping => (l, Vec::new()),
        Status::Starting => {
            l.generation += 1;
            l.status = Status::Stopped;
            (
                l,
                vec![
                    Effect::Persist,
                    Effect::record(EventKind::Stopped, &actor, "pending start cancelled"),
                ],
            )
        }
        Status::Stopped | Status::Errored => (l, vec![Effect::Persist]),
    }
}

fn stop_done(l: Life, actor: &Actor, outcome: StopOutcome) -> (Life, Vec<Effect>) {
    if l.status != Status::Stopping {
        return (l, Vec::new());
    }
    (
        Life {
            status: Status::Stopped,
            unstable: 0,
            ..l
        },
        vec![
            Effect::EndStop {
                killed: outcome == StopOutcome::Killed,
            },
            Effect::Persist,
            Effect::record(EventKind::Stopped, actor, outcome.as_str()),
        ],
    )
}

/// After a failed start: a passing failure is tried again under the
/// restart policy (the retry counts toward `max_restarts`); any other, or
/// one past the limit, leaves the app `errored`.
fn spawn_failed(v: &View<'_>, actor: &Actor, error: &str, transient: bool) -> (Life, Vec<Effect>) {
    // The spawn took a generation whatever its result.
    let mut l = Life {
        generation: v.life.generation + 1,
        ..v.life
    };
    let spec = v.spec;
    let retry = transient
        && spec.restart != RestartPolicy::Never
        && !v.shutting_down
        && l.unstable < spec.max_restarts;
    if !retry {
        return (
            rest(l, Status::Errored),
            vec![
                Effect::Persist,
                Effect::record(EventKind::Failed, actor, error),
            ],
        );
    }
    l.unstable += 1;
    let shift = (l.unstable - 1).min(16);
    let delay = (spec.restart_delay_ms + spec.exp_backoff_ms.saturating_mul(1 << shift))
        .clamp(MIN_RETRY_MS, MAX_BACKOFF_MS.max(spec.restart_delay_ms));
    l.desired_running = true;
    let failed = Effect::record(
        EventKind::Failed,
        actor,
        format!(
            "{error}; a passing failure: trying again in {delay} ms (attempt {})",
            l.unstable
        ),
    );
    let retry = Actor::system("retry");
    let why = restart_why(&retry);
    let (l, mut fx) = queue_restart(l, delay, retry, why);
    fx.insert(0, failed);
    (l, fx)
}

/// What `status` says a queued restart credited to `actor` waits for.
pub fn restart_why(actor: &Actor) -> String {
    match actor.label.as_str() {
        "retry" => "after a spawn failure that may pass".to_string(),
        "health" => "after failed health checks".to_string(),
        "limit" => "after the memory limit".to_string(),
        "cron" => "on its cron schedule".to_string(),
        label => format!("for {label}"),
    }
}

/// The app waits in `starting` for a restart due in `delay_ms`.
fn queue_restart(l: Life, delay_ms: u64, actor: Actor, why: String) -> (Life, Vec<Effect>) {
    (
        starting(l),
        vec![Effect::ArmRestart {
            delay_ms,
            actor,
            why,
        }],
    )
}

/// The exit of the app's current process, applying the restart policy.
fn exited(v: &View<'_>, exit: Exit, uptime_ms: u64) -> (Life, Vec<Effect>) {
    let mut l = v.life;
    if l.status == Status::Stopping {
        // The stopper finishes the transition.
        return (l, vec![Effect::Persist]);
    }
    let actor = Actor::system(if exit.success() { "exit" } else { "crash" });
    let mut fx = vec![
        Effect::record(EventKind::Exited, &actor, exit.describe()),
        Effect::EndRuns,
    ];
    if v.shutting_down {
        l.status = Status::Stopped;
        fx.push(Effect::Persist);
        return (l, fx);
    }
    let (decision, unstable) = policy::decide(v.spec, exit, uptime_ms, l.unstable);
    l.unstable = unstable;
    match decision {
        Decision::Restart { delay_ms } => fx.push(Effect::AdmitRestart {
            delay_ms,
            why: format!("after {}", exit.describe()),
            actor,
        }),
        Decision::Rest(st) => {
            l = rest(l, st);
            let (kind, detail) = if st == Status::Errored {
                let detail = if unstable > 0 {
                    format!(
                        "{unstable} restarts in a row lasted less than min_uptime; not restarting"
                    )
                } else {
                    String::new()
                };
                (EventKind::Errored, detail)
            } else {
                (EventKind::Stopped, String::new())
            };
            fx.push(Effect::Persist);
            fx.push(Effect::record(kind, &actor, detail));
        }
    }
    (l, fx)
}

fn limit_hit(l: Life, limit: Limit, actor: &Actor) -> (Life, Vec<Effect>) {
    let detail = match limit {
        Limit::StartLimit { max, window_ms } => {
            format!("more than {max} restarts within {window_ms} ms (start limit); not restarting")
        }
    };
    (
        rest(l, Status::Errored),
        vec![
            Effect::Persist,
            Effect::record(EventKind::Errored, actor, detail),
        ],
    )
}

/// After the daemon stopped the app to restart it: through the restart
/// queue like a crash's; one that counts is a restart in a row, and past
/// `max_restarts` of them the app is `errored`.
fn daemon_restarted(v: &View<'_>, reason: &DaemonRestart, before: u32) -> (Life, Vec<Effect>) {
    let mut l = v.life;
    if l.status != Status::Stopped || v.shutting_down {
        return (l, Vec::new());
    }
    let actor = reason.actor();
    let counts = reason.counts();
    if counts {
        l.unstable = before + 1;
        if l.unstable > v.spec.max_restarts {
            let n = l.unstable;
            return (
                rest(l, Status::Errored),
                vec![
                    Effect::Persist,
                    Effect::record(
                        EventKind::Errored,
                        &actor,
                        format!("{n} restarts in a row; not restarting"),
                    ),
                ],
            );
        }
    }
    (l, vec![Effect::QueueByDaemon { actor, counts }])
}

/// An app that was running when the last daemon died and has no live
/// process to adopt: stopped if it was being stopped (or not wanted), a
/// crash if its process died, started again if it never had one.
fn recovered(l: Life, gone: Gone) -> (Life, Vec<Effect>) {
    if l.status == Status::Stopping || !l.desired_running {
        let l = with_status(l, Status::Stopped);
        return (l, vec![Effect::ForgetPid, Effect::Persist]);
    }
    match gone {
        // Through the normal exit path with an unknown status, so the
        // policy and events are the same.
        Gone::Died => (with_status(l, Status::Online), vec![Effect::ExitUnknown]),
        Gone::NeverForked => (with_status(l, Status::Stopped), vec![Effect::Spawn]),
    }
}
