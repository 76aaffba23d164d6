//! `logs`, read side: a person reads the whole big log back with
//! `oxidepm logs <app> --lines N`; the daemon's peak RSS meanwhile, and
//! how long a `status` takes during the read against idle.

use crate::procfs;
use crate::report::{self, median, mib, Row};
use crate::sandbox::{Result, Sandbox};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Timed `status` runs while idle.
const IDLE_RUNS: usize = 10;
/// What the daemon's peak RSS may grow by during the read.
const GROWTH_TARGET: u64 = 32 * 1024 * 1024;

fn timed_status(sb: &Sandbox) -> Result<f64> {
    let t0 = Instant::now();
    sb.run(&["status", "--json"])?;
    Ok(report::ms(t0.elapsed()))
}

/// Writes an `n`-line log (the capture rounds remove theirs), waits
/// until it is complete, then reads it back through the CLI.
pub fn rows(sb: &Sandbox, dpid: u32, n: u64) -> Result<Vec<Row>> {
    let app = "readback";
    let me = sb.bins.me.to_string_lossy().into_owned();
    let count = n.to_string();
    sb.run(&[
        "start",
        "--name",
        app,
        "--restart",
        "never",
        "--",
        &me,
        "__write-lines",
        &count,
    ])?;
    let log = sb.logs_dir().join(format!("{app}-out.log"));
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last = (0, Instant::now());
    loop {
        let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        if len != last.0 {
            last = (len, Instant::now());
        } else if len > 0 && last.1.elapsed() > Duration::from_secs(2) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{} did not stop growing", log.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut idle = Vec::new();
    for _ in 0..IDLE_RUNS {
        idle.push(timed_status(sb)?);
    }
    let rss0 = procfs::status_bytes(dpid, "VmRSS").unwrap_or(0);
    let hwm0 = procfs::status_bytes(dpid, "VmHWM").unwrap_or(0);
    let mut child = sb
        .cli(&["logs", app, "--out", "--raw", "--lines", &n.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run oxidepm logs: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let t0 = Instant::now();
    let counter = std::thread::spawn(move || BufReader::new(out).lines().count() as u64);
    let mut busy = Vec::new();
    let mut peak = rss0;
    while !counter.is_finished() {
        peak = peak.max(procfs::status_bytes(dpid, "VmRSS").unwrap_or(0));
        busy.push(timed_status(sb)?);
        std::thread::sleep(Duration::from_millis(20));
    }
    let printed = counter.join().map_err(|_| "the line counter failed")?;
    let wall = t0.elapsed().as_secs_f64();
    let _ = child.wait();
    let hwm = procfs::status_bytes(dpid, "VmHWM").unwrap_or(0);
    let peak = peak.max(rss0);
    let growth = hwm.saturating_sub(hwm0).max(peak.saturating_sub(rss0));
    let (mi, mb) = (median(&idle), median(&busy));
    let worst = report::max(&busy);
    say!(
        "  read back {printed}/{n} lines in {wall:.2} s; daemon RSS {} -> peak {} (VmHWM +{}); status {mi:.1} ms idle, {mb:.1} ms (worst {worst:.1}) during the read, {} samples",
        mib(rss0),
        mib(peak),
        mib(hwm.saturating_sub(hwm0)),
        busy.len()
    );
    Ok(vec![
        Row::check(
            format!("logs read {n} lines: lines printed"),
            printed.to_string(),
            &n.to_string(),
            printed == n,
        ),
        Row::check(
            format!("logs read {n} lines: daemon peak memory growth"),
            format!("{} (peak RSS {})", mib(growth), mib(peak)),
            "< 32 MiB",
            growth < GROWTH_TARGET,
        ),
        Row::info(
            format!("logs read {n} lines: status latency during vs idle"),
            format!("{mb:.1} ms (worst {worst:.1}) vs {mi:.1} ms"),
        ),
    ])
}
