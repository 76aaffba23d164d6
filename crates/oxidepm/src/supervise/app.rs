//! One supervised app as the daemon holds it in memory.

use crate::store::Runtime;
use oxidepm_proto::{Actor, AppInfo, AppSpec, HealthState, Status};
use std::time::Instant;
use tokio::sync::watch;

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
}

impl App {
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
        }
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
        }
    }
}
