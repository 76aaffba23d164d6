//! The transitions as data: a state and an event in, the next state and
//! the effects out; no supervisor, no store, no clock.

use super::event::{DaemonRestart, Effect, Event, Gone, Limit, StopOutcome};
use super::transitions::restart_why;
use super::{on, Life, View};
use crate::supervise::policy::Exit;
use oxidepm_proto::{Actor, AppSpec, Class, EventKind, RestartPolicy, Status};

fn life(status: Status) -> Life {
    Life {
        status,
        desired_running: true,
        generation: 7,
        unstable: 0,
    }
}

fn view(spec: &AppSpec, life: Life, has_pid: bool) -> View<'_> {
    View {
        life,
        spec,
        has_pid,
        shutting_down: false,
    }
}

fn human() -> Actor {
    Actor::new(Class::Human, "cli")
}

fn stop(keep_desired: bool) -> Event {
    Event::Stop {
        actor: human(),
        keep_desired,
    }
}

fn record(kind: EventKind, actor: &Actor, detail: &str) -> Effect {
    Effect::record(kind, actor, detail)
}

const fn code(c: i32) -> Exit {
    Exit::code(c)
}

#[test]
fn stop_of_an_online_process_signals_it_and_waits() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let (l, fx) = on(&view(&spec, life(Status::Online), true), stop(false));
    assert_eq!(l.status, Status::Stopping);
    assert_eq!(l.generation, 8);
    assert!(!l.desired_running);
    assert_eq!(
        fx,
        [
            Effect::AwaitStop,
            Effect::Signal { actor: human() },
            Effect::Persist
        ]
    );
    // A restart's stop keeps it wanted.
    let (l, _) = on(&view(&spec, life(Status::Online), true), stop(true));
    assert!(l.desired_running);
}

#[test]
fn stop_without_a_process_changes_only_what_is_wanted() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    for st in [Status::Online, Status::Stopping] {
        let (l, fx) = on(&view(&spec, life(st), false), stop(false));
        assert_eq!(l.status, st);
        assert_eq!(l.generation, 7);
        assert!(!l.desired_running);
        assert!(fx.is_empty());
    }
    let (l, fx) = on(&view(&spec, life(Status::Stopping), true), stop(false));
    assert_eq!((l.status, l.generation), (Status::Stopping, 7));
    assert_eq!(fx, [Effect::AwaitStop]);
}

#[test]
fn stop_while_starting_cancels_the_pending_start() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let (l, fx) = on(&view(&spec, life(Status::Starting), false), stop(false));
    assert_eq!((l.status, l.generation), (Status::Stopped, 8));
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(EventKind::Stopped, &human(), "pending start cancelled")
        ]
    );
    for st in [Status::Stopped, Status::Errored] {
        let (l, fx) = on(&view(&spec, life(st), false), stop(false));
        assert_eq!((l.status, l.generation), (st, 7));
        assert_eq!(fx, [Effect::Persist]);
    }
}

#[test]
fn a_stop_ends_stopped_and_says_how() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let mut stopping = life(Status::Stopping);
    stopping.unstable = 3;
    for (outcome, killed, detail) in [
        (StopOutcome::Signalled, false, "stopped by signal"),
        (StopOutcome::Killed, true, "killed after kill_timeout"),
    ] {
        let done = Event::StopDone {
            actor: human(),
            outcome,
        };
        let (l, fx) = on(&view(&spec, stopping, true), done.clone());
        assert_eq!(
            (l.status, l.unstable, l.generation),
            (Status::Stopped, 0, 7)
        );
        assert_eq!(
            fx,
            [
                Effect::EndStop { killed },
                Effect::Persist,
                record(EventKind::Stopped, &human(), detail)
            ]
        );
        // Only a stop in progress is finished.
        let (l, fx) = on(&view(&spec, life(Status::Online), true), done);
        assert_eq!(l, life(Status::Online));
        assert!(fx.is_empty());
    }
}

#[test]
fn an_exit_during_a_stop_is_left_to_the_stopper() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let exited = Event::Exited {
        exit: code(0),
        uptime_ms: 10,
    };
    let (l, fx) = on(&view(&spec, life(Status::Stopping), false), exited);
    assert_eq!(l, life(Status::Stopping));
    assert_eq!(fx, [Effect::Persist]);
}

