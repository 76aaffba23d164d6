//! `adopt`: SIGKILL of the daemon with N apps online, then a new daemon
//! (started by `oxidepm ping`, as every CLI command does) until `status`
//! shows every app online again under the very same pid. Then one adopted
//! app is killed to see that it is supervised again (respawned).

use super::{sleep_ms, Plan};
use crate::procfs::{self, Stat};
use crate::report::{max, median, min, ms, Row};
use crate::sandbox::{s, Bins, Result, Sandbox};
use oxidepm_sys::signal::{self, Signal};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let mut sb = Sandbox::new(bins)?;
    say!("  home: {}", sb.home().display());
    // Every process seen in a daemon's tree: adopted apps are no longer the
    // new daemon's descendants, so the sandbox's teardown cannot find them.
    let mut seen: Vec<Stat> = Vec::new();
    let result = body(&mut sb, plan, &mut seen);
    for note in sb.teardown() {
        say!("  teardown: {note}");
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while seen.iter().any(procfs::alive) && Instant::now() < deadline {
        sleep_ms(20);
    }
    let left: Vec<&Stat> = seen.iter().filter(|p| procfs::alive(p)).collect();
    if !left.is_empty() {
        say!(
            "  teardown: {} process(es) of the killed daemon(s) still ran 3 s after `oxidepm kill` \
             and were SIGKILLed: {}",
            left.len(),
            left.iter()
                .take(5)
                .map(|p| format!("{} ({})", p.pid, procfs::cmdline(p.pid).join(" ")))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for p in left {
            let _ = signal::kill(p.pid, Signal::SIGKILL);
        }
    }
    result
}

/// Apps' pids by name.
type Pids = BTreeMap<String, Option<u32>>;

/// Apps' pids by name, from `status --json`.
fn pids(sb: &Sandbox) -> Result<Pids> {
    Ok(sb
        .status()?
        .iter()
        .map(|a| {
            (
                s(a, "name"),
                a.get("pid").and_then(Value::as_u64).map(|p| p as u32),
            )
        })
        .collect())
}

/// Names of apps that are online under their old pid.
fn same_and_online(apps: &[Value], before: &BTreeMap<String, Option<u32>>) -> usize {
    apps.iter()
        .filter(|a| {
            a.get("status").and_then(Value::as_str) == Some("online")
                && before.get(&s(a, "name")).copied().flatten()
                    == a.get("pid").and_then(Value::as_u64).map(|p| p as u32)
        })
        .count()
}

fn body(sb: &mut Sandbox, plan: &Plan, seen: &mut Vec<Stat>) -> Result<Vec<Row>> {
    let n = plan.apps;
    let rounds = if plan.quick { 1 } else { 3 };
    let t0 = Instant::now();
    let mut dpid = sb.ping()?;
    let cold = ms(t0.elapsed());
    say!("  `oxidepm ping` starting a daemon in an empty home: {cold:.1} ms");
    let (before, app_stats) = start_apps(sb, n)?;
    let (mut pings, mut totals, mut firsts) = (Vec::new(), Vec::new(), Vec::new());
    let mut all_same = true;
    for round in 1..=rounds {
        let old = kill_daemon(dpid, round, &app_stats, seen)?;
        let t0 = Instant::now();
        dpid = sb.ping()?;
        let ping = t0.elapsed();
        let back = readopted(sb, &before, n, round, t0)?;
        all_same &= back.same;
        say!(
            "  round {round}: daemon {} killed; new daemon {dpid}: `oxidepm ping` {:.1} ms, \
             all {n} online with the same pids after {:.1} ms ({} status poll(s); first poll: {}/{n})",
            old.pid,
            ms(ping),
            ms(back.total),
            back.polls,
            back.first_seen
        );
        pings.push(ms(ping));
        totals.push(ms(back.total));
        firsts.push(back.first_seen as f64);
    }
    say_adoptions(sb, n, rounds)?;
    let respawned = supervised_again(sb, &before)?;
    let (med, p, f) = (median(&totals), median(&pings), median(&firsts));
    say!(
        "  daemon start -> all {n} re-adopted (same pids, online): median {med:.1} ms \
         (min {:.1}, max {:.1}); of it `oxidepm ping` {p:.1} ms",
        min(&totals),
        max(&totals)
    );
    say!("  target (DESIGN.md): every app kept, same pids, supervised again (no time target)");
    let kept = format!(
        "{}/{n} x {rounds} round(s){}",
        if all_same { n } else { 0 },
        if f as usize == n {
            ", at the first status".to_string()
        } else {
            String::new()
        }
    );
    Ok(vec![
        Row::info(
            format!("adopt {n} apps: daemon start -> all re-adopted"),
            format!("{med:.1} ms"),
        ),
        Row::info(
            format!("adopt {n} apps: `oxidepm ping` (daemon start)"),
            format!("{p:.1} ms (empty home {cold:.1} ms)"),
        ),
        Row::check(
            format!("adopt {n} apps: kept, same pids"),
            kept,
            "all",
            all_same,
        ),
        Row::check(
            "adopt: adopted app supervised again",
            match respawned {
                Some((_, dt)) => format!("respawned in {:.1} ms", ms(dt)),
                None => "not respawned in 5 s".into(),
            },
            "respawned",
            respawned.is_some(),
        ),
    ])
}

/// The adoptions are on record: how many `adopted` events there are.
fn say_adoptions(sb: &Sandbox, n: usize, rounds: usize) -> Result<()> {
    let events = sb.json(&["events", "--limit", &(n * (rounds + 2)).to_string()])?;
    let adopted = events
        .as_array()
        .map(|evs| {
            evs.iter()
                .filter(|e| e.get("kind").and_then(Value::as_str) == Some("adopted"))
                .count()
        })
        .unwrap_or(0);
    say!(
        "  events: {adopted} `adopted` event(s) by system:adopt (expected {})",
        n * rounds
    );
    Ok(())
}

/// `n` apps started and online: their pids by name, and their processes.
fn start_apps(sb: &mut Sandbox, n: usize) -> Result<(Pids, Vec<Stat>)> {
    sb.start_sleepers(n, Duration::from_secs(30))?;
    let before = pids(sb)?;
    if before.len() != n || before.values().any(Option::is_none) {
        return Err(format!(
            "expected {n} apps with a pid before the kill, got {:?}",
            before
        ));
    }
    let app_stats: Vec<Stat> = before
        .values()
        .flatten()
        .filter_map(|&p| procfs::stat(p))
        .collect();
    if app_stats.len() != n {
        return Err(format!(
            "only {} of the {n} apps' processes are in /proc",
            app_stats.len()
        ));
    }
    Ok((before, app_stats))
}

/// SIGKILL of the daemon `dpid` (its tree noted in `seen` first, for the
/// cleanup); an error when it does not die or an app dies with it. The
/// daemon as it was.
fn kill_daemon(dpid: u32, round: usize, apps: &[Stat], seen: &mut Vec<Stat>) -> Result<Stat> {
    // Processes of this daemon's tree (apps, log shims), for cleanup.
    for p in procfs::descendants(dpid) {
        if !seen
            .iter()
            .any(|q| q.pid == p.pid && q.start_ticks == p.start_ticks)
        {
            seen.push(p);
        }
    }
    let old = procfs::stat(dpid).ok_or_else(|| format!("the daemon (pid {dpid}) is gone"))?;
    if let Err(e) = signal::kill(dpid, Signal::SIGKILL) {
        return Err(format!("cannot SIGKILL the daemon {dpid}: {e}"));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while procfs::alive(&old) {
        if Instant::now() > deadline {
            return Err(format!("the daemon {dpid} still runs 5 s after SIGKILL"));
        }
        sleep_ms(1);
    }
    let died: Vec<u32> = apps
        .iter()
        .filter(|p| !procfs::alive(p))
        .map(|p| p.pid)
        .collect();
    if !died.is_empty() {
        return Err(format!(
            "round {round}: {} app process(es) died with the daemon: {:?}",
            died.len(),
            &died[..died.len().min(10)]
        ));
    }
    // Let the kernel settle (reparenting), then start the next daemon.
    sleep_ms(200);
    Ok(old)
}

/// How a new daemon took the apps back.
struct Readopted {
    /// From the daemon's start (`t0`) to every app online under its pid.
    total: Duration,
    /// `status` polls until then.
    polls: usize,
    /// Apps online under their old pid at the first poll.
    first_seen: usize,
    /// Whether the last poll showed exactly the apps of before.
    same: bool,
}

/// Polls `status` until every app is online under its old pid (an error
/// after 30 s).
fn readopted(
    sb: &Sandbox,
    before: &BTreeMap<String, Option<u32>>,
    n: usize,
    round: usize,
    t0: Instant,
) -> Result<Readopted> {
    let mut polls = 0usize;
    let mut first_seen = None;
    let (total, last) = loop {
        let apps = sb.status()?;
        polls += 1;
        let ok = same_and_online(&apps, before);
        if first_seen.is_none() {
            first_seen = Some(ok);
        }
        if ok == n {
            break (t0.elapsed(), apps);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let bad: Vec<String> = apps
                .iter()
                .filter(|a| {
                    a.get("status").and_then(Value::as_str) != Some("online")
                        || before.get(&s(a, "name")).copied().flatten()
                            != a.get("pid").and_then(Value::as_u64).map(|p| p as u32)
                })
                .take(5)
                .map(|a| format!("{} {} pid {}", s(a, "name"), s(a, "status"), s(a, "pid")))
                .collect();
            return Err(format!(
                "round {round}: after 30 s only {ok} of {n} apps are online with their old pid \
                 (e.g. {})",
                bad.join(", ")
            ));
        }
        sleep_ms(2);
    };
    Ok(Readopted {
        total,
        polls,
        first_seen: first_seen.unwrap_or(0),
        same: same_and_online(&last, before) == n && last.len() == n,
    })
}

/// Supervised again: one adopted app killed must come back (its new pid
/// and how long it took, or none within 5 s).
fn supervised_again(
    sb: &Sandbox,
    before: &BTreeMap<String, Option<u32>>,
) -> Result<Option<(u32, Duration)>> {
    let victim = before.keys().next().cloned().unwrap_or_default();
    let vpid = before[&victim].unwrap_or(0);
    let _ = signal::kill(vpid, Signal::SIGKILL);
    let t0 = Instant::now();
    let respawned = loop {
        let now = pids(sb)?;
        let st = sb
            .status()?
            .into_iter()
            .find(|a| s(a, "name") == victim)
            .map(|a| s(&a, "status"))
            .unwrap_or_default();
        match now.get(&victim).copied().flatten() {
            Some(p) if p != vpid && st == "online" => break Some((p, t0.elapsed())),
            _ => {}
        }
        if t0.elapsed() > Duration::from_secs(5) {
            break None;
        }
        sleep_ms(5);
    };
    match respawned {
        Some((p, dt)) => say!(
            "  supervised again: SIGKILL of adopted {victim} (pid {vpid}) -> online as pid {p} \
             after {:.1} ms (seen by polling status)",
            ms(dt)
        ),
        None => say!(
            "  NOT supervised again: SIGKILL of adopted {victim} (pid {vpid}): no new process \
             within 5 s"
        ),
    }
    // The respawned app is the new daemon's child; the others remain adopted.
    Ok(respawned)
}
