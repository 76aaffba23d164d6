//! `start1000`: `oxidepm start apps.toml` with 1,000 apps (200 with
//! `--quick`), the daemon already running: the CLI's wall time, the time
//! until `status` shows all online, and the daemon's CPU time for it (the
//! rest is the kernel and the children: forks, execs, log writers).

use super::{with_sandbox, Plan};
use crate::report::{median, Row};
use crate::sandbox::{Bins, Result};
use std::time::Duration;

/// The target of issue 17: 1,000 apps from one file in at most 1 s.
const TARGET_MS: f64 = 1000.0;

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = if plan.quick { 200 } else { 1000 };
    let rounds = plan.start_rounds.min(2);
    let (mut cli, mut online) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (c, o, cpu) = with_sandbox(bins, |sb| {
            let daemon = sb.ping()?;
            let cpu0 = cpu_ms(daemon);
            let (cli, all) = super::start::start_from_file(sb, n, Duration::from_secs(120))?;
            let cpu = match (cpu0, cpu_ms(daemon)) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            };
            Ok((cli, all, cpu))
        })?;
        let cpu = cpu.map_or("?".into(), |c| format!("{c:.0} ms"));
        say!("  round {round}: start command {c:.1} ms, all {n} online after {o:.1} ms; daemon CPU (user+sys) {cpu}");
        cli.push(c);
        online.push(o);
    }
    let (c, o) = (median(&cli), median(&online));
    say!("  start command {c:.1} ms, all online {o:.1} ms (median of {rounds})");
    say!("  target: <= {TARGET_MS} ms for 1,000 apps");
    Ok(vec![
        Row::check(
            format!("start {n} apps from one file: `start` command"),
            format!("{c:.1} ms"),
            "<= 1000 ms (1,000 apps)",
            c <= TARGET_MS,
        ),
        Row::check(
            format!("start {n} apps from one file: until all online"),
            format!("{o:.1} ms"),
            "<= 1000 ms (1,000 apps)",
            o <= TARGET_MS,
        ),
    ])
}

/// The CPU time (user + system) of process `pid`, in ms.
fn cpu_ms(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = text[text.rfind(')')? + 2..].split(' ').collect();
    let ticks: f64 = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 1000.0 / 100.0)
}
