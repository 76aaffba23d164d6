//! Forking apps' processes, one ([`Supervisor::spawn_now`]) or many at
//! once ([`Supervisor::spawn_many`]).
//!
//! A clone waits for its child's exec (vfork-style: the child borrows the
//! daemon's memory until then, so no page table is copied), and each app
//! has two execs, its own and its log writer's. One after the other, a
//! start of 1,000 apps was 2,000 such waits in a row with a core idle. A
//! start of many apps therefore writes every intent in one commit before
//! any fork, makes the cgroup leaves, forks the apps and their writers on
//! a few threads at once, and records all the forks in one commit. An
//! exec failure is still the child's errno through its close-on-exec
//! pipe, read on the thread that cloned it, and still reaped there: the
//! supervisor stays locked throughout, so the reaper cannot take it first.

use super::{Forked, Supervisor};
use crate::supervise::lifecycle;
use crate::supervise::logshim::ShimConfig;
use crate::supervise::spawn::{self, Creds, SpawnError, Spawned};
use crate::supervise::{fd_budget, logwriters, Error};
use oxidepm_proto::{Actor, AppSpec, EventKind};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Mutex;

/// Threads that fork at once, the calling one included: a thread mostly
/// waits for its child's exec, and on a busy machine for that child to be
/// scheduled at all (measured under load: 8 a little better than 4, one
/// thread alone four times slower).
const SPAWNERS: usize = 8;

/// An app whose fork is ready: its intent committed, its cgroup leaf made.
struct Ready {
    /// Where in the request it is.
    index: usize,
    id: u64,
    run_id: i64,
    /// Its run's cgroup leaf, where cgroups are in force.
    run: Option<String>,
    job: Job,
}

/// What one fork needs, and nothing of the supervisor.
struct Job {
    spec: AppSpec,
    creds: Option<Creds>,
    env: Vec<(OsString, OsString)>,
    /// The directory of the run's cgroup leaf.
    dir: Option<OwnedFd>,
    shim: ShimConfig,
    /// Its writer's watch, taken in the order of the start.
    watch: Option<fd_budget::Share>,
}

impl Supervisor {
    /// Starts a process for app `id` now. `kind` is the event to record
    /// (`started` or `restarted`).
    pub fn spawn_now(&mut self, id: u64, actor: &Actor, kind: EventKind) -> Result<u32, Error> {
        self.spawn_many(&[(id, kind)], actor)
            .pop()
            .unwrap_or(Err(Error::NoSuchApp { id }))
    }

    /// Starts a process for each app of `starts` (app id, the event to
    /// record) now, and returns each start's result in the same order: a
    /// pid, or why it failed (the app is then `errored`, or queued for a
    /// retry, as after [`Supervisor::spawn_now`]). All intents are
    /// committed before the first fork.
    pub fn spawn_many(
        &mut self,
        starts: &[(u64, EventKind)],
        actor: &Actor,
    ) -> Vec<Result<u32, Error>> {
        let mut done: Vec<Option<Result<u32, Error>>> = starts.iter().map(|_| None).collect();
        let mut wanted = Vec::new();
        for (index, &(id, _)) in starts.iter().enumerate() {
            let Some(app) = self.apps.get_mut(&id) else {
                done[index] = Some(Err(Error::NoSuchApp { id }));
                continue;
            };
            let spec = app.spec.clone();
            // Whatever stopped it before, it is being started now.
            app.rt.stopped_by = None;
            // A process of this app that outlived a lost state is taken
            // over rather than duplicated.
            if let Some(pid) = self.adopt_orphan(id, actor) {
                done[index] = Some(Ok(pid));
                continue;
            }
            match self.creds_for(&spec) {
                Ok(creds) => wanted.push((index, id, spec, creds)),
                Err(e) => done[index] = Some(Err(self.start_failed(id, actor, e.into()))),
            }
        }
        let mut intents: Vec<_> = wanted
            .iter()
            .map(|(_, id, ..)| {
                let rt = self.apps.get(id).map(|a| &a.rt).cloned();
                (*id, lifecycle::intent(&rt.unwrap_or_default()))
            })
            .collect();
        let run_ids = self.store.begin_runs(actor, &mut intents);
        let mut ready = Vec::new();
        for ((index, id, spec, creds), run_id) in wanted.into_iter().zip(run_ids) {
            match self.make_ready(id, spec, creds, run_id) {
                Ok((run, job)) => ready.push(Ready {
                    index,
                    id,
                    run_id,
                    run,
                    job,
                }),
                Err(e) => {
                    self.run_never_forked(run_id);
                    done[index] = Some(Err(self.start_failed(id, actor, e.into())));
                }
            }
        }
        let (metas, jobs): (Vec<_>, Vec<_>) = ready
            .into_iter()
            .map(|r| ((r.index, r.id, r.run_id, r.run), r.job))
            .unzip();
        let spawned = fork_all(&self.shim_exe, jobs);
        // The pids, the sessions, the states and the events: one commit.
        let batch = self.store.begin_batch();
        for ((index, id, run_id, run), result) in metas.into_iter().zip(spawned) {
            done[index] = Some(match result {
                Ok(sp) => {
                    let forked = Forked {
                        pid: sp.pid,
                        start_ticks: sp.start_ticks,
                        run,
                        run_id,
                    };
                    Ok(self.forked(id, actor, starts[index].1.clone(), forked))
                }
                Err(e) => {
                    if let (Some(cg), Some(run)) = (self.containment.cgroups(), &run) {
                        let _ = std::fs::remove_dir(cg.dir(run));
                    }
                    self.run_never_forked(run_id);
                    Err(self.start_failed(id, actor, e.into()))
                }
            });
        }
        self.store.end_batch(batch);
        done.into_iter()
            .zip(starts)
            .map(|(d, &(id, _))| d.unwrap_or(Err(Error::NoSuchApp { id })))
            .collect()
    }

