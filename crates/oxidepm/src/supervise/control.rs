//! The operations a request asks for (start, stop, restart, delete,
//! shutdown; `define` is its own module), including the waiting a stop
//! involves, and the restarts the daemon decides on by itself.

use super::lifecycle::{DaemonRestart, Event, StopOutcome};
use super::supervisor::{lock, Shared, StopTicket, Supervisor};
use super::{deps, Error};
use oxidepm_proto::{
    Action, Actor, AppAction, DependencyCondition, EventKind, HealthState, Status,
};

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// Apps spawned by a start before it yields (and forked together: their
/// intents in one commit, their forks in another).
const LAUNCH_BATCH: usize = 32;

/// Waits until every process of the ticket's app is gone: the stop signal
/// was already sent to all of them; after `kill_timeout` everything left is
/// killed (`cgroup.kill`, or SIGKILL to the recorded sessions). With a
/// cgroup the kernel says when it is empty (`populated 0`); nothing is
/// polled. Returns how it ended.
pub async fn wait_stopped(mut t: StopTicket) -> StopOutcome {
    let deadline = Instant::now() + t.kill_timeout;
    let start = *t.exits.borrow_and_update();
    let main_exit = async {
        while *t.exits.borrow_and_update() == start {
            if t.exits.changed().await.is_err() {
                break;
            }
        }
    };
    let mut how = StopOutcome::Signalled;
    if timeout(t.kill_timeout, main_exit).await.is_err() {
        how = StopOutcome::Killed;
    }
    // The main process is gone (or late); others that ignored the signal
    // may remain in the app's cgroup or sessions.
    let left = deadline.saturating_duration_since(Instant::now());
    if !t.members.emptied(left).await {
        how = StopOutcome::Killed;
        t.members.kill_and_wait().await;
    }
    how
}

/// Stops the apps `ids` and waits until each tree is gone. Apps that
/// others in the set depend on are stopped after them (reverse dependency
/// order); independent apps are stopped concurrently.
pub async fn stop(shared: &Shared, ids: &[u64], actor: &Actor, keep_desired: bool) {
    for batch in stop_batches(shared, ids) {
        stop_batch(shared, &batch, actor, keep_desired).await;
    }
}

/// Splits `ids` into batches: each batch holds the apps on which no app
/// still to stop depends.
fn stop_batches(shared: &Shared, ids: &[u64]) -> Vec<Vec<u64>> {
    let s = lock(shared);
    let mut remaining: Vec<u64> = ids.to_vec();
    let mut batches = Vec::new();
    while !remaining.is_empty() {
        let needed: std::collections::HashSet<String> = remaining
            .iter()
            .filter_map(|id| s.app(*id))
            .flat_map(|a| a.spec.depends_on.iter().map(|d| d.app.clone()))
            .collect();
        let (batch, rest): (Vec<u64>, Vec<u64>) = remaining
            .iter()
            .partition(|id| s.app(**id).is_none_or(|a| !needed.contains(&a.spec.name)));
        if batch.is_empty() {
            // A cycle (refused at definition, but be safe): stop the rest together.
            batches.push(rest);
            break;
        }
        batches.push(batch);
        remaining = rest;
    }
    batches
}

async fn stop_batch(shared: &Shared, ids: &[u64], actor: &Actor, keep_desired: bool) {
    let tickets: Vec<StopTicket> = {
        let mut s = lock(shared);
        ids.iter()
            .filter_map(|&id| s.begin_stop(id, actor, keep_desired))
            .collect()
    };
    let waits = tickets.into_iter().map(|t| {
        let shared = shared.clone();
        let actor = actor.clone();
        tokio::spawn(async move {
            let id = t.id;
            let how = wait_stopped(t).await;
            lock(&shared).finish_stop(id, &actor, how);
        })
    });
    for w in waits.collect::<Vec<_>>() {
        let _ = w.await;
    }
}

/// Why a dependency will not become ready by waiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    /// It was deleted since the dependent app was defined.
    #[error("dependency {dependency:?} is not defined")]
    Undefined {
        /// The dependency.
        dependency: String,
    },
    /// It is errored: it will not start again by itself.
    #[error("dependency {dependency:?} is errored")]
    Errored {
        /// The dependency.
        dependency: String,
    },
    /// It was to complete, and exited with a failure.
    #[error("dependency {dependency:?} exited with code {code}")]
    Failed {
        /// The dependency.
        dependency: String,
        /// Its exit code.
        code: i32,
    },
}