#[test]
fn a_crash_asks_the_start_limit_for_a_restart_after_the_delay() {
    let mut spec = AppSpec::new("web", "sleep", vec![]);
    spec.restart_delay_ms = 700;
    spec.min_uptime_ms = 1_000;
    let crash = Actor::system("crash");
    let exited = |uptime_ms| Event::Exited {
        exit: code(3),
        uptime_ms,
    };
    let (l, fx) = on(&view(&spec, life(Status::Online), false), exited(5_000));
    assert_eq!((l.status, l.unstable), (Status::Online, 0));
    assert_eq!(
        fx,
        [
            record(EventKind::Exited, &crash, "exit code 3"),
            Effect::EndRuns,
            Effect::AdmitRestart {
                delay_ms: 700,
                why: "after exit code 3".into(),
                actor: crash.clone(),
            }
        ]
    );
    // A short run is one more in a row.
    let (l, _) = on(&view(&spec, life(Status::Online), false), exited(10));
    assert_eq!(l.unstable, 1);
    // The restart, admitted, is credited to `crash` whatever the exit.
    let admitted = Event::RestartAdmitted {
        delay_ms: 700,
        why: "after exit code 0".into(),
    };
    let (l, fx) = on(&view(&spec, life(Status::Online), false), admitted);
    assert_eq!((l.status, l.generation), (Status::Starting, 8));
    assert_eq!(
        fx,
        [Effect::ArmRestart {
            delay_ms: 700,
            actor: crash,
            why: "after exit code 0".into()
        }]
    );
}

#[test]
fn exits_that_rest_under_the_policy() {
    let mut spec = AppSpec::new("web", "sleep", vec![]);
    spec.restart = RestartPolicy::OnFailure;
    let exit = Actor::system("exit");
    let ok = Event::Exited {
        exit: code(0),
        uptime_ms: 10,
    };
    let (l, fx) = on(&view(&spec, life(Status::Online), false), ok);
    assert_eq!((l.status, l.desired_running), (Status::Stopped, false));
    assert_eq!(
        fx,
        [
            record(EventKind::Exited, &exit, "exit code 0"),
            Effect::EndRuns,
            Effect::Persist,
            record(EventKind::Stopped, &exit, "")
        ]
    );
    spec.restart = RestartPolicy::Never;
    let failed = Event::Exited {
        exit: code(1),
        uptime_ms: 10,
    };
    let (l, fx) = on(&view(&spec, life(Status::Online), false), failed);
    assert_eq!((l.status, l.desired_running), (Status::Errored, false));
    assert_eq!(
        fx.last().unwrap(),
        &record(EventKind::Errored, &Actor::system("crash"), "")
    );
}

#[test]
fn a_crash_loop_ends_errored() {
    let mut spec = AppSpec::new("web", "sleep", vec![]);
    spec.max_restarts = 2;
    spec.min_uptime_ms = 1_000;
    let mut l = life(Status::Online);
    l.unstable = 2;
    let exited = Event::Exited {
        exit: code(1),
        uptime_ms: 10,
    };
    let (l, fx) = on(&view(&spec, l, false), exited);
    assert_eq!(
        (l.status, l.unstable, l.desired_running),
        (Status::Errored, 3, false)
    );
    assert_eq!(
        fx.last().unwrap(),
        &record(
            EventKind::Errored,
            &Actor::system("crash"),
            "3 restarts in a row lasted less than min_uptime; not restarting"
        )
    );
}

#[test]
fn the_start_limit_ends_restarts() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let limit = Actor::system("limit");
    let hit = Event::LimitHit {
        limit: Limit::StartLimit {
            max: 2,
            window_ms: 3_000,
        },
        actor: limit.clone(),
    };
    let (l, fx) = on(&view(&spec, life(Status::Stopped), false), hit);
    assert_eq!((l.status, l.desired_running), (Status::Errored, false));
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(
                EventKind::Errored,
                &limit,
                "more than 2 restarts within 3000 ms (start limit); not restarting"
            )
        ]
    );
}

#[test]
fn an_exit_while_the_daemon_shuts_down_is_not_restarted() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let mut v = view(&spec, life(Status::Online), false);
    v.shutting_down = true;
    let exited = Event::Exited {
        exit: code(1),
        uptime_ms: 10,
    };
    let (l, fx) = on(&v, exited);
    assert_eq!((l.status, l.desired_running), (Status::Stopped, true));
    assert_eq!(
        fx,
        [
            record(EventKind::Exited, &Actor::system("crash"), "exit code 1"),
            Effect::EndRuns,
            Effect::Persist
        ]
    );
}

