//! `idle`: what the daemon costs when nothing happens. N sleeping apps,
//! nobody asking: the daemon's CPU over a window, at 1,000 and 5,000 apps
//! (`--quick`: 100), without limits and with `max_memory_restart` on every
//! app (never reached; the limit watch samples each app twice a second).
//! Targets (DESIGN.md): at most 0.05 % of one core at 1,000 apps and 0.5 %
//! at 5,000, without limits. Also what one `status` then costs, since a
//! reader is what makes the daemon sample.

use super::health::{cpu_over, Cpu};
use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{ms, Row};
use crate::sandbox::{Bins, Result};
use std::time::{Duration, Instant};

/// At most this share of one core, idle, at each size without limits.
const TARGETS: [(usize, f64); 2] = [(1_000, 0.05), (5_000, 0.5)];

fn sizes(plan: &Plan) -> Vec<usize> {
    if plan.quick {
        vec![100]
    } else {
        vec![1_000, 5_000]
    }
}

fn span(plan: &Plan) -> Duration {
    Duration::from_secs(if plan.quick { 5 } else { 60 })
}

/// The daemon's CPU over the window with `n` idle apps (each with a memory
/// limit when `limited`), and the wall time of the first `status` after it
/// (which samples every app).
fn measure(bins: &Bins, plan: &Plan, n: usize, limited: bool) -> Result<(Cpu, f64)> {
    with_sandbox(bins, |sb| {
        let dpid = sb.ping()?;
        let cfg = if limited {
            let mut text = String::new();
            for i in 0..n {
                text.push_str(&format!(
                    "[[apps]]\nname = \"s{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\
                     max_memory_restart = \"1G\"\n\n"
                ));
            }
            let path = sb.home().join("limited.toml");
            std::fs::write(&path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            path
        } else {
            sb.sleep_config(n)?
        };
        sb.run(&["start", &cfg.to_string_lossy()])?;
        sb.wait_online(n, Duration::from_secs(60 + n as u64 / 50))?;
        // Past start-up: the last status of wait_online sampled what it saw.
        sleep_ms(2500);
        let cpu = cpu_over(dpid, span(plan))?;
        let t0 = Instant::now();
        let listed = sb.status()?.len();
        let first = ms(t0.elapsed());
        if listed != n {
            return Err(format!("status lists {listed} apps, not {n}"));
        }
        say!(
            "  {n:>5} idle apps{}: daemon CPU {}; first status after: {first:.1} ms",
            if limited { " with a 1G limit" } else { "" },
            cpu.describe()
        );
        Ok((cpu, first))
    })
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    say!("  processes on this host now: {}", procfs::count());
    let mut rows = Vec::new();
    for n in sizes(plan) {
        let (cpu, first) = measure(bins, plan, n, false)?;
        let pct = cpu.percent();
        let what = format!("daemon CPU, {n} idle apps");
        let measured = format!("{pct:.3} % of a core");
        rows.push(match TARGETS.iter().find(|t| t.0 == n) {
            Some(&(_, target)) if !plan.quick => {
                Row::check(what, measured, &format!("<= {target} %"), pct <= target)
            }
            _ => Row::info(what, measured),
        });
        rows.push(Row::info(
            format!("first status after idle, {n} apps"),
            format!("{first:.1} ms"),
        ));
        let (cpu, _) = measure(bins, plan, n, true)?;
        rows.push(Row::info(
            format!("daemon CPU, {n} idle apps, each with max_memory_restart"),
            format!("{:.3} % of a core", cpu.percent()),
        ));
    }
    say!("  targets: daemon CPU <= 0.05 % of one core at 1,000 idle apps, <= 0.5 % at 5,000 (no limits)");
    Ok(rows)
}
