//! The large-entries attack on the bridge: one agent's outbox gets 8
//! entries of 32 MiB (written straight to Redis, as an agent without a
//! proxy in front could), while another agent's answers keep flowing.
//! Measured: the bridge's peak RSS during the attack (its high-water mark
//! is reset first, so earlier scenarios do not count) and the other
//! agent's delivery latency (XADD to its outbox → the sink has the POST),
//! idle and during the attack.

use super::resp::Resp;
use super::{agent, http, wait_for, ADMIN_PW, SOURCE};
use crate::procfs;
use crate::report::{mib, percentile, Row};
use crate::sandbox::Result;
use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::StreamKey;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Entries the attacker writes, and their size.
const ENTRIES: usize = 8;
const ENTRY_BYTES: usize = 32 << 20;
/// The bridge's peak RSS budget under the attack.
const BUDGET: u64 = 32 << 20;

/// One delivery of agent 1: XADD to its outbox, then wait until the sink
/// has one more request. Returns (the whole, Redis's answer to the XADD),
/// in ms: the second is the part Redis itself takes.
fn one_delivery(admin: &mut Resp, sink: &http::Sink, i: usize) -> Result<(f64, f64)> {
    let key = StreamKey::outbox(&agent(1), SOURCE).to_string();
    let before = sink.count.load(Ordering::SeqCst);
    let text = format!("latency probe {i}");
    let t0 = Instant::now();
    admin.cmd(&["XADD", &key, "*", "channel", "c1", "text", &text])?;
    let redis_ms = t0.elapsed().as_secs_f64() * 1e3;
    let deadline = t0 + Duration::from_secs(60);
    while sink.count.load(Ordering::SeqCst) == before {
        if Instant::now() > deadline {
            return Err("a probe was not delivered within 60 s".into());
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok((t0.elapsed().as_secs_f64() * 1e3, redis_ms))
}

/// Runs the attack against the bridge `pid` (Redis on `socket`).
pub fn run(
    socket: &Path,
    admin: &mut Resp,
    sink: &http::Sink,
    pid: u32,
    quick: bool,
) -> Result<Vec<Row>> {
    let samples = if quick { 50 } else { 200 };
    say!(
        "  large-entries attack: {ENTRIES} entries of {} MiB in agent a0's outbox, a1's deliveries meanwhile",
        ENTRY_BYTES >> 20
    );
    let idle: Vec<f64> = (0..samples)
        .map(|i| one_delivery(admin, sink, i).map(|(all, _)| all))
        .collect::<Result<_>>()?;
    // Resets VmHWM to the current RSS (Linux 4.0+).
    let reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let dead_key = format!("{}:dead", StreamKey::outbox(&agent(0), SOURCE));
    let dead_before = admin.cmd(&["XLEN", &dead_key])?.int().unwrap_or(0);
    let mut attacker = Resp::connect(socket, &AclUser::Admin.to_string(), ADMIN_PW)?;
    let outbox = StreamKey::outbox(&agent(0), SOURCE).to_string();
    let t0 = Instant::now();
    let attack = std::thread::spawn(move || -> Result<()> {
        let blob = "x".repeat(ENTRY_BYTES);
        for i in 0..ENTRIES {
            let text = format!("huge {i}");
            attacker.cmd(&[
                "XADD", &outbox, "*", "channel", "c0", "text", &text, "blob", &blob,
            ])?;
        }
        Ok(())
    });
    let mut during = Vec::with_capacity(samples);
    let mut redis_part = Vec::with_capacity(samples);
    let mut i = samples;
    // Probes until the attack is written and handled, and at least
    // `samples` of them.
    loop {
        let (all, redis) = one_delivery(admin, sink, i)?;
        during.push(all);
        redis_part.push(redis);
        i += 1;
        let dead = admin.cmd(&["XLEN", &dead_key])?.int().unwrap_or(0) - dead_before;
        if attack.is_finished() && dead >= ENTRIES as i64 && during.len() >= samples {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            return Err(format!(
                "the attack was not handled in 300 s ({dead} dead letters)"
            ));
        }
    }
    attack
        .join()
        .map_err(|_| "the attacker thread panicked".to_string())??;
    let handled = t0.elapsed().as_secs_f64();
    let peak = procfs::status_bytes(pid, "VmHWM").unwrap_or(0);
    // Trimming is approximate (whole nodes of the stream): a few entries
    // may stay, never a 32 MiB one for long.
    let key = StreamKey::outbox(&agent(0), SOURCE).to_string();
    let mut left = i64::MAX;
    wait_for("a0's outbox trimmed", Duration::from_secs(30), || {
        left = admin
            .cmd(&["XLEN", &key])
            .ok()
            .and_then(|r| r.int())
            .unwrap_or(i64::MAX);
        left <= 100
    })?;
    let (i50, i99) = (percentile(&idle, 50.0), percentile(&idle, 99.0));
    let (d50, d99) = (percentile(&during, 50.0), percentile(&during, 99.0));
    say!(
        "  {ENTRIES} huge entries dead-lettered in {handled:.2} s; the outbox trimmed to {left} entries; bridge peak RSS {}{}",
        mib(peak),
        if reset { "" } else { " (high-water mark not reset: includes earlier scenarios)" }
    );
    say!("  a1's delivery latency: idle p50 {i50:.2} ms p99 {i99:.2} ms; during the attack p50 {d50:.2} ms p99 {d99:.2} ms ({} probes)", during.len());
    let r99 = percentile(&redis_part, 99.0);
    say!(
        "  of which Redis answering the probe's XADD (busy taking 32 MiB writes): p50 {:.2} ms p99 {r99:.2} ms",
        percentile(&redis_part, 50.0),
    );
    Ok(vec![
        Row::check(
            "bridge: peak RSS, 8 x 32 MiB outbox entries",
            mib(peak),
            "<= 32 MiB",
            peak <= BUDGET,
        ),
        Row::info(
            "bridge: other agent's delivery p50 / p99, idle -> under attack",
            format!("{i50:.2} / {i99:.2} -> {d50:.2} / {d99:.2} ms (Redis's own p99 {r99:.0} ms)"),
        ),
    ])
}
