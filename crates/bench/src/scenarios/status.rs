//! `status`: wall time of the whole `oxidepm status --json` process (spawn,
//! connect, answer, print, exit) with N apps online.

use super::{with_sandbox, Plan};
use crate::report::{max, median, min, ms, percentile, Row};
use crate::sandbox::{Bins, Result};
use serde_json::Value;
use std::time::{Duration, Instant};

const WARMUP: usize = 10;

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let n = plan.apps;
        sb.ping()?;
        sb.start_sleepers(n, Duration::from_secs(30))?;

        let mut cmd = sb.cli(&["status", "--json"]);
        let first = cmd
            .output()
            .map_err(|e| format!("cannot run oxidepm: {e}"))?;
        let listed = serde_json::from_slice::<Value>(&first.stdout)
            .ok()
            .and_then(|v| v.as_array().map(Vec::len));
        if listed != Some(n) {
            return Err(format!(
                "`oxidepm status --json` should list {n} apps, got {listed:?}: {}",
                String::from_utf8_lossy(&first.stderr).trim()
            ));
        }
        say!(
            "  answer: {} bytes of JSON for {n} apps",
            first.stdout.len()
        );

        let mut times = Vec::with_capacity(plan.status_runs);
        for i in 0..WARMUP + plan.status_runs {
            let t0 = Instant::now();
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run oxidepm: {e}"))?;
            let dt = t0.elapsed();
            if !out.status.success() {
                return Err(format!(
                    "`oxidepm status --json` failed at run {i} ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            if i >= WARMUP {
                times.push(ms(dt));
            }
        }
        let (med, p95) = (median(&times), percentile(&times, 95.0));
        say!(
            "  {} runs (after {WARMUP} warm-up): median {med:.2} ms, p95 {p95:.2} ms, min {:.2} ms, max {:.2} ms",
            times.len(),
            min(&times),
            max(&times)
        );
        say!("  target: median <= 3 ms");
        Ok(vec![
            Row::check(
                format!("status --json, {n} apps (median)"),
                format!("{med:.2} ms"),
                "<= 3 ms",
                med <= 3.0,
            ),
            Row::info(
                format!("status --json, {n} apps (p95)"),
                format!("{p95:.2} ms"),
            ),
        ])
    })
}
