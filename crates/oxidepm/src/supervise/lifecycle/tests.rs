//! Transition tests: every step of an app's lifecycle, driven through the
//! supervisor with no process at all (pids past the kernel's limit, so
//! nothing is ever signalled) and the clock as data.

use super::DaemonRestart;
use crate::paths::Home;
use crate::store::Store;
use crate::supervise::policy::Exit;
use crate::supervise::supervisor::{lock, SeenExit, Shared, Supervisor};
use oxidepm_proto::{Actor, AppSpec, Class, RestartPolicy, Status};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Beyond `PID_MAX_LIMIT` (2^22): no process ever has these pids.
const PID: u32 = 4_194_999;
const PID2: u32 = 4_194_998;

struct Rig {
    _dir: tempfile::TempDir,
    shared: Shared,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::at(dir.path().to_path_buf());
    let store = Store::open(&dir.path().join("state.db")).unwrap();
    let shared = Supervisor::new(home, store, PathBuf::from("/nonexistent/shim"));
    Rig { _dir: dir, shared }
}

fn human() -> Actor {
    Actor::new(Class::Human, "cli")
}

fn spec(f: impl FnOnce(&mut AppSpec)) -> AppSpec {
    let mut s = AppSpec::new("web", "sleep", vec!["10".into()]);
    s.kill_timeout_ms = 20;
    f(&mut s);
    s
}

impl Rig {
    fn add(&self, spec: AppSpec) -> u64 {
        lock(&self.shared).insert(spec, &human()).unwrap()
    }

    /// Puts app `id` online with process `pid`, started at `at`, as a spawn
    /// leaves it.
    fn online(&self, id: u64, pid: u32, at: Instant) {
        let mut s = lock(&self.shared);
        let a = s.app_mut(id).unwrap();
        a.rt.status = Status::Online;
        a.rt.pid = Some(pid);
        a.rt.desired_running = true;
        a.started = Some(at);
        a.generation += 1;
    }

    fn status(&self, id: u64) -> Status {
        lock(&self.shared).app(id).unwrap().rt.status
    }

    fn desired(&self, id: u64) -> bool {
        lock(&self.shared).app(id).unwrap().rt.desired_running
    }

    fn generation(&self, id: u64) -> u64 {
        lock(&self.shared).app(id).unwrap().generation
    }

    /// The app's events after `defined`, as `kind actor detail`.
    fn events(&self) -> Vec<String> {
        let s = lock(&self.shared);
        s.store
            .events(None, 1000)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.as_str() != "defined")
            .map(|e| format!("{} {} {}", e.kind.as_str(), e.actor, e.detail))
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    /// What the store holds for app `id`: status and desired.
    fn stored(&self, id: u64) -> (Status, bool) {
        let s = lock(&self.shared);
        let rt = s
            .store
            .load_apps()
            .unwrap()
            .into_iter()
            .find(|a| a.id == id)
            .unwrap()
            .runtime;
        (rt.status, rt.desired_running)
    }

    fn exit(&self, id: u64, pid: u32, exit: Exit, started: Instant, seen: Instant) {
        lock(&self.shared).handle_seen_exit(SeenExit {
            id,
            pid,
            exit,
            started: Some(started),
            seen,
        });
    }
}

const CODE: fn(i32) -> Exit = Exit::code;

// --- requests: stop --------------------------------------------------------

#[tokio::test]
async fn stop_of_an_online_app_signals_then_finishes_stopped() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    r.online(id, PID, Instant::now());
    let g = r.generation(id);
    let ticket = lock(&r.shared).begin_stop(id, &human(), false);
    assert!(ticket.is_some());
    assert_eq!(r.status(id), Status::Stopping);
    assert!(!r.desired(id));
    assert_eq!(r.generation(id), g + 1);
    assert_eq!(r.stored(id), (Status::Stopping, false));
    {
        let s = lock(&r.shared);
        let a = s.app(id).unwrap();
        assert_eq!(a.rt.stopped_by, Some(Class::Human));
        assert_eq!(a.stopping_actor, Some(human()));
    }
    // A second stop while it stops waits on the same process.
    assert!(lock(&r.shared).begin_stop(id, &human(), false).is_some());
    assert_eq!(r.generation(id), g + 1);
    let how = crate::supervise::control::wait_stopped(ticket.unwrap()).await;
    assert_eq!(format!("{how}"), "killed after kill_timeout");
    lock(&r.shared).finish_stop(id, &human(), how);
    assert_eq!(r.status(id), Status::Stopped);
    assert_eq!(r.stored(id), (Status::Stopped, false));
    {
        let s = lock(&r.shared);
        let a = s.app(id).unwrap();
        // Killed before its exit was seen: the run ended by SIGKILL.
        assert_eq!(a.rt.pid, None);
        assert_eq!(a.rt.last_exit, None);
        assert_eq!(a.last_signal, Some(9));
        assert_eq!(a.stopping_actor, None);
    }
    assert_eq!(r.events(), ["stopped human:cli killed after kill_timeout"]);
}

