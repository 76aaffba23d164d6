//! `rss`: resident memory of the daemon, idle and with N apps, and of the
//! log shims that run beside it.

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{Bins, Result};
use std::time::Duration;

const MIB: u64 = 1024 * 1024;

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let n = plan.apps;
        let pid = sb.ping()?;
        // Let start-up work (state file, first timers) settle.
        sleep_ms(500);
        let rss = |what: &str| {
            procfs::status_bytes(pid, "VmRSS")
                .ok_or_else(|| format!("cannot read VmRSS of the daemon (pid {pid}) {what}"))
        };
        let parts = || {
            let kind = |k| procfs::status_bytes(pid, k).map(mib).unwrap_or("?".into());
            format!("anon {}, file {}", kind("RssAnon"), kind("RssFile"))
        };
        let idle = rss("when idle")?;
        say!(
            "  daemon pid {pid}, idle (0 apps):  VmRSS {} ({})",
            mib(idle),
            parts()
        );

        sb.start_sleepers(n, Duration::from_secs(30))?;
        // The sampler looks at every app each 2 s; let it run at least once.
        sleep_ms(2500);
        let busy = rss("with apps")?;
        let hwm = procfs::status_bytes(pid, "VmHWM").unwrap_or(0);
        say!(
            "  daemon with {n} apps online:     VmRSS {} ({}; peak VmHWM {})",
            mib(busy),
            parts(),
            mib(hwm)
        );

        let shims: Vec<u32> = procfs::children(pid)
            .into_iter()
            .filter(|p| p.state != b'Z' && procfs::cmdline(p.pid).iter().any(|a| a == "__logshim"))
            .map(|p| p.pid)
            .collect();
        let mut rows = vec![
            Row::check("daemon RSS, idle", mib(idle), "<= 5 MiB", idle <= 5 * MIB),
            Row::check(
                format!("daemon RSS, {n} apps"),
                mib(busy),
                "<= 8 MiB",
                busy <= 8 * MIB,
            ),
        ];
        if let Some(&one) = shims.first() {
            let one_rss = procfs::status_bytes(one, "VmRSS").unwrap_or(0);
            let one_pss = procfs::pss_bytes(one);
            let pss_total: Option<u64> = shims.iter().map(|&p| procfs::pss_bytes(p)).sum();
            let rss_total: u64 = shims
                .iter()
                .filter_map(|&p| procfs::status_bytes(p, "VmRSS"))
                .sum();
            say!(
                "  log shims: {} processes; one shim VmRSS {}{}",
                shims.len(),
                mib(one_rss),
                one_pss
                    .map(|p| format!(", PSS {}", mib(p)))
                    .unwrap_or_default()
            );
            say!(
                "  all shims together: VmRSS sum {}{} (RSS counts shared pages once per process)",
                mib(rss_total),
                pss_total
                    .map(|p| format!(", PSS sum {}", mib(p)))
                    .unwrap_or_default()
            );
            rows.push(Row::info("one log shim RSS", mib(one_rss)));
            if let Some(p) = pss_total {
                rows.push(Row::info(
                    format!("{} log shims, PSS total", shims.len()),
                    mib(p),
                ));
            }
            if shims.len() != n {
                say!(
                    "  note: expected {n} log shims (one per app), found {}",
                    shims.len()
                );
            }
        } else {
            say!("  note: no log shim found among the daemon's children");
        }
        Ok(rows)
    })
}
