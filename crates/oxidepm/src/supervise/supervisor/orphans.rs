//! Processes found at start that belong to no run the state knows, and the
//! runs recovery hands to an app.
//!
//! An *orphan* is a live run whose marker names an app id this state does
//! not have (state.db was lost or replaced while the apps ran). It is kept
//! running, by name: the first start of an app of that name adopts it
//! instead of forking a duplicate. Until then it is in daemon.log, in the
//! events (kind `orphan`, app id 0) and in `whoami`'s containment line.

use super::Supervisor;
use crate::supervise::marker::{self, Marker};
use crate::supervise::procfs::{self, ProcStat};
use oxidepm_proto::{Actor, EventKind};
use oxidepm_sys::cgroup;
use std::path::PathBuf;

/// A live run of an app that the state does not know.
#[derive(Debug, Clone)]
pub struct Orphan {
    /// What its marker says.
    pub marker: Marker,
    /// Its main process.
    pub main: ProcStat,
    /// Its run leaf, when it is in one of this home's cgroups.
    pub leaf: Option<String>,
}

impl Supervisor {
    /// This home's id in run markers.
    pub fn home_id(&self) -> &str {
        &self.home_id
    }

    /// The marker of run `run` of app `id`.
    pub(super) fn marker_of(&self, id: u64, run: i64, name: &str) -> (String, String) {
        let m = Marker {
            home: self.home_id.clone(),
            app: id,
            run,
            name: name.to_string(),
        };
        (marker::VAR.to_string(), m.value())
    }

    /// The processes of a scan that may be taken for this home's. A marker
    /// is only an environment variable, which any process can set: with
    /// cgroups, only processes in this home's cgroups count (every process
    /// the daemon starts is born in one); without, a marked process counts
    /// only when it runs as the user its app runs as (the daemon's own
    /// user for an app the state does not know), so no process is ever
    /// taken for an app of another user.
    pub fn trusted(&self, found: Vec<marker::Found>) -> Vec<marker::Found> {
        if self.containment.cgroups().is_some() {
            return found.into_iter().filter(|f| f.cgroup.is_some()).collect();
        }
        found
            .into_iter()
            .filter(|f| {
                let Some(m) = &f.marker else { return false };
                let expected = match self.apps.get(&m.app).filter(|a| a.spec.name == m.name) {
                    Some(a) => self.uid_of(&a.spec),
                    None => Some(self.own.uid.as_raw()),
                };
                expected.is_some() && expected == process_uid(f.stat.pid)
            })
            .collect()
    }

    /// The uid the processes of `spec` run as; `None` when its user cannot
    /// be resolved.
    fn uid_of(&self, spec: &oxidepm_proto::AppSpec) -> Option<u32> {
        match self.creds_for(spec) {
            Ok(Some(c)) => Some(c.uid.as_raw()),
            Ok(None) => Some(self.own.uid.as_raw()),
            Err(_) => None,
        }
    }

    /// Every run leaf of this home's cgroups: (hierarchy path, directory).
    pub fn run_leaves(&self) -> Vec<(String, PathBuf)> {
        let Some(cg) = self.containment.cgroups() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for app in cgroup::children(&cg.dir(cg.home())) {
            let Some(name) = app.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let app_path = format!("{}/{name}", cg.home());
            for run in cg.runs(&app_path) {
                out.push((run.clone(), cg.dir(&run)));
            }
        }
        out
    }

    /// The directory of cgroup leaf `leaf`, where cgroups are in force.
    pub fn leaf_dir(&self, leaf: &str) -> Option<PathBuf> {
        self.containment.cgroups().map(|cg| cg.dir(leaf))
    }

    /// Keeps `o` until an app of its name is started. Returns the orphan of
    /// the same name it replaces (the older run), which the caller stops.
    pub fn keep_orphan(&mut self, o: Orphan) -> Option<Orphan> {
        let name = o.marker.name.clone();
        let (keep, drop) = match self.orphans.remove(&name) {
            Some(old) if old.marker.run > o.marker.run => (old, Some(o)),
            Some(old) => (o, Some(old)),
            None => (o, None),
        };
        let detail = format!(
            "pid {} of app {name:?} (id {} and run {} in a state this daemon does not have) is kept running; starting an app named {name:?} adopts it",
            keep.main.pid, keep.marker.app, keep.marker.run
        );
        log::warn!("orphan: {detail}");
        let actor = Actor::system("recovery");
        let orphan = EventKind::Other("orphan".into());
        self.record(0, &name, Vec::new(), orphan, &actor, &detail);
        // An app defined later must never get the id the orphan's cgroup
        // and marker carry.
        if let Err(e) = self.store.reserve_app_ids(keep.marker.app) {
            log::error!("cannot reserve app id {}: {e}", keep.marker.app);
        }
        self.orphans.insert(name, keep);
        drop
    }