#[tokio::test]
async fn an_exit_during_a_stop_is_left_to_the_stopper() {
    let r = rig();
    let id = r.add(spec(|s| s.kill_timeout_ms = 5_000));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    let ticket = lock(&r.shared).begin_stop(id, &human(), false).unwrap();
    // The stopper waits from the signal on, as `control::stop` does.
    let waiting = tokio::spawn(crate::supervise::control::wait_stopped(ticket));
    tokio::task::yield_now().await;
    r.exit(id, PID, CODE(143), t0, t0 + Duration::from_secs(1));
    assert_eq!(r.status(id), Status::Stopping);
    let how = waiting.await.unwrap();
    assert_eq!(format!("{how}"), "stopped by signal");
    lock(&r.shared).finish_stop(id, &human(), how);
    assert_eq!(r.status(id), Status::Stopped);
    let s = lock(&r.shared);
    let a = s.app(id).unwrap();
    assert_eq!(a.rt.last_exit, Some(143));
    assert_eq!(a.unstable, 0);
    drop(s);
    // No `exited` event: the stop tells it.
    assert_eq!(r.events(), ["stopped human:cli stopped by signal"]);
}

#[test]
fn finish_stop_of_an_app_not_stopping_does_nothing() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    r.online(id, PID, Instant::now());
    lock(&r.shared).finish_stop(id, &human(), super::StopOutcome::Signalled);
    assert_eq!(r.status(id), Status::Online);
    assert!(r.events().is_empty());
}

#[test]
fn stop_while_starting_cancels_the_pending_start() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    lock(&r.shared).schedule_restart(id, 60_000, &Actor::system("crash"));
    assert_eq!(r.status(id), Status::Starting);
    let g = r.generation(id);
    assert!(lock(&r.shared).begin_stop(id, &human(), false).is_none());
    assert_eq!(r.status(id), Status::Stopped);
    assert_eq!(r.generation(id), g + 1);
    assert_eq!(r.stored(id), (Status::Stopped, false));
    assert_eq!(r.events(), ["stopped human:cli pending start cancelled"]);
}

#[test]
fn stop_of_a_stopped_or_errored_app_records_who_meant_it_down() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    assert!(lock(&r.shared)
        .begin_stop(id, &Actor::new(Class::Ai, "a"), false)
        .is_none());
    assert_eq!(r.status(id), Status::Stopped);
    let s = lock(&r.shared);
    assert_eq!(s.app(id).unwrap().rt.stopped_by, Some(Class::Ai));
    drop(s);
    assert!(r.events().is_empty());
}

#[tokio::test]
async fn a_stop_that_keeps_desired_leaves_the_app_wanted() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    r.online(id, PID, Instant::now());
    let t = lock(&r.shared).begin_stop(id, &human(), true).unwrap();
    assert!(r.desired(id));
    assert_eq!(lock(&r.shared).app(id).unwrap().rt.stopped_by, None);
    let how = crate::supervise::control::wait_stopped(t).await;
    lock(&r.shared).finish_stop(id, &human(), how);
    assert_eq!(r.stored(id), (Status::Stopped, true));
}

// --- exits seen ------------------------------------------------------------

#[test]
fn a_crash_queues_a_restart_after_the_delay() {
    let r = rig();
    let id = r.add(spec(|s| s.restart_delay_ms = 700));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    let g = r.generation(id);
    r.exit(id, PID, CODE(3), t0, t0 + Duration::from_secs(60));
    assert_eq!(r.status(id), Status::Starting);
    assert!(r.desired(id));
    assert_eq!(r.generation(id), g + 1);
    assert_eq!(r.stored(id), (Status::Starting, true));
    let s = lock(&r.shared);
    let a = s.app(id).unwrap();
    assert_eq!(a.rt.pid, None);
    assert_eq!(a.rt.last_exit, Some(3));
    assert_eq!(a.rt.restarts, 1);
    assert_eq!(a.restart_reasons, [("crash".to_string(), 1)]);
    let w = a.waiting().unwrap();
    assert_eq!(w.reason, "after exit code 3");
    assert!(s.waits_for_restart(id));
    drop(s);
    assert_eq!(r.events(), ["exited system:crash exit code 3"]);
}

