//! Periodic CPU and memory samples of each running app's process tree.
//! `status` reports the last sample, so answering it never walks /proc.
//! The same samples enforce `max_memory_restart`. (Where cgroup v2 can be
//! written, memory.max would let the kernel enforce it; polling works on
//! every host, including cgroup v1 ones, and behaves the same to users.)

use super::procfs;
use super::supervisor::{lock, Shared};
use std::time::{Duration, Instant};

/// How often apps with a memory limit are sampled.
pub const LIMIT_INTERVAL: Duration = Duration::from_millis(500);

/// Every this many limit ticks, all apps are sampled (every 2 s).
const FULL_EVERY: u64 = 4;

/// Samples every running app, forever.
pub async fn run(shared: Shared) {
    let tick = procfs::ticks_per_second() as f64;
    let page = procfs::page_size();
    let mut ticks_done = 0u64;
    loop {
        tokio::time::sleep(LIMIT_INTERVAL).await;
        ticks_done += 1;
        let full = ticks_done.is_multiple_of(FULL_EVERY);
        let roots: Vec<(u64, u32)> = lock(&shared)
            .apps()
            .filter(|a| full || a.spec.max_memory_bytes.is_some())
            .filter_map(|a| a.rt.pid.map(|p| (a.id, p)))
            .collect();
        if roots.is_empty() {
            continue;
        }
        let procs = procfs::all();
        let snapshot = procfs::Snapshot::new(&procs);
        let now = Instant::now();
        let mut over = Vec::new();
        let mut s = lock(&shared);
        for (id, root) in roots {
            let (ticks, pages) = snapshot.tree(root).iter().fold((0u64, 0u64), |(t, r), p| {
                (t + p.cpu_ticks(), r + p.rss_pages)
            });
            let Some(app) = s.app_mut(id) else { continue };
            if app.rt.pid != Some(root) {
                continue;
            }
            let prev = app.sample;
            let cpu = match prev.at {
                Some(at) if ticks >= prev.cpu_ticks => {
                    let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                    ((ticks - prev.cpu_ticks) as f64 / tick / secs * 100.0) as f32
                }
                _ => 0.0,
            };
            app.sample.cpu_percent = cpu;
            app.sample.memory_bytes = pages * page;
            app.sample.cpu_ticks = ticks;
            app.sample.at = Some(now);
            if let Some(limit) = app.spec.max_memory_bytes {
                let used = pages * page;
                if used > limit && app.rt.status == oxidepm_proto::Status::Online {
                    over.push((id, used, limit));
                }
            }
        }
        drop(s);
        for (id, used, limit) in over {
            let shared = shared.clone();
            let reason = super::lifecycle::DaemonRestart::MemoryLimit { used, limit };
            tokio::spawn(async move {
                super::control::restart_by_daemon(&shared, id, reason).await;
            });
        }
    }
}