    /// The orphans kept, for `whoami`.
    pub fn orphans_report(&self) -> Option<String> {
        if self.orphans.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .orphans
            .values()
            .map(|o| format!("{} (pid {})", o.marker.name, o.main.pid))
            .collect();
        Some(format!(
            "processes of apps the state does not know, adopted when an app of that name starts: {}",
            list.join(", ")
        ))
    }

    /// Takes over, for app `id`, an orphan of the same name, instead of
    /// forking a duplicate. `None` when there is none (any more).
    pub(super) fn adopt_orphan(&mut self, id: u64, actor: &Actor) -> Option<u32> {
        let name = self.apps.get(&id)?.spec.name.clone();
        let o = self.orphans.remove(&name)?;
        let pid = o.main.pid;
        if !procfs::is_same_process(pid, o.main.start_ticks) {
            log::info!("orphan {name} (pid {pid}) is gone; starting the app");
            return None;
        }
        let spec = self.apps.get(&id)?.spec.clone();
        if o.leaf.is_none() && self.uid_of(&spec) != process_uid(pid) {
            // Outside any cgroup, only its user vouches for the process:
            // one of another user is never taken for this app.
            log::warn!(
                "orphan {name} (pid {pid}) runs as another user than the app; starting the app"
            );
            return None;
        }
        let mut leaf = o.leaf.clone();
        if let (Some(cg), Some(run)) = (self.containment.cgroups().cloned(), &o.leaf) {
            // The orphan's cgroup carries its old app id: renamed to the
            // app's, so that stop and delete find it where they look.
            if let Some((old_app, run_name)) = run.rsplit_once('/') {
                let new_app = cg.app(id);
                cg.tidy(&new_app, true);
                match std::fs::rename(cg.dir(old_app), cg.dir(&new_app)) {
                    Ok(()) => {
                        leaf = Some(format!("{new_app}/{run_name}"));
                        let old_dir = cg.dir(old_app);
                        self.strays.retain(|d| d != &old_dir);
                    }
                    Err(e) => log::warn!(
                        "{name}: cannot move cgroup {old_app} to {new_app} ({e}); its sessions are used"
                    ),
                }
            }
        }
        self.adopt_run(id, o.main, None, leaf, actor);
        if let Some(shared) = self.this.upgrade() {
            crate::supervise::recovery::watch_adopted(shared, id, pid, o.main.start_ticks);
        }
        Some(pid)
    }

    /// Makes the live process `main` app `id`'s process: its run `run` (a
    /// new run row when `None` or unknown), in cgroup leaf `leaf`. The
    /// caller watches its exit.
    pub fn adopt_run(
        &mut self,
        id: u64,
        main: ProcStat,
        run: Option<i64>,
        leaf: Option<String>,
        actor: &Actor,
    ) {
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        let mut rt = app.rt.clone();
        let run = match run {
            Some(r) => Some(r),
            None => match self.store.begin_run(id, actor, &mut rt) {
                Ok(r) => Some(r),
                Err(e) => {
                    log::error!("cannot record a run: {e}");
                    None
                }
            },
        };
        if let Some(r) = run {
            if let Err(e) = self.store.run_forked(r, main.pid) {
                log::error!("cannot record the pid of run {r}: {e}");
            }
        }
        let boot = self.boot_id.clone();
        let app = self.apps.get_mut(&id).expect("checked above");
        app.rt.pid = Some(main.pid);
        app.rt.pid_start = Some(main.start_ticks);
        app.rt.boot_id = Some(boot);
        app.rt.run_id = run;
        app.rt.desired_running = true;
        app.rt.stopped_by = None;
        app.rt.started_at_ms = app.rt.started_at_ms.or(Some(crate::timefmt::now_ms()));
        app.run_cgroup = leaf.clone();
        self.adopted(id);
        if let (Some(cg), Some(leaf)) = (self.containment.cgroups(), &leaf) {
            // A leaf under another app id (the rename failed): used as it
            // is until the next run.
            if let Some((app_path, _)) = leaf.rsplit_once('/') {
                let app_path = app_path.to_string();
                if cg.app_of_path(leaf, id).is_none() {
                    if let Some(a) = self.apps.get_mut(&id) {
                        a.cgroup = Some(app_path);
                        a.run_cgroup = Some(leaf.clone());
                    }
                }
            }
        }
    }
}

/// The real uid of process `pid`.
fn process_uid(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}
