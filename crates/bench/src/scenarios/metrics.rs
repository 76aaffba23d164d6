//! `metrics`: what `/metrics` costs the daemon. Its CPU per scrape with N
//! apps online (less what the daemon spends idle over as long): scrapes
//! spaced so each is rendered, and a client scraping in a loop (served
//! the text rendered within the last 100 ms); and its idle RSS with
//! metrics off and on, each in a fresh home.

use super::health::sched_ns_total;
use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{Bins, Result, Sandbox};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The daemon serves one scrape again to scrapers this close (ms).
const FRESH_MS: u64 = 100;

/// Target of DESIGN.md / issue 14: daemon CPU per scrape with 100 apps.
const TARGET_MS: f64 = 1.0;

/// Turns metrics on at a free loopback port (before the daemon starts).
fn metrics_on(sb: &Sandbox) -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let cfg = sb.home().join("daemon.toml");
    std::fs::write(&cfg, format!("metrics = \"{addr}\"\n"))
        .map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
    Ok(addr)
}

/// One scrape; the body's length.
fn scrape(addr: &str) -> Result<usize> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .map_err(|e| format!("cannot send a scrape: {e}"))?;
    let mut out = Vec::with_capacity(64 * 1024);
    s.read_to_end(&mut out)
        .map_err(|e| format!("cannot read a scrape: {e}"))?;
    if !out.starts_with(b"HTTP/1.1 200") {
        return Err(format!(
            "scrape failed: {}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        ));
    }
    Ok(out.len())
}

/// The daemon's CPU per call of `one`, in ms, less what it spends idle
/// over as long (its sampler runs meanwhile).
fn per_scrape_ms(
    cpu: &dyn Fn() -> Result<u64>,
    times: u32,
    mut one: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let (c0, t0) = (cpu()?, Instant::now());
    for _ in 0..times {
        one()?;
    }
    let (c1, busy_wall) = (cpu()?, t0.elapsed());
    let (i0, w0) = (cpu()?, Instant::now());
    std::thread::sleep(busy_wall);
    let (i1, idle_wall) = (cpu()?, w0.elapsed());
    let idle_rate = i1.saturating_sub(i0) as f64 / idle_wall.as_secs_f64();
    let busy = c1.saturating_sub(c0) as f64 - idle_rate * busy_wall.as_secs_f64();
    Ok(busy.max(0.0) / f64::from(times) / 1e6)
}

/// Idle VmRSS of a fresh daemon, with metrics on or off.
fn idle_rss(bins: &Bins, on: bool) -> Result<u64> {
    with_sandbox(bins, |sb| {
        if on {
            metrics_on(sb)?;
        }
        let pid = sb.ping()?;
        sleep_ms(500);
        procfs::status_bytes(pid, "VmRSS")
            .ok_or_else(|| format!("cannot read VmRSS of the daemon (pid {pid})"))
    })
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = plan.apps;
    let scrapes: u32 = if plan.quick { 30 } else { 100 };
    let off = idle_rss(bins, false)?;
    let on = idle_rss(bins, true)?;
    say!(
        "  daemon idle VmRSS: metrics off {}, on {}",
        mib(off),
        mib(on)
    );
    let ((per_scrape, looped), bytes) = with_sandbox(bins, |sb| {
        let addr = metrics_on(sb)?;
        let pid = sb.ping()?;
        sb.start_sleepers(n, Duration::from_secs(30))?;
        // Past start-up, and the sampler has run.
        sleep_ms(2500);
        let bytes = scrape(&addr)?;
        let cpu = || sched_ns_total(pid).ok_or_else(|| format!("cannot read the CPU of pid {pid}"));
        // Spaced past the daemon's reuse window, so each one is rendered.
        let fresh = per_scrape_ms(&cpu, scrapes, || {
            sleep_ms(FRESH_MS + 10);
            scrape(&addr).map(drop)
        })?;
        // Back to back, as a client scraping in a loop would.
        let looped = per_scrape_ms(&cpu, scrapes * 5, || scrape(&addr).map(drop))?;
        say!(
            "  {n} apps, {bytes} bytes a scrape: daemon CPU {fresh:.3} ms per scrape rendered, \
             {looped:.3} ms per scrape of a client scraping in a loop (idle CPU over as long subtracted)"
        );
        let per = (fresh, looped);
        Ok((per, bytes))
    })?;
    Ok(vec![
        Row::check(
            format!("daemon CPU per /metrics scrape, {n} apps"),
            format!("{per_scrape:.3} ms"),
            "< 1 ms",
            per_scrape < TARGET_MS,
        ),
        Row::info(
            format!("daemon CPU per scrape, {n} apps, client in a loop"),
            format!("{looped:.3} ms"),
        ),
        Row::info(format!("/metrics size, {n} apps"), format!("{bytes} B")),
        Row::info("daemon RSS, idle, metrics off", mib(off)),
        Row::info("daemon RSS, idle, metrics on", mib(on)),
    ])
}
