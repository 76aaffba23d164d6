//! The supervisor's state: every app and the means to run them, and the
//! executor of their lifecycle (what follows what is decided in
//! `lifecycle`; `effects` carries it out). Every method runs with the
//! state locked and never waits; the waiting parts (stop timeouts, restart
//! delays, exit watches) live in `control`, `reaper` and the restart task.

use super::app::{App, Runtime};
use super::cgroup::Containment;
use super::lifecycle::{self, Event};
use super::logfile;
use super::policy::Exit;
use super::spawn::{self, Creds, SpawnError};
use super::Error;
use crate::bus::Bus;
use crate::paths::Home;
use crate::store::{Store, StoreError};
use crate::timefmt::now_ms;
use oxidepm_proto::{Actor, AppSpec, EventKind, Status};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// The supervisor, shared by the daemon's tasks.
pub type Shared = Arc<Mutex<Supervisor>>;

/// What an agent app is told about its lane, by agent name.
pub type LaneEnv =
    Box<dyn Fn(oxidepm_proto::AppKind, &str) -> Option<Vec<(String, String)>> + Send>;

mod agents;
mod effects;
mod members;
mod orphans;
mod preflight;
mod record;
mod restarts;
mod select;
mod spawning;
mod starting;
mod stopping;
pub mod storage;
mod verbs;
mod waiting;

use effects::EndedRun;
pub use members::{Members, Membership};
pub use orphans::Orphan;
pub use restarts::SeenExit;

/// Locks the supervisor (a panic elsewhere never wedges the daemon).
pub fn lock(s: &Mutex<Supervisor>) -> MutexGuard<'_, Supervisor> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a stopper waits on.
#[derive(Debug)]
pub struct StopTicket {
    /// App id.
    pub id: u64,
    /// When to give up on the stop signal and SIGKILL the tree.
    pub kill_timeout: Duration,
    /// Changes when the main process exits.
    pub exits: watch::Receiver<u64>,
    /// What holds every process of the app.
    pub members: Members,
}

/// The supervisor: every app, and the means to run them.
pub struct Supervisor {
    /// The home directory.
    pub home: Home,
    /// The state database.
    pub store: Store,
    apps: BTreeMap<u64, App>,
    by_pid: HashMap<u32, u64>,
    probes: HashMap<u32, (u64, oneshot::Sender<Exit>)>,
    this: Weak<Mutex<Supervisor>>,
    shim_exe: PathBuf,
    boot_id: String,
    own: Creds,
    is_root: bool,
    containment: Containment,
    /// Recorded sessions: id → (app, leader's start time).
    sessions: HashMap<u32, (u64, u64)>,
    /// App cgroups of this home that no app owned at start, with processes.
    strays: Vec<PathBuf>,
    /// Set once the daemon is going down: exits are not restarted.
    pub shutting_down: bool,
    /// The lane environment of agent apps (set when lanes are on).
    pub lane_env: Option<LaneEnv>,
    /// `agents_share_uid` of daemon.toml: a root daemon may run agents as
    /// root.
    pub agents_share_uid: bool,
    /// Where apps' output goes: daemon.toml's `log_target` and the journal's socket.
    pub log_output: super::logshim::LogOutput,
    /// This home's id in the run markers of its processes.
    home_id: String,
    /// Live runs of apps the state does not know, by app name.
    orphans: BTreeMap<String, Orphan>,
    /// Automatic restarts waiting for the restart task, and each app's
    /// recent restarts.
    pub(crate) restarts: super::restart_queue::RestartQueue,
    /// Where every recorded event is published as it happens.
    pub bus: Arc<Bus>,
    /// Woken when an app's spec with a memory limit is armed: the limit
    /// watch sleeps on it while no app has one.
    pub(crate) limits_armed: Arc<tokio::sync::Notify>,
    /// Told (without waiting) when an app is defined, changed or deleted:
    /// the `ops` responder's thread sleeps on it instead of looking at
    /// every app each second.
    pub specs_changed: Option<std::sync::mpsc::SyncSender<()>>,
}

impl Supervisor {
    /// A supervisor over `store`, not yet holding any app.
    pub fn new(home: Home, store: Store, shim_exe: PathBuf) -> Shared {
        Arc::new_cyclic(|this| {
            Mutex::new(Supervisor {
                home_id: super::marker::home_id(home.root()),
                orphans: BTreeMap::new(),
                home,
                store,
                apps: BTreeMap::new(),
                by_pid: HashMap::new(),
                probes: HashMap::new(),
                this: this.clone(),
                shim_exe,
                boot_id: super::procfs::boot_id(),
                own: spawn::own_creds(),
                is_root: nix::unistd::geteuid().is_root(),
                containment: Containment::Sessions("not set up yet".into()),
                sessions: HashMap::new(),
                strays: Vec::new(),
                shutting_down: false,
                lane_env: None,
                agents_share_uid: false,
                log_output: Default::default(),
                restarts: Default::default(),
                bus: Bus::new(),
                limits_armed: Default::default(),
                specs_changed: None,
            })
        })
    }