#[test]
fn a_passing_spawn_failure_is_retried_after_a_delay() {
    let mut spec = AppSpec::new("web", "sleep", vec![]);
    spec.restart_delay_ms = 0;
    spec.exp_backoff_ms = 0;
    let failed = |transient| Event::SpawnFailed {
        actor: human(),
        error: "no descriptors".into(),
        transient,
    };
    let (l, fx) = on(&view(&spec, life(Status::Stopped), false), failed(true));
    // One generation for the spawn, one for the queued retry.
    assert_eq!(
        (l.status, l.generation, l.unstable),
        (Status::Starting, 9, 1)
    );
    assert_eq!(
        fx,
        [
            record(
                EventKind::Failed,
                &human(),
                "no descriptors; a passing failure: trying again in 250 ms (attempt 1)"
            ),
            Effect::ArmRestart {
                delay_ms: 250,
                actor: Actor::system("retry"),
                why: "after a spawn failure that may pass".into()
            }
        ]
    );
    let (l, fx) = on(&view(&spec, life(Status::Stopped), false), failed(false));
    assert_eq!(
        (l.status, l.generation, l.desired_running),
        (Status::Errored, 8, false)
    );
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(EventKind::Failed, &human(), "no descriptors")
        ]
    );
    // Past max_restarts a passing failure errors too.
    let mut tired = life(Status::Stopped);
    tired.unstable = spec.max_restarts;
    let (l, _) = on(&view(&spec, tired, false), failed(true));
    assert_eq!(l.status, Status::Errored);
}

#[test]
fn spawned_and_adopted_apps_are_online() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let mut stopped = life(Status::Stopped);
    stopped.desired_running = false;
    let spawned = Event::Spawned {
        actor: human(),
        kind: EventKind::Started,
        pid: 42,
    };
    let (l, fx) = on(&view(&spec, stopped, false), spawned);
    assert_eq!(
        (l.status, l.generation, l.desired_running),
        (Status::Online, 8, true)
    );
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(EventKind::Started, &human(), "pid 42")
        ]
    );
    let (l, fx) = on(&view(&spec, stopped, true), Event::Adopted { pid: 42 });
    assert_eq!(
        (l.status, l.generation, l.desired_running),
        (Status::Online, 8, false)
    );
    assert_eq!(
        fx,
        [
            Effect::Persist,
            Effect::AdoptMembers,
            record(EventKind::Adopted, &Actor::system("adopt"), "pid 42")
        ]
    );
}

#[test]
fn a_start_by_request_forgets_the_crash_loop() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let mut errored = life(Status::Errored);
    errored.unstable = 5;
    errored.desired_running = false;
    let (l, fx) = on(&view(&spec, errored, false), Event::StartAsked);
    assert_eq!(
        (l.status, l.unstable, l.desired_running),
        (Status::Errored, 0, true)
    );
    assert_eq!(fx, [Effect::ForgetStartLimit]);
}

#[test]
fn dependencies_wait_in_starting_and_fail_errored() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let wait = Event::WaitForDependencies {
        actor: human(),
        detail: "for db (healthy)".into(),
    };
    let (l, fx) = on(&view(&spec, life(Status::Stopped), false), wait);
    assert_eq!((l.status, l.generation), (Status::Starting, 8));
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(EventKind::Waiting, &human(), "for db (healthy)")
        ]
    );
    let failed = Event::DependencyFailed {
        actor: human(),
        why: "dependency \"db\" is errored".into(),
    };
    let (l, _) = on(&view(&spec, l, false), failed);
    assert_eq!((l.status, l.desired_running), (Status::Errored, false));
}

#[test]
fn a_daemon_restart_after_its_stop() {
    let mut spec = AppSpec::new("web", "sleep", vec![]);
    spec.max_restarts = 1;
    let memory = DaemonRestart::MemoryLimit {
        used: 3 << 20,
        limit: 1 << 20,
    };
    let limit = Actor::system("limit");
    let after = |reason: &DaemonRestart, before| Event::DaemonRestarted {
        reason: reason.clone(),
        before,
    };
    let (l, fx) = on(
        &view(&spec, life(Status::Stopped), false),
        after(&memory, 0),
    );
    assert_eq!(l.unstable, 1);
    assert_eq!(
        fx,
        [Effect::QueueByDaemon {
            actor: limit.clone(),
            counts: true
        }]
    );
    let (l, fx) = on(
        &view(&spec, life(Status::Stopped), false),
        after(&memory, 1),
    );
    assert_eq!(
        (l.status, l.unstable, l.desired_running),
        (Status::Errored, 2, false)
    );
    assert_eq!(
        fx,
        [
            Effect::Persist,
            record(
                EventKind::Errored,
                &limit,
                "2 restarts in a row; not restarting"
            )
        ]
    );
    // Health and cron restarts do not count.
    let health = DaemonRestart::Health {
        detail: "3 failed".into(),
    };
    let (l, fx) = on(
        &view(&spec, life(Status::Stopped), false),
        after(&health, 5),
    );
    assert_eq!(l.unstable, 0);
    assert_eq!(
        fx,
        [Effect::QueueByDaemon {
            actor: Actor::system("health"),
            counts: false
        }]
    );
    // Not stopped (a start or a stop came in between), or going down:
    // nothing.
    let (l, fx) = on(&view(&spec, life(Status::Online), false), after(&memory, 0));
    assert_eq!(l, life(Status::Online));
    assert!(fx.is_empty());
    let mut v = view(&spec, life(Status::Stopped), false);
    v.shutting_down = true;
    assert!(on(&v, after(&memory, 0)).1.is_empty());
}