#[test]
fn a_clean_exit_under_always_is_restarted_and_counted_as_crash() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(0), t0, t0 + Duration::from_secs(60));
    assert_eq!(r.status(id), Status::Starting);
    let s = lock(&r.shared);
    assert_eq!(
        s.app(id).unwrap().restart_reasons,
        [("crash".to_string(), 1)]
    );
    drop(s);
    assert_eq!(r.events(), ["exited system:exit exit code 0"]);
}

#[test]
fn a_clean_exit_under_on_failure_rests_stopped() {
    let r = rig();
    let id = r.add(spec(|s| s.restart = RestartPolicy::OnFailure));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(0), t0, t0 + Duration::from_secs(1));
    assert_eq!(r.status(id), Status::Stopped);
    assert_eq!(r.stored(id), (Status::Stopped, false));
    assert_eq!(
        r.events(),
        ["exited system:exit exit code 0", "stopped system:exit"]
    );
}

#[test]
fn a_failure_under_never_rests_errored() {
    let r = rig();
    let id = r.add(spec(|s| s.restart = RestartPolicy::Never));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(1));
    assert_eq!(r.status(id), Status::Errored);
    assert_eq!(r.stored(id), (Status::Errored, false));
    assert_eq!(
        r.events(),
        ["exited system:crash exit code 1", "errored system:crash"]
    );
}

#[test]
fn a_crash_loop_ends_errored_after_max_restarts() {
    let r = rig();
    let id = r.add(spec(|s| {
        s.max_restarts = 2;
        s.min_uptime_ms = 1_000;
        s.restart_delay_ms = 0;
        s.exp_backoff_ms = 0;
    }));
    let mut t = Instant::now();
    for n in 0..3 {
        r.online(id, PID, t);
        r.exit(id, PID, CODE(1), t, t + Duration::from_millis(10));
        t += Duration::from_secs(600);
        if n < 2 {
            assert_eq!(r.status(id), Status::Starting, "exit {n}");
        }
    }
    assert_eq!(r.status(id), Status::Errored);
    assert!(!r.desired(id));
    assert_eq!(lock(&r.shared).app(id).unwrap().unstable, 3);
    assert_eq!(
        r.events().last().unwrap(),
        "errored system:crash 3 restarts in a row lasted less than min_uptime; not restarting"
    );
}

#[test]
fn the_start_limit_errors_restarts_that_come_too_fast() {
    let r = rig();
    let id = r.add(spec(|s| {
        s.max_restarts = 2;
        s.min_uptime_ms = 0;
        s.restart_delay_ms = 0;
    }));
    let mut t = Instant::now();
    for _ in 0..3 {
        r.online(id, PID, t);
        r.exit(id, PID, CODE(1), t, t + Duration::from_millis(10));
        t += Duration::from_millis(20);
    }
    assert_eq!(r.status(id), Status::Errored);
    assert_eq!(
        r.events().last().unwrap(),
        "errored system:crash more than 2 restarts within 3000 ms (start limit); not restarting"
    );
}

#[test]
fn an_exit_while_the_daemon_shuts_down_rests_stopped() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    lock(&r.shared).shutting_down = true;
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(1));
    assert_eq!(r.status(id), Status::Stopped);
    // Still wanted: resurrect brings it back.
    assert_eq!(r.stored(id), (Status::Stopped, true));
    assert_eq!(r.events(), ["exited system:crash exit code 1"]);
}

#[test]
fn an_exit_seen_again_during_the_restart_delay_changes_nothing() {
    let r = rig();
    let id = r.add(spec(|s| s.restart_delay_ms = 60_000));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(1));
    let g = r.generation(id);
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(2));
    assert_eq!(r.status(id), Status::Starting);
    assert_eq!(r.generation(id), g);
    assert_eq!(r.events(), ["exited system:crash exit code 1"]);
}

// --- timers ----------------------------------------------------------------

