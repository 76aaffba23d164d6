//! Recovery at daemon start, before any app is started (resurrect, restart
//! policy, autostart): every live process of this home is found — in the
//! run leaves of its cgroups, and by the `OXIDEPM_RUN` marker in /proc
//! (see `marker`) — and each run is given to its app, stopped, or kept as
//! an orphan:
//!
//! * an app's recorded process, alive (same pid, start time and boot), is
//!   adopted; any other run of the app is a second copy and is stopped;
//! * an app whose recorded process is gone (or was never recorded: the
//!   daemon died between the fork and writing the pid) adopts its newest
//!   live run that is not the dead one's when it is wanted running, and its
//!   other runs are stopped; what the dead run left goes with it (as after
//!   any exit); runs of an app not wanted running are stopped;
//! * a run whose marker names an app this state does not know (state.db
//!   was lost) is kept running as an orphan, by app name, and the first
//!   start of an app of that name adopts it; a second run of the same
//!   name, or one of an app of that name that runs already, is stopped.
//!
//! Adopted processes are not our children: their exit is seen through a
//! pidfd. Only ESRCH from `pidfd_open` means "gone"; when descriptors are
//! short (EMFILE, ENFILE, ENOMEM), or the daemon's pidfds would leave fewer
//! than [`super::fd_budget::FD_RESERVE`] descriptors free, the process is watched by polling
//! its /proc start time instead, and never signalled for it.

mod groups;

use super::lifecycle::{Event, Gone};
use super::marker;
use super::procfs;
use super::supervisor::{lock, Shared, Supervisor};
use groups::{Known, Owner, RunGroup};
use nix::sys::signal::Signal;
use oxidepm_proto::{Actor, EventKind, Status};
use oxidepm_sys::pidfd;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::MutexGuard;
use std::time::Duration;

/// How often a process watched without a pidfd is looked at.
const POLL: Duration = Duration::from_secs(1);

/// How long a stopped run of an unknown app gets between SIGTERM and
/// SIGKILL.
const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// Brings back every stored app after a daemon start (see the module's
/// text). With `resurrect`, apps that were running at the last clean stop
/// are started again, or adopt their live run.
///
/// Returns the apps to start (they are started in dependency order by the
/// caller).
pub fn recover(shared: &Shared, resurrect: bool) -> Vec<u64> {
    let (runs, known) = scan(shared);
    let mut of_app: HashMap<u64, Vec<RunGroup>> = HashMap::new();
    let mut orphans: BTreeMap<String, Vec<RunGroup>> = BTreeMap::new();
    let mut unknown_ids = None;
    for g in runs {
        match g.owner(&known) {
            Owner::Current(_) => {}
            Owner::Unknown => unknown_ids = unknown_ids.max(g.leaf_app),
            Owner::App(id) => of_app.entry(id).or_default().push(g),
            Owner::Orphan(name) => orphans.entry(name).or_default().push(g),
        }
    }
    let alive: HashSet<&str> = known
        .iter()
        .filter(|k| {
            k.recorded
                .is_some_and(|(p, s)| procfs::is_same_process(p, s))
        })
        .map(|k| k.name.as_str())
        .collect();
    keep_orphans(&mut lock(shared), unknown_ids, orphans, &alive);
    let mut to_start = Vec::new();
    for k in &known {
        let others = of_app.remove(&k.id).unwrap_or_default();
        if recover_app(shared, k, others, resurrect) {
            to_start.push(k.id);
        }
    }
    to_start
}

/// The live runs of this home, and the apps the state knows with the
/// process each recorded on this boot.
fn scan(shared: &Shared) -> (Vec<RunGroup>, Vec<Known>) {
    let boot = procfs::boot_id();
    let s = lock(shared);
    let found = s.trusted(marker::scan(s.home_id(), &s.run_leaves()));
    let known: Vec<Known> = s
        .apps()
        .map(|a| Known {
            id: a.id,
            name: a.spec.name.clone(),
            recorded: (a.rt.boot_id.as_deref() == Some(boot.as_str()))
                .then_some(a.rt.pid.zip(a.rt.pid_start))
                .flatten(),
        })
        .collect();
    (groups::group(found), known)
}

