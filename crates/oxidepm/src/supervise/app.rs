//! One supervised app as the daemon holds it in memory.

use oxidepm_proto::{Actor, AppInfo, AppSpec, Class, HealthState, Status};
use std::time::Instant;
use tokio::sync::watch;

/// The runtime part of an app that survives the daemon, as its row holds it.
pub use crate::store::Runtime;

/// Last resource sample of an app's process tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// CPU use, percent of one core.
    pub cpu_percent: f32,
    /// Resident memory, bytes.
    pub memory_bytes: u64,
    /// CPU ticks at the sample (for the next delta).
    pub cpu_ticks: u64,
    /// When the sample was taken.
    pub at: Option<Instant>,
}

/// An app: its spec, who defined it, and its runtime state.
#[derive(Debug)]
pub struct App {
    /// Numeric id.
    pub id: u64,
    /// The spec.
    pub spec: AppSpec,
    /// Who defined it (an app is never more trusted than its definer).
    pub defined_by: Actor,
    /// Runtime state, persisted on every change.
    pub rt: Runtime,
    /// When the current process started (monotonic), for uptime.
    pub started: Option<Instant>,
    /// Restarts in a row whose run lasted less than `min_uptime`.
    pub unstable: u32,
    /// Bumped at every spawn and stop, so a timer armed for an earlier
    /// state of the app does nothing.
    pub generation: u64,
    /// Counts exits of the main process; stop waits on it.
    pub exits: watch::Sender<u64>,
    /// Actor of the stop or restart in progress.
    pub stopping_actor: Option<Actor>,
    /// Last resource sample.
    pub sample: Sample,
    /// Health, when the app has a check.
    pub health: Option<HealthState>,
    /// Bumped whenever the spec changes; cron and health tasks armed for an
    /// older epoch end by themselves.
    pub auto_epoch: u64,
    /// The app's cgroup (a hierarchy path), where cgroups are in force.
    pub cgroup: Option<String>,
    /// The leaf of the current run inside it.
    pub run_cgroup: Option<String>,
    /// Restarts since this daemon started, by reason (see
    /// [`App::count_restart`]); `rt.restarts` holds them all.
    pub restart_reasons: Vec<(String, u64)>,
    /// The restart the app waits for, while it waits (see
    /// [`App::waiting`]).
    pub wait: Option<WaitFor>,
    /// Set while a `reload` waits for the new process to be healthy: the
    /// reload, not the restart policy, decides what an exit of it means.
    pub reloading: bool,
    /// Runs taken out of the app's slot by a `reload` (the one replaced,
    /// or a new one that never got healthy) until their exit is seen.
    pub retiring: Vec<OldRun>,
    /// The signal that ended the last run, when one did (its code is
    /// `rt.last_exit`); not stored, container mode's exit status reads it.
    pub last_signal: Option<i32>,
    /// Dropped to end the app's file watch (re-armed with the spec).
    pub watch_stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// A queued restart, as `status` tells it.
#[derive(Debug, Clone)]
pub struct WaitFor {
    /// When it is due.
    pub at: Instant,
    /// Why it waits (`after exit code 3`).
    pub reason: String,
    /// The app's generation when it was queued.
    pub generation: u64,
}

/// A run a `reload` took out of the app's slot: what the app's runtime
/// held for it.
#[derive(Debug, Clone)]
pub struct OldRun {
    /// Its main process.
    pub pid: u32,
    /// That process's start time (clock ticks since boot).
    pub pid_start: Option<u64>,
    /// Its run row.
    pub run_id: Option<i64>,
    /// Unix ms when it started.
    pub started_at_ms: Option<i64>,
    /// When it started (monotonic), when this daemon started it.
    pub started: Option<Instant>,
    /// Its run's cgroup leaf.
    pub run_cgroup: Option<String>,
}

impl App {
    /// Counts one restart asked for by `actor` and by whom: the daemon's
    /// own reason (`crash`, `health`, …) or the requester's class, so the
    /// reasons stay a small fixed set.
    pub fn count_restart(&mut self, actor: &Actor) {
        self.rt.restarts += 1;
        let reason = match actor.class {
            Class::System => actor.label.as_str(),
            c => c.as_str(),
        };
        match self.restart_reasons.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => self.restart_reasons.push((reason.to_string(), 1)),
        }
    }