    /// The uid the daemon runs as (an app without a `user` runs as it).
    pub fn own_uid(&self) -> u32 {
        self.own.uid.as_raw()
    }

    /// Every app, by id.
    pub fn apps(&self) -> impl Iterator<Item = &App> {
        self.apps.values()
    }

    /// One app.
    pub fn app(&self, id: u64) -> Option<&App> {
        self.apps.get(&id)
    }

    /// One app, mutably.
    pub fn app_mut(&mut self, id: u64) -> Option<&mut App> {
        self.apps.get_mut(&id)
    }

    /// The app whose process (main process, or health probe) is `pid`
    /// started at `start_ticks`.
    pub fn app_of_process(&self, pid: u32, start_ticks: u64) -> Option<u64> {
        if let Some((id, _)) = self.probes.get(&pid) {
            return Some(*id);
        }
        self.apps
            .values()
            .find(|a| a.rt.pid == Some(pid) && a.rt.pid_start.is_none_or(|s| s == start_ticks))
            .map(|a| a.id)
    }

    /// Hands the exit of a health probe to whoever waits for it; false if
    /// `pid` is not a probe.
    pub fn probe_exited(&mut self, pid: u32, exit: Exit) -> bool {
        match self.probes.remove(&pid) {
            Some((_, tx)) => {
                let _ = tx.send(exit);
                true
            }
            None => false,
        }
    }

    /// Starts a health-check command of app `id` (same user, cwd and
    /// environment as the app); its exit arrives on the returned channel.
    pub fn spawn_probe(
        &mut self,
        id: u64,
        cmd: &[String],
    ) -> Result<(u32, oneshot::Receiver<Exit>), SpawnError> {
        let app = self.apps.get(&id).ok_or(SpawnError::AppGone)?;
        let spec = app.spec.clone();
        let creds = self.creds_for(&spec)?;
        let env_creds = creds.clone().unwrap_or_else(|| self.own.clone());
        let mut extra = self.app_extra_env(&spec);
        // The process being checked: where instances share a port (a
        // reload's old and new process), a command check can ask it alone.
        if let Some(pid) = app.rt.pid {
            extra.push(("OXIDEPM_PID".to_string(), pid.to_string()));
        }
        let env = spawn::app_env(&spec, &env_creds, &extra);
        let cgroup = self.run_dir(id)?;
        let pid = spawn::spawn_probe(cmd, spec.cwd.as_deref(), env, cgroup, creds.as_ref())?;
        let (tx, rx) = oneshot::channel();
        self.probes.insert(pid, (id, tx));
        Ok((pid, rx))
    }

    /// The supervisor as its tasks share it, while the daemon holds it.
    pub fn shared(&self) -> Option<Shared> {
        self.this.upgrade()
    }

    /// Current and rotated log paths of an app.
    pub fn log_paths(&self, name: &str) -> [PathBuf; 2] {
        logfile::log_paths(&self.home.logs_dir(), name)
    }

    /// Loads stored apps into memory (no process is touched).
    pub fn load(&mut self) -> Result<(), StoreError> {
        let stored = self.store.load_apps()?;
        for s in stored {
            self.apps
                .insert(s.id, App::new(s.id, s.spec, s.defined_by, s.runtime));
            self.arm(s.id);
        }
        Ok(())
    }

    /// Writes an app's runtime state. A failure does not stop supervision:
    /// the store notes the app as owed and `storage` writes it again from
    /// memory until it lands; a request that caused it answers `E_STORAGE`.
    pub fn persist(&self, id: u64) {
        if let Some(a) = self.apps.get(&id) {
            match self.store.save_runtime(id, &a.rt) {
                Err(e) => log::error!(
                    "cannot save the state of {} (kept in memory, retried): {e}",
                    a.spec.name
                ),
                // A write into a deleted or replaced file succeeds, and is
                // lost: check the file is still the one written.
                Ok(()) => {
                    self.store.check_file(false);
                }
            }
        }
    }

    /// Adds a new app (not started).
    pub fn insert(&mut self, spec: AppSpec, actor: &Actor) -> Result<u64, Error> {
        let id = self.store.insert_app(&spec, actor)?;
        self.apps
            .insert(id, App::new(id, spec, actor.clone(), Runtime::default()));
        self.event(id, EventKind::Defined, actor, "");
        self.arm(id);
        Ok(id)
    }

