//! `start100`: `oxidepm start apps.toml` with N apps, the daemon already
//! running; the CLI's wall time and the time until `status` shows all online.

use super::{with_sandbox, Plan};
use crate::report::{median, ms, Row};
use crate::sandbox::{Bins, Result, Sandbox};
use serde_json::Value;
use std::time::{Duration, Instant};

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = plan.apps;
    let (mut cli, mut online) = (Vec::new(), Vec::new());
    for round in 1..=plan.start_rounds {
        let (c, o) = with_sandbox(bins, |sb| {
            sb.ping()?;
            start_from_file(sb, n, Duration::from_secs(30))
        })?;
        say!("  round {round}: start command {c:.1} ms, all {n} online after {o:.1} ms");
        cli.push(c);
        online.push(o);
    }
    let (c, o) = (median(&cli), median(&online));
    let of = if cli.len() > 1 {
        format!("median of {} rounds: ", cli.len())
    } else {
        String::new()
    };
    say!("  {of}start command {c:.1} ms, all online {o:.1} ms (polling `status --json`)");
    say!("  target: <= 200 ms");
    Ok(vec![
        Row::check(
            format!("start {n} apps: `start` command"),
            format!("{c:.1} ms"),
            "<= 200 ms",
            c <= 200.0,
        ),
        Row::check(
            format!("start {n} apps: until all online"),
            format!("{o:.1} ms"),
            "<= 200 ms",
            o <= 200.0,
        ),
    ])
}

/// Starts `n` sleeping apps from one file in `sb` (its daemon running) and
/// waits up to `wait` until all are online: the `start` command's wall
/// time and the time until all were online, in ms.
pub fn start_from_file(sb: &Sandbox, n: usize, wait: Duration) -> Result<(f64, f64)> {
    let cfg = sb.sleep_config(n)?;
    let cfg = cfg.to_string_lossy();
    let mut cmd = sb.cli(&["start", &cfg, "--json"]);
    let t0 = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run oxidepm: {e}"))?;
    let cli = t0.elapsed();
    if !out.status.success() {
        return Err(format!(
            "`oxidepm start apps.toml` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let answered = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().map(Vec::len));
    if answered != Some(n) {
        say!("  note: `start --json` answered for {answered:?} apps, expected {n}");
    }
    sb.wait_online(n, wait)?;
    Ok((ms(cli), ms(t0.elapsed())))
}
