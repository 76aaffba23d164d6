//! `storm`: N crash-looping apps (`restart_delay` 0): the wall time of
//! `oxidepm status --json` all through the storm, the time until every app
//! is `errored`, and the restarts the daemon made.

use super::{with_sandbox, Plan};
use crate::report::{max, median, ms, percentile, Row};
use crate::sandbox::{Bins, Result};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Restarts allowed per app: with the defaults (15, backed off up to 15 s)
/// a storm lasts minutes; 3 keeps the run short and still a storm.
const MAX_RESTARTS: u32 = 3;

/// Give up after this long (the old daemon never got there).
const GIVE_UP: Duration = Duration::from_secs(300);

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = if plan.quick { 100 } else { 800 };
    with_sandbox(bins, |sb| {
        sb.ping()?;
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[apps]]\nname = \"c{i}\"\nscript = \"/bin/sh\"\nargs = [\"-c\", \"exit 3\"]\nrestart_delay = \"0ms\"\nmax_restarts = {MAX_RESTARTS}\n\n"
            ));
        }
        let cfg = sb.home().join("storm.toml");
        std::fs::write(&cfg, text).map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
        let t0 = Instant::now();
        sb.run(&["start", &cfg.to_string_lossy()])?;
        let mut cmd = sb.cli(&["status", "--json"]);
        let mut times = Vec::new();
        let (all_errored, restarts) = loop {
            let t = Instant::now();
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run oxidepm: {e}"))?;
            let dt = t.elapsed();
            if !out.status.success() {
                return Err(format!(
                    "`oxidepm status --json` failed during the storm ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            times.push(ms(dt));
            let apps = serde_json::from_slice::<Value>(&out.stdout)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            let errored = apps.iter().filter(|a| a["status"] == "errored").count();
            if errored == n {
                let restarts: u64 = apps.iter().filter_map(|a| a["restarts"].as_u64()).sum();
                break (t0.elapsed(), restarts);
            }
            if t0.elapsed() > GIVE_UP {
                return Err(format!(
                    "only {errored} of {n} apps errored after {GIVE_UP:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (p50, p99, worst) = (median(&times), percentile(&times, 99.0), max(&times));
        say!(
            "  {n} apps, max_restarts {MAX_RESTARTS}: all errored after {:.1} s, {restarts} restarts",
            all_errored.as_secs_f64()
        );
        say!(
            "  status --json during the storm ({} runs): p50 {p50:.1} ms, p99 {p99:.1} ms, max {worst:.1} ms",
            times.len()
        );
        say!("  target: status <= 100 ms during an 800-app storm");
        Ok(vec![
            Row::check(
                format!("storm {n} apps: status p99"),
                format!("{p99:.1} ms"),
                "<= 100 ms",
                p99 <= 100.0,
            ),
            Row::info(
                format!("storm {n} apps: status p50 / max"),
                format!("{p50:.1} / {worst:.1} ms"),
            ),
            Row::info(
                format!("storm {n} apps: until all errored"),
                format!("{:.1} s", all_errored.as_secs_f64()),
            ),
            Row::info(
                format!("storm {n} apps: restarts made"),
                restarts.to_string(),
            ),
        ])
    })
}