#[test]
fn a_restart_timer_is_current_only_for_its_own_wait() {
    let r = rig();
    let id = r.add(spec(|s| s.restart_delay_ms = 60_000));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(1));
    let due = {
        let mut s = lock(&r.shared);
        s.restarts.pop().unwrap()
    };
    assert!(lock(&r.shared).restart_current(&due));
    // A stop during the delay makes the timer stale.
    assert!(lock(&r.shared).begin_stop(id, &human(), false).is_none());
    assert!(!lock(&r.shared).restart_current(&due));
    assert_eq!(
        r.events(),
        [
            "exited system:crash exit code 1",
            "stopped human:cli pending start cancelled"
        ]
    );
}

#[test]
fn no_restart_timer_is_current_while_the_daemon_shuts_down() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    lock(&r.shared).schedule_restart(id, 0, &Actor::system("cron"));
    let due = lock(&r.shared).restarts.pop().unwrap();
    assert!(lock(&r.shared).restart_current(&due));
    lock(&r.shared).shutting_down = true;
    assert!(!lock(&r.shared).restart_current(&due));
}

#[test]
fn schedule_restart_says_why_by_actor() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    for (label, why) in [
        ("retry", "after a spawn failure that may pass"),
        ("health", "after failed health checks"),
        ("limit", "after the memory limit"),
        ("cron", "on its cron schedule"),
        ("other", "for other"),
    ] {
        lock(&r.shared).schedule_restart(id, 10, &Actor::system(label));
        let s = lock(&r.shared);
        assert_eq!(s.app(id).unwrap().waiting().unwrap().reason, why);
    }
    assert_eq!(lock(&r.shared).app(id).unwrap().rt.restarts, 5);
}

// --- limits and daemon restarts ---------------------------------------------

#[test]
fn a_daemon_restart_that_counts_is_refused_past_the_start_limit() {
    let r = rig();
    let id = r.add(spec(|s| {
        s.max_restarts = 1;
        s.min_uptime_ms = 0;
        s.restart_delay_ms = 0;
    }));
    let limit = Actor::system("limit");
    lock(&r.shared).queue_restart_by_daemon(id, &limit, true);
    assert_eq!(r.status(id), Status::Starting);
    lock(&r.shared).queue_restart_by_daemon(id, &limit, true);
    assert_eq!(r.status(id), Status::Errored);
    assert!(!r.desired(id));
    assert_eq!(
        r.events(),
        ["errored system:limit more than 1 restarts within 2000 ms (start limit); not restarting"]
    );
    // One that does not count is queued whatever the limit says.
    lock(&r.shared).queue_restart_by_daemon(id, &Actor::system("health"), false);
    assert_eq!(r.status(id), Status::Starting);
}

#[tokio::test]
async fn a_memory_limit_restart_stops_then_queues_a_restart() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    r.online(id, PID, Instant::now());
    let reason = DaemonRestart::MemoryLimit {
        used: 2 << 20,
        limit: 1 << 20,
    };
    crate::supervise::control::restart_by_daemon(&r.shared, id, reason).await;
    assert_eq!(r.status(id), Status::Starting);
    assert!(r.desired(id));
    let s = lock(&r.shared);
    let a = s.app(id).unwrap();
    assert_eq!(a.unstable, 1);
    assert_eq!(a.waiting().unwrap().reason, "after the memory limit");
    drop(s);
    assert_eq!(
        r.events(),
        [
            "memory-limit system:limit memory 2 MiB over the limit of 1 MiB",
            "stopped system:limit killed after kill_timeout",
        ]
    );
}

#[tokio::test]
async fn daemon_restarts_in_a_row_past_max_restarts_end_errored() {
    let r = rig();
    let id = r.add(spec(|s| s.max_restarts = 0));
    r.online(id, PID, Instant::now());
    let reason = DaemonRestart::MemoryLimit { used: 2, limit: 1 };
    crate::supervise::control::restart_by_daemon(&r.shared, id, reason).await;
    assert_eq!(r.status(id), Status::Errored);
    assert_eq!(r.stored(id), (Status::Errored, false));
    assert_eq!(
        r.events().last().unwrap(),
        "errored system:limit 1 restarts in a row; not restarting"
    );
}

#[tokio::test]
async fn a_daemon_restart_of_an_app_not_online_does_nothing() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    let reason = DaemonRestart::Cron {
        expr: "* * * * *".into(),
    };
    crate::supervise::control::restart_by_daemon(&r.shared, id, reason).await;
    assert_eq!(r.status(id), Status::Stopped);
    assert!(r.events().is_empty());
}