/// Keeps the newest run of each app the state does not know as an orphan,
/// and stops the others (and any of a name that runs already).
fn keep_orphans(
    s: &mut Supervisor,
    unknown_ids: Option<u64>,
    orphans: BTreeMap<String, Vec<RunGroup>>,
    alive: &HashSet<&str>,
) {
    if let Some(id) = unknown_ids {
        // Unmarked processes in the cgroup of an app id this state does
        // not know: no new app may be given that cgroup.
        if let Err(e) = s.store.reserve_app_ids(id) {
            log::error!("cannot reserve app id {id}: {e}");
        }
    }
    for (name, mut runs) in orphans {
        runs.sort_by_key(RunGroup::order);
        if alive.contains(name.as_str()) {
            stop_runs(s, None, runs, "a second copy of an app that runs");
            continue;
        }
        let newest = runs.pop().expect("at least one run");
        stop_runs(
            s,
            None,
            runs,
            "an older copy of an app the state does not know",
        );
        let main = *newest.main();
        let orphan = super::supervisor::Orphan {
            marker: newest.marker.clone().expect("an orphan is marked"),
            main,
            leaf: newest.leaf.clone(),
        };
        if let Some(replaced) = s.keep_orphan(orphan) {
            log::warn!("orphan {name}: pid {} replaced", replaced.main.pid);
        }
    }
}

/// Brings back one known app, given its other live runs: adopts its
/// recorded process or its newest live run, stops the rest, and settles
/// what a dead run leaves. True when the app is to be started.
fn recover_app(shared: &Shared, k: &Known, others: Vec<RunGroup>, resurrect: bool) -> bool {
    let id = k.id;
    let mut s = lock(shared);
    let Some(app) = s.app(id) else {
        return false;
    };
    let rt = app.rt.clone();
    let was_running = matches!(
        rt.status,
        Status::Online | Status::Stopping | Status::Starting
    );
    if was_running {
        if let Some((pid, start)) = k.recorded.filter(|(p, s)| procfs::is_same_process(*p, *s)) {
            s.adopted(id);
            stop_runs(&mut s, Some(id), others, "a second copy");
            drop(s);
            watch_adopted(shared.clone(), id, pid, start);
            if rt.status == Status::Stopping {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let actor = Actor::system("adopt");
                    super::control::stop(&shared, &[id], &actor, false).await;
                });
            }
            return false;
        }
    }
    let wanted = rt.desired_running
        && rt.status != Status::Stopping
        && (was_running || (resurrect && rt.status == Status::Stopped));
    // What a run whose recorded main process died left behind goes
    // with it (as after any exit); a run the state has no pid for (the
    // daemon died between its fork and the pid's write), or a newer
    // one, is the app's live process.
    let dead_run = rt.pid.and(rt.run_id);
    let (mut live, left): (Vec<RunGroup>, Vec<RunGroup>) = others.into_iter().partition(|g| {
        g.marker.as_ref().is_some_and(|m| {
            m.app == id && Some(m.run) != dead_run && rt.run_id.is_none_or(|r| m.run >= r)
        })
    });
    stop_runs(&mut s, Some(id), left, "left by a run that ended");
    if wanted && !live.is_empty() {
        live.sort_by_key(RunGroup::order);
        let newest = live.pop().expect("not empty");
        stop_runs(&mut s, Some(id), live, "a second copy");
        adopt_newest(shared, s, id, newest);
        return false;
    }
    stop_runs(&mut s, Some(id), live, "not wanted running");
    if was_running {
        // Gone while no daemon ran (or the pid now names another
        // process): a crash, unless it was being stopped.
        let gone = match rt.pid {
            Some(_) => Gone::Died,
            None => Gone::NeverForked,
        };
        return s.transition(id, Event::Recovered(gone)).spawn;
    }
    resurrect && rt.desired_running && rt.status == Status::Stopped
}

