//! Periodic CPU and memory samples of each running app's process tree.
//! `status` reports the last sample, so answering it never walks /proc.

use super::procfs;
use super::supervisor::{lock, Shared};
use std::time::{Duration, Instant};

/// How often apps are sampled.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// Samples every running app, forever.
pub async fn run(shared: Shared) {
    let tick = procfs::ticks_per_second() as f64;
    let page = procfs::page_size();
    loop {
        tokio::time::sleep(INTERVAL).await;
        let roots: Vec<(u64, u32)> = lock(&shared)
            .apps()
            .filter_map(|a| a.rt.pid.map(|p| (a.id, p)))
            .collect();
        if roots.is_empty() {
            continue;
        }
        let procs = procfs::all();
        let now = Instant::now();
        let mut s = lock(&shared);
        for (id, root) in roots {
            let tree = procfs::tree(&procs, root);
            let (ticks, pages) = procs
                .iter()
                .filter(|p| tree.contains(&p.pid))
                .fold((0u64, 0u64), |(t, r), p| (t + p.cpu_ticks, r + p.rss_pages));
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
        }
    }
}