#[test]
fn what_a_daemon_restart_records() {
    let memory = DaemonRestart::MemoryLimit {
        used: 3 << 20,
        limit: 1 << 20,
    };
    assert_eq!(memory.actor(), Actor::system("limit"));
    assert_eq!(memory.kind(), EventKind::MemoryLimit);
    assert_eq!(memory.detail(), "memory 3 MiB over the limit of 1 MiB");
    let cron = DaemonRestart::Cron {
        expr: "* * * * *".into(),
    };
    assert_eq!(cron.actor(), Actor::system("cron"));
    assert_eq!(cron.kind(), EventKind::Cron);
    assert_eq!(cron.detail(), "scheduled by \"* * * * *\"");
    assert!(!cron.counts());
    let health = DaemonRestart::Health {
        detail: "2 failed checks in a row, last: refused".into(),
    };
    assert_eq!(health.kind(), EventKind::Unhealthy);
    assert_eq!(health.detail(), "2 failed checks in a row, last: refused");
}

#[test]
fn queued_restarts_wait_in_starting_and_say_why() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let cron = Actor::system("cron");
    let queue = Event::QueueRestart {
        delay_ms: 0,
        actor: cron.clone(),
        why: restart_why(&cron),
    };
    let (l, fx) = on(&view(&spec, life(Status::Stopped), false), queue);
    assert_eq!((l.status, l.generation), (Status::Starting, 8));
    assert_eq!(
        fx,
        [Effect::ArmRestart {
            delay_ms: 0,
            actor: cron,
            why: "on its cron schedule".into()
        }]
    );
    assert_eq!(restart_why(&human()), "for cli");
}

#[test]
fn reset_turns_errored_into_stopped() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let mut errored = life(Status::Errored);
    errored.unstable = 4;
    let (l, fx) = on(&view(&spec, errored, false), Event::Reset);
    assert_eq!((l.status, l.unstable), (Status::Stopped, 0));
    assert_eq!(fx, [Effect::ForgetStartLimit, Effect::Persist]);
    let (l, _) = on(&view(&spec, life(Status::Online), true), Event::Reset);
    assert_eq!(l.status, Status::Online);
}

#[test]
fn a_reload_takes_the_slot_and_gives_it_back() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let (l, fx) = on(&view(&spec, life(Status::Online), true), Event::ReloadAside);
    assert_eq!((l.status, l.generation), (Status::Stopped, 7));
    assert!(fx.is_empty());
    let (l, fx) = on(&view(&spec, l, true), Event::Restored);
    assert_eq!(
        (l.status, l.generation, l.desired_running),
        (Status::Online, 8, true)
    );
    assert_eq!(fx, [Effect::Persist]);
}

#[test]
fn recovery_settles_an_app_whose_process_is_gone() {
    let spec = AppSpec::new("web", "sleep", vec![]);
    let recovered = |l, gone| on(&view(&spec, l, false), Event::Recovered(gone));
    let mut unwanted = life(Status::Online);
    unwanted.desired_running = false;
    for l in [life(Status::Stopping), unwanted] {
        for gone in [Gone::Died, Gone::NeverForked] {
            let (next, fx) = recovered(l, gone);
            assert_eq!(next.status, Status::Stopped);
            assert_eq!(fx, [Effect::ForgetPid, Effect::Persist]);
        }
    }
    let (l, fx) = recovered(life(Status::Online), Gone::Died);
    assert_eq!(l.status, Status::Online);
    assert_eq!(fx, [Effect::ExitUnknown]);
    let (l, fx) = recovered(life(Status::Starting), Gone::NeverForked);
    assert_eq!(l.status, Status::Stopped);
    assert_eq!(fx, [Effect::Spawn]);
}

#[test]
fn stop_outcomes_read_as_before() {
    assert_eq!(StopOutcome::Signalled.to_string(), "stopped by signal");
    assert_eq!(StopOutcome::Killed.to_string(), "killed after kill_timeout");
}