    /// Replaces an app's spec; it takes effect at the next start.
    pub fn replace_spec(&mut self, id: u64, spec: AppSpec, actor: &Actor) -> Result<(), Error> {
        self.replace_spec_noting(id, spec, actor, "")
    }

    /// [`Supervisor::replace_spec`], with `detail` (what changed, or why)
    /// in its `changed` event.
    pub fn replace_spec_noting(
        &mut self,
        id: u64,
        spec: AppSpec,
        actor: &Actor,
        detail: &str,
    ) -> Result<(), Error> {
        self.store.update_spec(id, &spec, actor)?;
        if let Some(a) = self.apps.get_mut(&id) {
            a.health = spec
                .health
                .as_ref()
                .map(|_| oxidepm_proto::HealthState::Unknown);
            a.spec = spec;
            a.defined_by = actor.clone();
        }
        self.event(id, EventKind::Changed, actor, detail);
        self.arm(id);
        Ok(())
    }

    /// Forgets a stopped app.
    pub fn remove(&mut self, id: u64, actor: &Actor) -> Result<(), Error> {
        self.remove_noting(id, actor, "")
    }

    /// [`Supervisor::remove`], with `detail` (why) in its `deleted` event.
    pub fn remove_noting(&mut self, id: u64, actor: &Actor, detail: &str) -> Result<(), Error> {
        self.event(id, EventKind::Deleted, actor, detail);
        self.store.delete_app(id)?;
        self.discard_members(id);
        self.restarts.forget(id);
        self.apps.remove(&id);
        self.tell_specs_changed();
        Ok(())
    }

    /// Tells whoever follows the apps' specs that one changed; one pending
    /// notice covers any number of changes.
    pub(crate) fn tell_specs_changed(&self) {
        if let Some(tx) = &self.specs_changed {
            let _ = tx.try_send(());
        }
    }

    /// Variables the daemon gives every app: OXIDEPM_HOME, so that the CLI
    /// run from inside an app reaches this daemon (and is identified by its
    /// place in the app's tree).
    ///
    /// An agent also gets its lane's environment from `lane_env` (without
    /// lanes, OXIDEPM_AGENT and OXIDEPM_SOCKET pointing at agent.sock);
    /// these override the spec's values. So does a responder (nothing
    /// without lanes).
    fn app_extra_env(&self, spec: &AppSpec) -> Vec<(String, String)> {
        let mut env = vec![(
            "OXIDEPM_HOME".to_string(),
            self.home.root().display().to_string(),
        )];
        if spec.kind == oxidepm_proto::AppKind::Responder {
            let lane = self.lane_env.as_ref();
            env.extend(
                lane.and_then(|l| l(spec.kind, &spec.name))
                    .unwrap_or_default(),
            );
        }
        if spec.kind == oxidepm_proto::AppKind::Agent {
            match self
                .lane_env
                .as_ref()
                .and_then(|lane_env| lane_env(spec.kind, &spec.name))
            {
                Some(lane) => env.extend(lane),
                None => {
                    env.push(("OXIDEPM_AGENT".into(), spec.name.clone()));
                    env.push((
                        "OXIDEPM_SOCKET".into(),
                        self.home.agent_socket().display().to_string(),
                    ));
                }
            }
        }
        env
    }

    fn creds_for(&self, spec: &AppSpec) -> Result<Option<Creds>, SpawnError> {
        let Some(user) = &spec.user else {
            return Ok(None);
        };
        let c = spawn::resolve_user(user)?;
        if c.uid == self.own.uid {
            return Ok(None);
        }
        if !self.is_root {
            return Err(SpawnError::NotRoot {
                app: spec.name.clone(),
                user: user.clone(),
                daemon_user: self.own.name.clone(),
            });
        }
        Ok(Some(c))
    }

    /// Records a process just forked for app `id` as its current run.
    fn forked(&mut self, id: u64, actor: &Actor, kind: EventKind, f: Forked) -> u32 {
        let effects = self.step(
            id,
            Event::Spawned {
                actor: actor.clone(),
                kind,
                pid: f.pid,
            },
        );
        let boot_id = self.boot_id.clone();
        let app = self.apps.get_mut(&id).expect("checked by spawn_now");
        app.rt.pid = Some(f.pid);
        app.rt.pid_start = Some(f.start_ticks);
        app.rt.boot_id = Some(boot_id);
        app.rt.started_at_ms = Some(now_ms());
        app.rt.run_id = Some(f.run_id);
        app.started = Some(Instant::now());
        app.stopping_actor = None;
        app.sample = Default::default();
        if app.health.is_some() {
            app.health = Some(oxidepm_proto::HealthState::Unknown);
        }
        self.by_pid.insert(f.pid, id);
        // The pid, the session, the state and the event: one commit.
        let batch = self.store.begin_batch();
        self.record_run(id, f.run, f.pid, f.start_ticks);
        if let Err(e) = self.store.run_forked(f.run_id, f.pid) {
            log::error!("cannot record the pid of run {}: {e}", f.run_id);
        }
        self.apply(id, effects, None);
        self.store.end_batch(batch);
        f.pid
    }