#[tokio::test]
async fn a_health_restart_does_not_count_toward_max_restarts() {
    let r = rig();
    let id = r.add(spec(|s| s.max_restarts = 0));
    r.online(id, PID, Instant::now());
    let reason = DaemonRestart::Health {
        detail: "3 failed checks in a row, last: refused".into(),
    };
    crate::supervise::control::restart_by_daemon(&r.shared, id, reason).await;
    assert_eq!(r.status(id), Status::Starting);
    assert_eq!(lock(&r.shared).app(id).unwrap().unstable, 0);
}

// --- reset, dependencies, failed starts --------------------------------------

#[test]
fn reset_turns_errored_into_stopped_and_forgets_restarts() {
    let r = rig();
    let id = r.add(spec(|s| s.restart = RestartPolicy::Never));
    let t0 = Instant::now();
    lock(&r.shared).schedule_restart(id, 0, &Actor::system("crash"));
    r.online(id, PID, t0);
    r.exit(id, PID, CODE(1), t0, t0 + Duration::from_secs(1));
    assert_eq!(r.status(id), Status::Errored);
    let done = lock(&r.shared).reset(id, &human()).unwrap();
    assert_eq!(done.restarts_before, 1);
    assert_eq!(done.status, Status::Stopped);
    assert_eq!(r.status(id), Status::Stopped);
    assert_eq!(
        r.events().last().unwrap(),
        "reset human:cli 1 restarts forgotten"
    );
    // Online stays online.
    r.online(id, PID, t0);
    let done = lock(&r.shared).reset(id, &human()).unwrap();
    assert_eq!(done.status, Status::Online);
}

#[test]
fn waiting_for_dependencies_then_one_fails() {
    let r = rig();
    r.add(AppSpec::new("db", "sleep", vec![]));
    let id = r.add(spec(|s| {
        s.depends_on = vec![oxidepm_proto::Dependency {
            app: "db".into(),
            condition: oxidepm_proto::DependencyCondition::Healthy,
        }]
    }));
    let g = r.generation(id);
    let waiting = lock(&r.shared).wait_for_dependencies(id, &human());
    assert_eq!(waiting, g + 1);
    assert_eq!(r.status(id), Status::Starting);
    assert_eq!(r.stored(id).0, Status::Starting);
    lock(&r.shared).dependency_failed(id, &human(), "dependency \"db\" is errored");
    assert_eq!(r.status(id), Status::Errored);
    assert_eq!(r.stored(id), (Status::Errored, false));
    assert_eq!(
        r.events(),
        [
            "waiting human:cli for db (healthy)",
            "errored human:cli dependency \"db\" is errored"
        ]
    );
}

#[test]
fn a_start_that_cannot_succeed_ends_errored() {
    let r = rig();
    let id = r.add(spec(|s| s.user = Some("no-such-user-oxidepm".into())));
    let g = r.generation(id);
    let e = lock(&r.shared).spawn_now(id, &human(), oxidepm_proto::EventKind::Started);
    let e = e.unwrap_err();
    assert!(!e.is_transient());
    assert_eq!(r.status(id), Status::Errored);
    assert_eq!(r.generation(id), g + 1);
    assert_eq!(r.stored(id), (Status::Errored, false));
    assert_eq!(r.events(), [format!("failed human:cli {e}")]);
}

// --- adopt and recovery ------------------------------------------------------

#[test]
fn adopting_a_process_puts_the_app_online() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    {
        let mut s = lock(&r.shared);
        s.app_mut(id).unwrap().rt.pid = Some(PID);
    }
    let g = r.generation(id);
    lock(&r.shared).adopted(id);
    assert_eq!(r.status(id), Status::Online);
    assert_eq!(r.generation(id), g + 1);
    assert_eq!(r.stored(id).0, Status::Online);
    assert_eq!(r.events(), [format!("adopted system:adopt pid {PID}")]);
}

/// Stores app `id` as a dead daemon left it.
fn left_as(r: &Rig, id: u64, status: Status, pid: Option<u32>, desired: bool) {
    let mut s = lock(&r.shared);
    let a = s.app_mut(id).unwrap();
    a.rt.status = status;
    a.rt.pid = pid;
    a.rt.pid_start = pid.map(|_| 1);
    a.rt.boot_id = Some(crate::supervise::procfs::boot_id());
    a.rt.desired_running = desired;
    s.persist(id);
}