    /// A new in-memory app.
    pub fn new(id: u64, spec: AppSpec, defined_by: Actor, rt: Runtime) -> App {
        let health = spec.health.as_ref().map(|_| HealthState::Unknown);
        App {
            id,
            spec,
            defined_by,
            rt,
            started: None,
            unstable: 0,
            generation: 0,
            exits: watch::channel(0).0,
            stopping_actor: None,
            sample: Sample::default(),
            health,
            auto_epoch: 0,
            restart_reasons: Vec::new(),
            cgroup: None,
            run_cgroup: None,
            wait: None,
            reloading: false,
            retiring: Vec::new(),
            last_signal: None,
            watch_stop: None,
        }
    }

    /// The queued restart the app waits for: only while it is `starting`
    /// for exactly that restart.
    pub fn waiting(&self) -> Option<&WaitFor> {
        self.wait
            .as_ref()
            .filter(|w| self.rt.status == Status::Starting && w.generation == self.generation)
    }

    /// Whether a process of the app is (or may be) alive.
    pub fn is_running(&self) -> bool {
        matches!(self.rt.status, Status::Online | Status::Stopping)
    }

    /// What `status` reports; `full` adds the spec (with environment values
    /// redacted unless `reveal_env`).
    pub fn info(&self, full: bool, reveal_env: bool, log_files: Option<[String; 2]>) -> AppInfo {
        let online = self.rt.status == Status::Online;
        let spec = full.then(|| {
            let mut s = self.spec.clone();
            if !reveal_env {
                for v in s.env.values_mut() {
                    *v = "<redacted>".into();
                }
            }
            s
        });
        AppInfo {
            id: self.id,
            name: self.spec.name.clone(),
            pid: self.rt.pid,
            status: self.rt.status,
            restarts: self.rt.restarts,
            uptime_ms: if online {
                self.started
                    .map(|s| s.elapsed().as_millis() as u64)
                    .or_else(|| {
                        self.rt
                            .started_at_ms
                            .map(|t| (crate::timefmt::now_ms() - t).max(0) as u64)
                    })
            } else {
                None
            },
            cpu_percent: (online && self.sample.at.is_some()).then_some(self.sample.cpu_percent),
            memory_bytes: (online && self.sample.at.is_some()).then_some(self.sample.memory_bytes),
            last_exit_code: self.rt.last_exit,
            health: self.health,
            defined_by: self.defined_by.clone(),
            tags: self.spec.tags.clone(),
            kind: self.spec.kind,
            protected: self.spec.is_protected(),
            spec,
            log_files,
            containment: None,
            log_dropped_bytes: None,
            log_pipes_kept: None,
            waiting: self.waiting().map(|w| oxidepm_proto::Waiting {
                due_in_ms: w.at.saturating_duration_since(Instant::now()).as_millis() as u64,
                reason: w.reason.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn runtime_survives_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let spec = AppSpec::new("web", "sleep", vec!["10".into()]);
        let id = store
            .insert_app(&spec, &Actor::new(Class::Human, "cli"))
            .unwrap();
        let rt = Runtime {
            desired_running: true,
            status: Status::Errored,
            pid: Some(42),
            pid_start: Some(7),
            boot_id: Some("b".into()),
            restarts: 3,
            started_at_ms: Some(1),
            last_exit: Some(-9),
            run_id: Some(9),
            stopped_by: Some(Class::Human),
        };
        store.save_runtime(id, &rt).unwrap();
        let apps = store.load_apps().unwrap();
        assert_eq!(apps[0].runtime.clone(), rt);
        store.save_runtime(id, &Runtime::default()).unwrap();
        let apps = store.load_apps().unwrap();
        assert_eq!(apps[0].runtime.clone(), Runtime::default());
    }
}