    /// Marks app `id` as running again under an existing process (a process
    /// that outlived an earlier daemon).
    pub fn adopted(&mut self, id: u64) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        app.started = None;
        let pid = app.rt.pid.unwrap_or(0);
        self.transition(id, Event::Adopted { pid });
    }

    /// Takes the process app `id` adopted as its run: its cgroup leaf, and
    /// its session when the daemon that started it recorded none.
    fn adopted_members(&mut self, id: u64) {
        let pid = self.apps.get(&id).and_then(|a| a.rt.pid).unwrap_or(0);
        self.adopt_members(id, pid);
        let start = self.apps.get(&id).and_then(|a| a.rt.pid_start);
        if let (Some(start), false) = (start, self.sessions.contains_key(&pid)) {
            // Started by a daemon that recorded no session.
            let run = self.apps.get(&id).and_then(|a| a.run_cgroup.clone());
            self.record_run(id, run, pid, start);
        }
    }

    /// Handles the exit of app `id`'s main process, seen now: records it,
    /// wakes stoppers, and applies the restart policy unless a stop is
    /// under way.
    pub fn handle_exit(&mut self, id: u64, pid: u32, exit: Exit) {
        if self.by_pid.get(&pid) == Some(&id) {
            self.by_pid.remove(&pid);
        }
        let started = self.apps.get(&id).and_then(|a| a.started);
        self.handle_seen_exit(SeenExit {
            id,
            pid,
            exit,
            started,
            seen: Instant::now(),
        });
    }

    /// Handles an exit the reaper saw earlier (see [`Self::handle_exit`]).
    /// The run's length is from its spawn to its death being seen; a
    /// restart is queued for the restart task, never spawned here.
    pub fn handle_seen_exit(&mut self, e: SeenExit) {
        if !self.exit_current(&e) {
            // A run a reload took aside (or nothing of ours any more).
            self.retired_exit(&e);
            return;
        }
        let SeenExit {
            id, pid, mut exit, ..
        } = e;
        let app = self.apps.get_mut(&id).expect("checked by exit_current");
        let stopping = app.rt.status == Status::Stopping;
        let sigkill = exit.signal == Some(nix::sys::signal::Signal::SIGKILL as i32);
        if crate::supervise::oom::killed_by_oom(sigkill && !stopping) {
            exit.oom_killed = true;
            log::warn!(
                "{} (pid {pid}) was killed by the kernel's OOM killer: the host, or the memory cgroup the daemon runs in, is out of memory",
                app.spec.name
            );
        }
        let pid_start = app.rt.pid_start.take();
        app.rt.pid = None;
        app.rt.last_exit = exit.code;
        app.last_signal = exit.signal;
        let run = app.rt.run_id.take();
        app.exits.send_modify(|n| *n += 1);
        if let Some(run) = run {
            if let Err(e) = self.store.end_run(run, exit.code, exit.signal) {
                log::error!("cannot record the end of a run: {e}");
            }
        }
        // A stop in progress finishes the transition itself.
        if !stopping && self.reload_new_exited(id, exit) {
            return;
        }
        let uptime_ms = e.uptime_ms();
        let effects = self.step(id, Event::Exited { exit, uptime_ms });
        let run = EndedRun {
            pid,
            pid_start,
            seen: e.seen,
        };
        self.apply(id, effects, Some(run));
    }

    /// Queues a restart of app `id` in `delay_ms` (as soon as the restart
    /// task and the rate limit allow when 0), counting it and crediting it
    /// to `actor`. The app is `starting` until then.
    pub fn schedule_restart(&mut self, id: u64, delay_ms: u64, actor: &Actor) {
        let why = lifecycle::restart_why(actor);
        self.schedule_restart_after(id, delay_ms, actor, why);
    }

    /// [`Self::schedule_restart`], saying why (`status` shows it while
    /// the app waits).
    pub fn schedule_restart_after(&mut self, id: u64, delay_ms: u64, actor: &Actor, why: String) {
        let event = Event::QueueRestart {
            delay_ms,
            actor: actor.clone(),
            why,
        };
        self.transition(id, event);
    }
}

/// A process just forked for an app, and what it runs in.
struct Forked {
    /// Its pid.
    pid: u32,
    /// Its start time (clock ticks since boot).
    start_ticks: u64,
    /// Its run's cgroup leaf, where cgroups are in force.
    run: Option<String>,
    /// Its run row.
    run_id: i64,
}
