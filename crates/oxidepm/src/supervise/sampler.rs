//! CPU and memory samples of each running app's process tree, taken when
//! they are needed and not otherwise: when someone looks (`status`, `show`,
//! a metrics scrape: [`refresh`]) and, for apps with `max_memory_restart`,
//! every [`LIMIT_INTERVAL`] ([`run`], which sleeps while no app has one). A host of idle apps nobody looks at
//! costs the daemon nothing (a sweep of every app every 2 s grew with the
//! number of apps: 14.6 % of a core at 5,000). (Where cgroup v2 can be
//! written, memory.max would let the kernel enforce the limit; polling works
//! on every host, including cgroup v1 ones, and behaves the same to users.)
//!
//! An app's processes are its run's cgroup leaf where cgroups are in force
//! (one `cgroup.procs` read per app), else its process tree found in one
//! pass over /proc. CPU is the share of a core since the app's previous
//! sample.

use super::procfs;
use super::supervisor::{lock, Shared};
use oxidepm_proto::Status;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often apps with a memory limit are sampled.
pub const LIMIT_INTERVAL: Duration = Duration::from_millis(500);

/// A sample younger than this is what a reader is shown, untaken again.
pub const FRESH: Duration = Duration::from_secs(2);

/// One refresh at a time: readers that arrive during one wait for it and
/// find their samples fresh, instead of each reading /proc.
static REFRESHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where an app's processes are found.
enum Tree {
    /// Every process in this cgroup leaf (its directory).
    Leaf(PathBuf),
    /// The session and descendants of this pid, from a /proc pass.
    Walk,
}

/// An app to sample: its id, its main pid, and where its processes are.
struct Root {
    id: u64,
    pid: u32,
    tree: Tree,
}

/// What one app's processes use: CPU ticks and resident pages.
struct Use {
    id: u64,
    pid: u32,
    ticks: u64,
    pages: u64,
}

/// Samples the running apps whose sample is older than [`FRESH`], so that
/// what a reader is about to be shown is current.
pub async fn refresh(shared: &Shared) {
    let _one = REFRESHING.lock().await;
    let now = Instant::now();
    // An app started less than FRESH ago is left for later, as a sweep
    // every FRESH did: a start of many apps polled by `status` would else
    // sample the newest ones on every poll.
    let old = |at: Option<Instant>| match at {
        Some(at) => now.saturating_duration_since(at) >= FRESH,
        None => true,
    };
    let roots = roots(shared, |a| match a.sample.at {
        Some(at) => old(Some(at)),
        None => old(a.started),
    });
    if roots.is_empty() {
        return;
    }
    let used = measure_off_thread(roots).await;
    // A reader's refresh restarts nothing: the limit loop does, on its own
    // samples, so that reading `status` never changes what runs.
    let _ = apply(shared, used);
}

/// Samples the apps with a memory limit, forever, and restarts those over
/// it. While no app has a limit it sleeps until one is armed: a timer
/// that looked at every app twice a second for nothing was most of an idle
/// daemon's wake-ups.
pub async fn run(shared: Shared) {
    let armed = lock(&shared).limits_armed.clone();
    loop {
        let any = lock(&shared)
            .apps()
            .any(|a| a.spec.max_memory_bytes.is_some());
        if !any {
            // A limit armed since the look above left a permit: not missed.
            armed.notified().await;
            continue;
        }
        tokio::time::sleep(LIMIT_INTERVAL).await;
        let roots = roots(&shared, |a| a.spec.max_memory_bytes.is_some());
        if roots.is_empty() {
            continue;
        }
        let used = measure_off_thread(roots).await;
        for (id, used, limit) in apply(&shared, used) {
            let shared = shared.clone();
            let reason = super::lifecycle::DaemonRestart::MemoryLimit { used, limit };
            tokio::spawn(async move {
                super::control::restart_by_daemon(&shared, id, reason).await;
            });
        }
    }
}

/// The running apps `want` picks, with where their processes are.
fn roots(shared: &Shared, want: impl Fn(&super::app::App) -> bool) -> Vec<Root> {
    let s = lock(shared);
    s.apps()
        .filter(|a| want(a))
        .filter_map(|a| {
            let pid = a.rt.pid?;
            let tree = match a.run_cgroup.as_deref().and_then(|p| s.cgroup_dir(p)) {
                Some(dir) => Tree::Leaf(dir),
                None => Tree::Walk,
            };
            Some(Root {
                id: a.id,
                pid,
                tree,
            })
        })
        .collect()
}

/// [`measure`] on a blocking thread: reading /proc for thousands of
/// processes must not stall the daemon's one runtime thread.
async fn measure_off_thread(roots: Vec<Root>) -> Vec<Use> {
    tokio::task::spawn_blocking(move || measure(&roots))
        .await
        .unwrap_or_default()
}

/// Reads what each app's processes use now.
fn measure(roots: &[Root]) -> Vec<Use> {
    let procs = if roots.iter().any(|r| matches!(r.tree, Tree::Walk)) {
        procfs::all()
    } else {
        Vec::new()
    };
    let snapshot = procfs::Snapshot::new(&procs);
    let total = |ps: &mut dyn Iterator<Item = procfs::ProcStat>| {
        ps.fold((0u64, 0u64), |(t, r), p| {
            (t + p.cpu_ticks(), r + p.rss_pages)
        })
    };
    roots
        .iter()
        .map(|r| {
            let (ticks, pages) = match &r.tree {
                Tree::Walk => total(&mut snapshot.tree(r.pid).into_iter().cloned()),
                Tree::Leaf(dir) => {
                    let pids = oxidepm_sys::cgroup::procs(dir);
                    total(&mut pids.into_iter().filter_map(procfs::stat))
                }
            };
            Use {
                id: r.id,
                pid: r.pid,
                ticks,
                pages,
            }
        })
        .collect()
}

/// Records the samples and returns the online apps over their memory limit:
/// `(id, bytes used, limit)`.
fn apply(shared: &Shared, used: Vec<Use>) -> Vec<(u64, u64, u64)> {
    let tick = procfs::ticks_per_second() as f64;
    let page = procfs::page_size();
    let now = Instant::now();
    let mut over = Vec::new();
    let mut s = lock(shared);
    for u in used {
        let Some(app) = s.app_mut(u.id) else { continue };
        // The app restarted meanwhile: this is its old process's use.
        if app.rt.pid != Some(u.pid) {
            continue;
        }
        let prev = app.sample;
        let cpu = match prev.at {
            Some(at) if u.ticks >= prev.cpu_ticks => {
                let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                ((u.ticks - prev.cpu_ticks) as f64 / tick / secs * 100.0) as f32
            }
            _ => 0.0,
        };
        let bytes = u.pages * page;
        app.sample.cpu_percent = cpu;
        app.sample.memory_bytes = bytes;
        app.sample.cpu_ticks = u.ticks;
        app.sample.at = Some(now);
        if let Some(limit) = app.spec.max_memory_bytes {
            if bytes > limit && app.rt.status == Status::Online {
                over.push((u.id, bytes, limit));
            }
        }
    }
    over
}