    /// Everything app `id`'s fork needs once its intent (run `run_id`) is
    /// written: its environment, its log writer's configuration, and its
    /// run's cgroup leaf where cgroups are in force.
    fn make_ready(
        &mut self,
        id: u64,
        spec: AppSpec,
        creds: Option<Creds>,
        run_id: i64,
    ) -> Result<(Option<String>, Job), SpawnError> {
        let env_creds = creds.clone().unwrap_or_else(|| self.own.clone());
        let mut extra = self.app_extra_env(&spec);
        extra.push(self.marker_of(id, run_id, &spec.name));
        let env = spawn::app_env(&spec, &env_creds, &extra);
        let [out, errp] = self.log_paths(&spec.name);
        let shim = self.log_output.shim_config(&spec, out, errp);
        let (run, dir) = match self.new_run(id)? {
            Some(r) => (Some(r.path), Some(r.dir)),
            None => (None, None),
        };
        let job = Job {
            spec,
            creds,
            env,
            dir,
            shim,
            watch: logwriters::watch_share(),
        };
        Ok((run, job))
    }

    /// Records that run `run_id` got no process.
    fn run_never_forked(&self, run_id: i64) {
        if let Err(e) = self.store.run_failed(run_id) {
            log::error!("cannot record that run {run_id} failed: {e}");
        }
    }
}

impl Job {
    fn fork(self, shim_exe: &Path) -> Result<Spawned, SpawnError> {
        let Job {
            spec,
            creds,
            env,
            dir,
            shim,
            watch,
        } = self;
        spawn::spawn_app(&spec, creds.as_ref(), env, dir, shim_exe, &shim, watch)
    }
}

/// Forks every job, on up to [`SPAWNERS`] threads at once; the results
/// are in the order of `jobs`. A thread that cannot be made leaves its
/// share to the others (this one always forks).
fn fork_all(shim_exe: &Path, jobs: Vec<Job>) -> Vec<Result<Spawned, SpawnError>> {
    let n = jobs.len();
    if n <= 1 {
        return jobs.into_iter().map(|j| j.fork(shim_exe)).collect();
    }
    // A log writer is watched from the daemon's runtime (see
    // `logwriters::watch`): the helper threads enter it.
    let runtime = tokio::runtime::Handle::try_current().ok();
    let queue = Mutex::new(jobs.into_iter().enumerate());
    let results = Mutex::new((0..n).map(|_| None).collect::<Vec<_>>());
    let work = || loop {
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
        let Some((i, job)) = next else { return };
        let r = job.fork(shim_exe);
        results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
    };
    std::thread::scope(|s| {
        for _ in 1..SPAWNERS.min(n) {
            let spawned = std::thread::Builder::new()
                .name("spawner".into())
                .spawn_scoped(s, || {
                    let _entered = runtime.as_ref().map(|h| h.enter());
                    work()
                });
            if spawned.is_err() {
                break;
            }
        }
        work();
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        // Every job taken is forked and its result kept by the thread that
        // took it (a panic would have ended the scope): none is missing.
        .map(|r| r.unwrap_or(Err(SpawnError::Pipe(nix::errno::Errno::ECHILD))))
        .collect()
}