/// Whether the dependencies of app `id` are ready; `Err` when one failed
/// in a way that will not resolve by waiting.
fn deps_ready(s: &Supervisor, id: u64) -> Result<bool, DependencyError> {
    let Some(app) = s.app(id) else {
        return Ok(false);
    };
    for d in &app.spec.depends_on {
        let dependency = || d.app.clone();
        let Some(dep) = s.apps().find(|a| a.spec.name == d.app) else {
            return Err(DependencyError::Undefined {
                dependency: dependency(),
            });
        };
        let st = dep.rt.status;
        let completed = st == Status::Stopped && dep.rt.last_exit == Some(0);
        if st == Status::Errored {
            return Err(DependencyError::Errored {
                dependency: dependency(),
            });
        }
        let ready = match d.condition {
            DependencyCondition::Started => st == Status::Online || completed,
            DependencyCondition::Healthy => {
                st == Status::Online && dep.health == Some(HealthState::Healthy)
            }
            DependencyCondition::Completed => {
                if st == Status::Stopped && dep.rt.last_exit.is_some_and(|c| c != 0) {
                    return Err(DependencyError::Failed {
                        dependency: dependency(),
                        code: dep.rt.last_exit.unwrap_or(-1),
                    });
                }
                completed
            }
        };
        if !ready {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Starts the apps `ids` that are not running, with what they depend on,
/// in dependency order. An app whose dependencies are not ready yet waits
/// in `starting` and is spawned as soon as they are. Apps in `restarted`
/// are recorded as restarts.
async fn launch(
    shared: &Shared,
    ids: &[u64],
    actor: &Actor,
    restarted: &[u64],
) -> Result<Vec<AppAction>, Error> {
    let order = launch_order(&lock(shared), ids)?;
    let mut out = Vec::new();
    for chunk in order.chunks(LAUNCH_BATCH) {
        {
            // One commit for the intents forked together, one for their
            // forks. The batch is closed while the loop yields: other
            // tasks' writes (and the store's retry, which opens its own
            // transaction) never run inside it.
            let _batch = Supervisor::batch(shared);
            let mut s = lock(shared);
            let mut forks = Vec::new();
            for &id in chunk {
                // An app that depends on others sees them forked (online)
                // first, as when each app was forked in turn.
                if s.app(id).is_some_and(|a| !a.spec.depends_on.is_empty()) {
                    fork_pending(&mut s, &mut forks, &mut out, actor)?;
                }
                let kind = if restarted.contains(&id) {
                    EventKind::Restarted
                } else {
                    EventKind::Started
                };
                let launched = launch_one(shared, &mut s, id, actor, kind);
                if launched.is_err() {
                    // The apps before it are still started, as they were
                    // when each was forked in turn.
                    fork_pending(&mut s, &mut forks, &mut out, actor)?;
                }
                match launched? {
                    Launched::Answer(a) => out.push(a),
                    Launched::Fork(a, kind) => {
                        forks.push((id, kind));
                        out.push(a);
                    }
                    Launched::Gone => {}
                }
            }
            fork_pending(&mut s, &mut forks, &mut out, actor)?;
        }
        // A long start lets the reaper see exits on time (a run's length
        // ends when its death is seen) and requests get an answer.
        tokio::task::yield_now().await;
    }
    Ok(out)
}

/// Forks the apps of `forks` (emptied) together and fills their pids into
/// `out`. The first failure is the request's answer, as when the apps
/// were forked one by one; the other forks stand.
fn fork_pending(
    s: &mut Supervisor,
    forks: &mut Vec<(u64, EventKind)>,
    out: &mut [AppAction],
    actor: &Actor,
) -> Result<(), Error> {
    if forks.is_empty() {
        return Ok(());
    }
    let mut failed = None;
    let results = s.spawn_many(forks, actor);
    for ((id, _), result) in forks.drain(..).zip(results) {
        match result {
            Ok(pid) => {
                if let Some(a) = out.iter_mut().rev().find(|a| a.id == id) {
                    a.pid = Some(pid);
                }
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// What a launch does with one app.
enum Launched {
    /// Nothing more: it runs, or waits for its dependencies.
    Answer(AppAction),
    /// Forked with the chunk, recorded as the kind; the answer's pid is
    /// filled in then.
    Fork(AppAction, EventKind),
    /// It was deleted meanwhile.
    Gone,
}

/// The apps `ids` with the dependencies they need started, in dependency
/// order.
fn launch_order(s: &Supervisor, ids: &[u64]) -> Result<Vec<u64>, Error> {
    let names = s.names(ids);
    let edges = s.dependency_edges();
    // Bring along dependencies that are not running, except one-shot
    // ones that already completed: those are not run again.
    let idle: BTreeMap<String, Vec<String>> = edges
        .iter()
        .map(|(app, ds)| {
            let need: Vec<String> = ds
                .iter()
                .filter(|d| {
                    s.apps().find(|a| &a.spec.name == *d).is_some_and(|a| {
                        !a.is_running()
                            && a.rt.status != Status::Starting
                            && !(a.rt.status == Status::Stopped && a.rt.last_exit == Some(0))
                    })
                })
                .cloned()
                .collect();
            (app.clone(), need)
        })
        .collect();
    let all = deps::with_dependencies(&names, &idle);
    let ordered = deps::order(&all, &edges)?;
    Ok(ordered
        .iter()
        .filter_map(|n| s.apps().find(|a| &a.spec.name == n).map(|a| a.id))
        .collect())
}

/// Readies app `id` of a launch for its fork, recorded as `kind`, or has
/// it wait for its dependencies.
fn launch_one(
    shared: &Shared,
    s: &mut Supervisor,
    id: u64,
    actor: &Actor,
    kind: EventKind,
) -> Result<Launched, Error> {
    let Some(app) = s.app(id) else {
        return Ok(Launched::Gone);
    };
    let name = app.spec.name.clone();
    let answer = |action, pid| AppAction {
        action,
        id,
        name: name.clone(),
        note: None,
        pid,
    };
    // A start by request cuts a queued restart's wait short.
    let waiting = s.waits_for_restart(id);
    match app.rt.status {
        Status::Starting if waiting => {}
        Status::Online | Status::Starting => {
            return Ok(Launched::Answer(answer(Action::AlreadyRunning, None)))
        }
        Status::Stopping => return Err(Error::Stopping { app: name.clone() }),
        Status::Stopped | Status::Errored => {}
    }
    let action = match kind {
        EventKind::Restarted => Action::Restarted,
        _ => Action::Started,
    };
    // A person (or a dependent's start) asks for it: the crash loop
    // that errored it is over.
    s.transition(id, Event::StartAsked);
    match deps_ready(s, id) {
        Ok(true) => {
            if kind == EventKind::Restarted {
                if let Some(a) = s.app_mut(id) {
                    a.count_restart(actor);
                }
            }
            Ok(Launched::Fork(answer(action, None), kind))
        }
        Ok(false) => {
            let generation = s.wait_for_dependencies(id, actor);
            let shared = shared.clone();
            let actor = actor.clone();
            tokio::spawn(
                async move { spawn_when_ready(shared, id, generation, actor, kind).await },
            );
            Ok(Launched::Answer(answer(
                Action::WaitingForDependencies,
                None,
            )))
        }
        Err(source) => Err(Error::Dependency {
            app: name.clone(),
            source,
        }),
    }
}

async fn spawn_when_ready(shared: Shared, id: u64, generation: u64, actor: Actor, kind: EventKind) {
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut s = lock(&shared);
        match s.app(id) {
            Some(a) if a.generation == generation && a.rt.status == Status::Starting => {}
            _ => return,
        }
        match deps_ready(&s, id) {
            Ok(false) => continue,
            Ok(true) => {
                if kind == EventKind::Restarted {
                    if let Some(a) = s.app_mut(id) {
                        a.count_restart(&actor);
                    }
                }
                let _ = s.spawn_now(id, &actor, kind);
            }
            Err(why) => s.dependency_failed(id, &actor, &why.to_string()),
        }
        return;
    }
}

/// Starts the apps `ids` that are not running (and what they depend on).
pub async fn start(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Vec<AppAction>, Error> {
    launch(shared, ids, actor, &[]).await
}

/// Restarts the apps `ids` (starting those that are not running).
pub async fn restart(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Vec<AppAction>, Error> {
    let running: Vec<u64> = {
        let s = lock(shared);
        ids.iter()
            .copied()
            .filter(|&id| s.app(id).is_some_and(|a| a.is_running()))
            .collect()
    };
    stop(shared, &running, actor, true).await;
    launch(shared, ids, actor, &running).await
}

/// Restarts app `id` because the daemon decided to (its memory limit,
/// cron schedule or health checks), recording why first. A restart for
/// the memory limit counts toward `max_restarts` like a crash.
pub async fn restart_by_daemon(shared: &Shared, id: u64, reason: DaemonRestart) {
    let actor = reason.actor();
    let before = {
        let s = lock(shared);
        match s.app(id) {
            Some(a) if a.rt.status == Status::Online => a.unstable,
            _ => return,
        }
    };
    lock(shared).event(id, reason.kind(), &actor, &reason.detail());
    stop(shared, &[id], &actor, true).await;
    // Through the restart queue, as a crash's restart: the daemon-wide
    // rate limit holds for health, memory and cron restarts too.
    lock(shared).transition(id, Event::DaemonRestarted { reason, before });
}

/// Stops and forgets the apps `ids`.
pub async fn delete(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Vec<AppAction>, Error> {
    stop(shared, ids, actor, false).await;
    let mut out = Vec::new();
    let mut s = lock(shared);
    for &id in ids {
        let name = s.names(&[id]).pop().unwrap_or_default();
        s.remove(id, actor)?;
        out.push(AppAction {
            action: Action::Deleted,
            id,
            name,
            note: None,
            pid: None,
        });
    }
    Ok(out)
}

/// Stops every app for a daemon shutdown; the running set stays recorded
/// (desired state) so that `resurrect` can bring it back.
pub async fn shutdown(shared: &Shared, actor: &Actor) {
    let ids: Vec<u64> = {
        let mut s = lock(shared);
        s.shutting_down = true;
        s.apps().map(|a| a.id).collect()
    };
    stop(shared, &ids, actor, true).await;
    lock(shared).tidy_cgroups();
}