#[tokio::test]
async fn recovery_after_a_daemon_restart() {
    let r = rig();
    let names = ["died", "stopping", "waiting", "stopped", "unwanted"];
    let ids: Vec<u64> = names
        .iter()
        .map(|n| r.add(AppSpec::new(*n, "sleep", vec![])))
        .collect();
    left_as(&r, ids[0], Status::Online, Some(PID), true);
    left_as(&r, ids[1], Status::Stopping, Some(PID2), true);
    left_as(&r, ids[2], Status::Starting, None, true);
    left_as(&r, ids[3], Status::Stopped, None, true);
    left_as(&r, ids[4], Status::Online, Some(PID2), false);
    let plain = crate::supervise::recovery::recover(&r.shared, false);
    // A process gone while no daemon ran is a crash: restarted by policy.
    assert_eq!(r.status(ids[0]), Status::Starting);
    assert_eq!(r.status(ids[1]), Status::Stopped);
    assert_eq!(r.status(ids[2]), Status::Stopped);
    assert_eq!(r.status(ids[3]), Status::Stopped);
    assert_eq!(r.status(ids[4]), Status::Stopped);
    assert_eq!(plain, [ids[2]]);
    assert_eq!(r.stored(ids[1]), (Status::Stopped, true));
    assert_eq!(lock(&r.shared).app(ids[1]).unwrap().rt.pid, None);
    assert_eq!(
        r.events(),
        ["exited system:crash exit status unknown (the process was adopted)"]
    );
}

#[test]
fn resurrect_starts_what_was_wanted_running() {
    let r = rig();
    let a = r.add(AppSpec::new("a", "sleep", vec![]));
    let b = r.add(AppSpec::new("b", "sleep", vec![]));
    left_as(&r, a, Status::Stopped, None, true);
    left_as(&r, b, Status::Stopped, None, false);
    assert_eq!(crate::supervise::recovery::recover(&r.shared, true), [a]);
    assert!(crate::supervise::recovery::recover(&r.shared, false).is_empty());
}

// --- reload ------------------------------------------------------------------

#[test]
fn a_reload_whose_new_process_exits_keeps_the_old_one() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    let old = lock(&r.shared).reload_aside(id, &human()).unwrap();
    assert_eq!(old.pid, PID);
    assert_eq!(r.status(id), Status::Stopped);
    assert!(lock(&r.shared).app(id).unwrap().reloading);
    // A second reload meanwhile is refused.
    assert!(lock(&r.shared).reload_aside(id, &human()).is_err());
    // The new process (spawned beside the old one) dies at once.
    let t1 = t0 + Duration::from_secs(5);
    r.online(id, PID2, t1);
    let g = r.generation(id);
    r.exit(id, PID2, CODE(2), t1, t1 + Duration::from_millis(5));
    assert_eq!(r.status(id), Status::Online);
    assert_eq!(r.generation(id), g + 1);
    let s = lock(&r.shared);
    let a = s.app(id).unwrap();
    assert_eq!(a.rt.pid, Some(PID));
    assert!(!a.reloading);
    assert_eq!(a.rt.restarts, 0);
    drop(s);
    assert_eq!(r.stored(id), (Status::Online, true));
    assert_eq!(
        r.events(),
        [
            format!("reload human:cli pid {PID} keeps serving until a new process is healthy"),
            format!("reload system:reload failed: the new process exit code 2; pid {PID} kept"),
        ]
    );
}

#[test]
fn a_reload_cut_short_puts_the_old_run_back() {
    let r = rig();
    let id = r.add(spec(|_| {}));
    let t0 = Instant::now();
    r.online(id, PID, t0);
    let old = lock(&r.shared).reload_aside(id, &human()).unwrap();
    r.online(id, PID2, t0 + Duration::from_secs(1));
    let (new, _) = lock(&r.shared)
        .reload_undo(id, &old, &human(), "not healthy in time")
        .unwrap();
    assert_eq!(new.pid, PID2);
    assert_eq!(r.status(id), Status::Online);
    assert_eq!(lock(&r.shared).app(id).unwrap().rt.pid, Some(PID));
    assert!(lock(&r.shared)
        .reload_undo(id, &old, &human(), "again")
        .is_none());
    assert_eq!(
        r.events().last().unwrap(),
        &format!(
            "reload human:cli failed: not healthy in time; stopping the new pid {PID2}, pid {PID} kept"
        )
    );
    // The new run's exit, once seen, is recorded as that run's.
    r.exit(id, PID2, CODE(0), t0, t0 + Duration::from_secs(2));
    assert_eq!(r.status(id), Status::Online);
    assert_eq!(
        r.events().last().unwrap(),
        &format!("exited system:reload pid {PID2} (taken aside by a reload): exit code 0")
    );
}
