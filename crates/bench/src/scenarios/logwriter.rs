//! `logwriter`: memory of the per-app log writers (`oxidepm-logwriter`, or
//! `oxidepmd __logshim` when that is not installed) with N apps: PSS per
//! writer, shared pages divided among the writers as the kernel counts them.

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::Row;
use crate::sandbox::{Bins, Result};
use std::time::Duration;

/// The target for one writer.
const TARGET: u64 = 100 * 1024;

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let n = plan.apps;
        let pid = sb.ping()?;
        sb.start_sleepers(n, Duration::from_secs(30))?;
        // Let every writer finish starting (page faults of its first read).
        sleep_ms(1000);
        let writers: Vec<u32> = procfs::children(pid)
            .into_iter()
            .filter(|p| p.state != b'Z' && procfs::cmdline(p.pid).iter().any(|a| a == "__logshim"))
            .map(|p| p.pid)
            .collect();
        let Some(&first) = writers.first() else {
            return Err("no log writer found among the daemon's children".into());
        };
        let program = procfs::cmdline(first)
            .first()
            .cloned()
            .unwrap_or_else(|| "?".into());
        let pss: Vec<u64> = writers
            .iter()
            .filter_map(|&p| procfs::pss_bytes(p))
            .collect();
        if pss.is_empty() {
            return Err("cannot read smaps_rollup of the log writers".into());
        }
        let total: u64 = pss.iter().sum();
        let mean = total / pss.len() as u64;
        let kib = |b: u64| format!("{:.0} KiB", b as f64 / 1024.0);
        say!(
            "  {} writers ({program}); PSS per writer {} (mean), all together {}",
            writers.len(),
            kib(mean),
            kib(total)
        );
        let maps = std::fs::read_to_string(format!("/proc/{first}/maps")).unwrap_or_default();
        if maps.contains("/ld-linux") {
            say!("  note: the writer is linked dynamically; scripts/static-logwriter.sh links it statically (smaller)");
        }
        if writers.len() != n {
            say!(
                "  note: expected {n} writers (one per app), found {}",
                writers.len()
            );
        }
        Ok(vec![
            Row::check(
                format!("log writer PSS, {n} apps"),
                kib(mean),
                "<= 100 KiB",
                mean <= TARGET,
            ),
            Row::info(
                format!("{} log writers, PSS total", writers.len()),
                kib(total),
            ),
        ])
    })
}