/// App `id` adopts `newest`, a live run of it the state had no pid for.
fn adopt_newest(shared: &Shared, mut s: MutexGuard<'_, Supervisor>, id: u64, newest: RunGroup) {
    let main = *newest.main();
    let run = newest
        .marker
        .as_ref()
        .filter(|m| m.app == id)
        .map(|m| m.run);
    s.adopt_run(
        id,
        main,
        run,
        newest.leaf.clone(),
        &Actor::system("recovery"),
    );
    drop(s);
    watch_adopted(shared.clone(), id, main.pid, main.start_ticks);
}

/// Stops the processes of `runs` (of app `id`, when known): SIGTERM now,
/// SIGKILL after the app's `kill_timeout`. Each process is pinned by a
/// pidfd and checked to be the process scanned before it is signalled.
fn stop_runs(s: &mut Supervisor, id: Option<u64>, runs: Vec<RunGroup>, why: &str) {
    if runs.is_empty() {
        return;
    }
    let grace = id.and_then(|id| s.app(id)).map_or(ORPHAN_GRACE, |a| {
        Duration::from_millis(a.spec.kill_timeout_ms)
    });
    for run in runs {
        let main = run.main().pid;
        let name = run.marker.as_ref().map_or("?", |m| m.name.as_str());
        let detail = format!("{why}: pid {main} and {} more stopped", run.procs.len() - 1);
        log::warn!("{name}: {detail}");
        if let Some(id) = id {
            s.event(id, EventKind::Stopped, &Actor::system("recovery"), &detail);
        }
        signal(&run.procs, Signal::SIGTERM);
        let dir = run.leaf.as_deref().and_then(|l| s.leaf_dir(l));
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            signal(&run.procs, Signal::SIGKILL);
            if let Some(dir) = dir {
                let m = super::supervisor::Members::Cgroup(dir.clone());
                m.kill_and_wait().await;
                let _ = std::fs::remove_dir(&dir);
            }
        });
    }
}

/// Sends `sig` to each of `procs` that is still the process scanned.
fn signal(procs: &[procfs::ProcStat], sig: Signal) {
    for p in procs {
        let Ok(fd) = pidfd::open(p.pid) else { continue };
        if procfs::is_same_process(p.pid, p.start_ticks) {
            let _ = pidfd::signal(&fd, sig as i32);
        }
    }
}

/// Watches an adopted process (`pid`, started at `start`) and reports its
/// exit: through a pidfd where one can be held, else by polling its start
/// time. Only ESRCH, or a pid that names another process, means gone.
pub fn watch_adopted(shared: Shared, id: u64, pid: u32, start: u64) {
    tokio::spawn(async move {
        let share = super::fd_budget::take(1);
        let fd = if share.is_some() {
            match pidfd::open(pid) {
                Ok(fd) => Some(fd),
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ESRCH as i32) => {
                    lock(&shared).handle_exit_unowned(id, pid);
                    return;
                }
                Err(e) => {
                    log::warn!("cannot open a pidfd for adopted pid {pid} ({e}); polling instead");
                    None
                }
            }
        } else {
            None
        };
        // Checked after the pidfd is open: while it is held, the pid names
        // the same process.
        let same = procfs::is_same_process(pid, start);
        match fd {
            Some(fd) if same => {
                let watched = pidfd::exited(fd).await;
                drop(share);
                if let Err(e) = watched {
                    log::warn!("cannot watch adopted pid {pid} ({e}); polling instead");
                    poll_until_gone(pid, start).await;
                }
            }
            Some(_) => {}
            None => poll_until_gone(pid, start).await,
        }
        lock(&shared).handle_exit_unowned(id, pid);
    });
}

async fn poll_until_gone(pid: u32, start: u64) {
    while procfs::is_same_process(pid, start) {
        tokio::time::sleep(POLL).await;
    }
}
