//! `idle`: what the daemon costs when nothing happens. N sleeping apps
//! without limits, nobody asking: the daemon's CPU over a window, at 1,000
//! and 5,000 apps (`--quick`: 100). Target (issue of faults, part 3): at most
//! 0.5 % of one core at 5,000 apps. Also what one `status` then costs, since
//! a reader is what makes the daemon sample.

use super::health::{cpu_over, Cpu};
use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{ms, Row};
use crate::sandbox::{Bins, Result};
use std::time::{Duration, Instant};

/// At most this share of one core, idle, at the largest size.
const TARGET_PERCENT: f64 = 0.5;

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

/// The daemon's CPU over the window with `n` idle apps, and the wall time
/// of the first `status` after it (which samples every app).
fn measure(bins: &Bins, plan: &Plan, n: usize) -> Result<(Cpu, f64)> {
    with_sandbox(bins, |sb| {
        let dpid = sb.ping()?;
        let cfg = sb.sleep_config(n)?;
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
            "  {n:>5} idle apps: daemon CPU {}; first status after: {first:.1} ms",
            cpu.describe()
        );
        Ok((cpu, first))
    })
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    say!("  processes on this host now: {}", procfs::count());
    let mut rows = Vec::new();
    let sizes = sizes(plan);
    let last = *sizes.last().unwrap_or(&0);
    for n in sizes {
        let (cpu, first) = measure(bins, plan, n)?;
        let pct = cpu.percent();
        let what = format!("daemon CPU, {n} idle apps");
        rows.push(if n == last && !plan.quick {
            Row::check(
                what,
                format!("{pct:.3} % of a core"),
                "<= 0.5 %",
                pct <= TARGET_PERCENT,
            )
        } else {
            Row::info(what, format!("{pct:.3} % of a core"))
        });
        rows.push(Row::info(
            format!("first status after idle, {n} apps"),
            format!("{first:.1} ms"),
        ));
    }
    say!("  target: daemon CPU <= {TARGET_PERCENT} % of one core at 5,000 idle apps");
    Ok(rows)
}
