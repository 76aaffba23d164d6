//! `memwatch`: what the memory-limit watch costs. N sleeping apps with
//! `max_memory_restart = "1G"` (never reached; the daemon samples each
//! app's process tree twice a second) against the same N apps without a
//! limit, each in a fresh home; the daemon's CPU over the same window.

use super::health::{cpu_over, window, Cpu};
use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{Bins, Result};
use serde_json::Value;
use std::time::Duration;

/// The daemon's CPU with N apps of which the first `limited` have the limit.
fn measure(bins: &Bins, plan: &Plan, limited: usize) -> Result<(Cpu, u64)> {
    let n = plan.apps;
    let span = window(plan);
    let name = format!("{limited:>3} of {n} with a limit");
    with_sandbox(bins, |sb| {
        let dpid = sb.ping()?;
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[apps]]\nname = \"m{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n{}\n",
                if i < limited {
                    "max_memory_restart = \"1G\"\n"
                } else {
                    ""
                }
            ));
        }
        let cfg = sb.home().join("mem.toml");
        std::fs::write(&cfg, text).map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
        sb.run(&["start", &cfg.to_string_lossy()])?;
        sb.wait_online(n, Duration::from_secs(30))?;
        // Past start-up, and the sampler has run.
        sleep_ms(2500);
        let cpu = cpu_over(dpid, span)?;
        let rss = procfs::status_bytes(dpid, "VmRSS").unwrap_or(0);
        let restarts: u64 = sb
            .status()?
            .iter()
            .filter_map(|a| a.get("restarts").and_then(Value::as_u64))
            .sum();
        say!(
            "  {name}: daemon CPU {}; VmRSS {}; restarts {restarts}",
            cpu.describe(),
            mib(rss)
        );
        if restarts > 0 {
            return Err(format!(
                "{restarts} restart(s) of apps that stay far below their limit"
            ));
        }
        Ok((cpu, rss))
    })
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = plan.apps;
    let procs = procfs::count();
    say!("  processes on this host now: {procs} (without cgroups, the limit watch reads every one of /proc each tick)");
    let (plain, _) = measure(bins, plan, 0)?;
    let (one, _) = measure(bins, plan, 1)?;
    let (watched, _) = measure(bins, plan, n)?;
    let tck = procfs::ticks_per_second();
    // Per app per second, in microseconds of CPU.
    let per =
        |with: f64, without: f64, w1: f64, w2: f64| (with / w1 - without / w2) / n as f64 * 1e6;
    let best = per(watched.best(), plain.best(), watched.wall, plain.wall);
    let ticks = per(watched.secs, plain.secs, watched.wall, plain.wall);
    let sched = watched.sched_secs.is_some() && plain.sched_secs.is_some();
    let resolution = 1.0 / tck / plain.wall / n as f64 * 1e6;
    say!(
        "  memory watch: {best:+.2} us of daemon CPU per app per second ({}; from utime+stime: \
         {ticks:+.2} us, resolution {resolution:.1} us)",
        if sched {
            "from schedstat"
        } else {
            "from utime+stime"
        }
    );
    say!(
        "  = {:+.3} % of one core for {n} apps (limit checked every 500 ms per app)",
        best * n as f64 / 1e4
    );
    let fixed = per(one.best(), plain.best(), one.wall, plain.wall) * n as f64;
    let marginal = if n > 1 {
        per(watched.best(), one.best(), watched.wall, one.wall) * n as f64 / (n - 1) as f64
    } else {
        f64::NAN
    };
    say!(
        "  split: the first limited app {fixed:+.1} us/s (the /proc scan every 500 ms), \
         each further one {marginal:+.2} us/s"
    );
    say!("  target: none in DESIGN.md");
    Ok(vec![
        Row::info(
            format!("memwatch {n} apps: daemon CPU, no limit"),
            format!("{:.2} % of a core", plain.percent()),
        ),
        Row::info(
            format!("memwatch {n} apps: daemon CPU, 1G limit"),
            format!("{:.2} % of a core", watched.percent()),
        ),
        Row::info(
            "memwatch: cost per app per second",
            format!("{best:+.2} us CPU"),
        ),
        Row::info(
            "memwatch: first limited app / each further",
            format!("{fixed:+.1} / {marginal:+.2} us CPU per s"),
        ),
    ])
}
