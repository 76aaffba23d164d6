//! `siege`: the daemon and its sockets under attack. Each attack runs in a
//! fresh home against a real daemon, the attacker a separate process:
//!
//! 1. `conn-flood`: one process opens 3,000 connections to daemon.sock and
//!    holds them idle, re-opening every second those the daemon closed;
//! 2. `agent-slots`: one AI process holds as many agent.sock connections as
//!    it can and writes a blank line on each every second;
//! 3. `refusals`: a client claiming `ai:x` sends 20,000 `stop` requests for a
//!    protected app over 4 connections as fast as they are answered;
//! 4. `webhook` ([`webhook`]): 300 idle and 300 slow-header TCP connections
//!    to the bridge's webhook (needs redis-server).
//!
//! For each: the shared processes' peak RSS (VmHWM, reset just before the
//! attack when the kernel allows) against a budget, and the bystanders'
//! round trips (a person's `status`, another agent's `whoami`, a genuine
//! webhook POST) idle and under the attack, against 2x their idle median.

mod attacker;
mod probe;
mod table;
mod webhook;

pub use attacker::{hold, refuse, webhook as webhook_attacker};

use super::{with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{Bins, Result, Sandbox};
use attacker::Attacker;
use std::path::Path;
use std::time::Duration;
use table::{Lat, Mem};

/// The daemon's memory budget under any attack.
const DAEMON_BUDGET: u64 = 32 << 20;
/// Connections the flood opens on daemon.sock.
const FLOOD_CONNS: usize = 3000;
/// Connections the slot holder tries to hold on agent.sock (more than the
/// socket's default cap of 32).
const AGENT_HOLD: usize = 40;
/// Connections of the refusal flood.
const REFUSAL_CONNS: usize = 4;
/// Apps defined in each home, so that `status` has something to list.
const APPS: usize = 5;
/// The protected app the refusal flood tries to stop.
const GUARDED: &str = "guarded";

/// Sizes: round trips per measurement, and their pace (spreading them over
/// 1 s, or 3 s in a full run, so that they meet several of an attacker's
/// rounds).
fn sizes(plan: &Plan) -> (usize, Duration) {
    if plan.quick {
        (50, Duration::from_millis(20))
    } else {
        (200, Duration::from_millis(15))
    }
}

/// Requests of the refusal flood.
const REFUSALS: u64 = 20_000;

/// One attack: measures it in its own home; its summary rows.
type Attack = fn(&Bins, &Plan) -> Result<Vec<Row>>;

/// Runs the four attacks, each in its own home; one failing does not stop the others.
pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    let attacks: [(&str, Attack); 4] = [
        ("conn-flood", conn_flood),
        ("agent-slots", agent_slots),
        ("refusals", refusals),
        ("webhook", webhook::run),
    ];
    for (name, attack) in attacks {
        say!("  -- attack {name} --");
        match attack(bins, plan) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                say!("  ERROR ({name}): {e}");
                rows.push(Row::failed(format!("siege {name}"), &e));
                errors.push(name);
            }
        }
    }
    if errors.is_empty() {
        Ok(rows)
    } else {
        // The rows measured so far are still shown; the scenario fails.
        for r in &rows {
            say!("  measured: {} = {}", r.what, r.measured);
        }
        Err(format!("attack(s) failed: {}", errors.join(", ")))
    }
}

/// A home with `APPS` sleeping apps (the last one protected) and its
/// daemon; the daemon's pid.
fn prepare(sb: &mut Sandbox) -> Result<u32> {
    let pid = sb.ping()?;
    let mut text = String::new();
    for i in 0..APPS {
        let name = if i + 1 == APPS {
            GUARDED.to_string()
        } else {
            format!("s{i}")
        };
        text.push_str(&format!(
            "[[apps]]\nname = \"{name}\"\nscript = \"sleep\"\nargs = [\"100000\"]\nprotected = {}\n\n",
            i + 1 == APPS
        ));
    }
    let path = sb.home().join("apps.toml");
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    sb.run(&["start", &path.to_string_lossy()])?;
    sb.wait_online(APPS, Duration::from_secs(30))?;
    Ok(pid)
}

/// Resets the peak RSS of `pid` (`/proc/<pid>/clear_refs`, "5"), so that
/// VmHWM afterwards is the peak of what follows; false when not allowed.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// VmRSS now, and whether the peak was reset.
fn before(pid: u32, what: &str) -> Result<(u64, bool)> {
    let rss = procfs::status_bytes(pid, "VmRSS").ok_or_else(|| format!("the {what} is gone"))?;
    let reset = reset_peak(pid);
    if !reset {
        say!("  (cannot reset the {what}'s peak RSS: its peak includes its start-up)");
    }
    Ok((rss, reset))
}

/// VmHWM now.
fn peak(pid: u32, what: &str) -> Result<u64> {
    procfs::status_bytes(pid, "VmHWM").ok_or_else(|| format!("the {what} is gone"))
}

/// Sockets open in `pid` (listeners, clients, its Redis and log links):
/// how many connections it really holds, whatever waits in its backlogs.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Attack 1: an idle-connection flood on daemon.sock.
fn conn_flood(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let (n, pace) = sizes(plan);
    with_sandbox(bins, |sb| {
        let dpid = prepare(sb)?;
        let sock = sb.home().join("daemon.sock");
        let idle = probe::sample(&sock, "status", n, pace, || false);
        let (rss, _) = before(dpid, "daemon")?;
        let socks0 = sockets(dpid);
        let mut a = Attacker::start(
            &bins.me,
            "__hold",
            &[&sock.to_string_lossy(), &FLOOD_CONNS.to_string(), "0"],
        )?;
        a.wait_rounds(1, Duration::from_secs(120))?;
        let socks1 = sockets(dpid);
        let under = probe::sample(&sock, "status", n, pace, || false);
        // At least one more round of re-opening ran alongside the samples.
        a.wait_rounds(
            a.field("round").unwrap_or(1.0) as u64 + 1,
            Duration::from_secs(60),
        )?;
        let hwm = peak(dpid, "daemon")?;
        say!(
            "  attacker (pid {}) tried {FLOOD_CONNS} connections on daemon.sock, re-opening closed ones every second; last round: {}",
            a.pid(),
            a.last_line()
        );
        say!("  the daemon's open sockets: {socks0} idle, {socks1} under the flood");
        drop(a);
        Ok(table::report(
            "conn-flood",
            &[Mem {
                process: "daemon",
                idle: rss,
                peak: hwm,
                budget: DAEMON_BUDGET,
            }],
            &[Lat {
                client: "person status, daemon.sock",
                idle,
                under,
            }],
        ))
    })
}

/// Attack 2: one AI process holding agent.sock slots with blank lines.
fn agent_slots(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let (n, pace) = sizes(plan);
    with_sandbox(bins, |sb| {
        let dpid = prepare(sb)?;
        let sock = sb.home().join("agent.sock");
        let person = sb.home().join("daemon.sock");
        let idle_agent = probe::sample(&sock, "whoami", n, pace, || false);
        let idle_person = probe::sample(&person, "status", n, pace, || false);
        let (rss, _) = before(dpid, "daemon")?;
        let socks0 = sockets(dpid);
        let mut a = Attacker::start(
            &bins.me,
            "__hold",
            &[&sock.to_string_lossy(), &AGENT_HOLD.to_string(), "1"],
        )?;
        a.wait_rounds(1, Duration::from_secs(60))?;
        let socks1 = sockets(dpid);
        let under_agent = probe::sample(&sock, "whoami", n, pace, || false);
        let under_person = probe::sample(&person, "status", n, pace, || false);
        a.wait_rounds(
            a.field("round").unwrap_or(1.0) as u64 + 1,
            Duration::from_secs(60),
        )?;
        let hwm = peak(dpid, "daemon")?;
        say!(
            "  attacker (pid {}) tried {AGENT_HOLD} connections on agent.sock, a blank line on each every second; last round: {}",
            a.pid(),
            a.last_line()
        );
        say!("  the daemon's open sockets: {socks0} idle, {socks1} under the attack");
        drop(a);
        Ok(table::report(
            "agent-slots",
            &[Mem {
                process: "daemon",
                idle: rss,
                peak: hwm,
                budget: DAEMON_BUDGET,
            }],
            &[
                Lat {
                    client: "other agent whoami, agent.sock",
                    idle: idle_agent,
                    under: under_agent,
                },
                Lat {
                    client: "person status, daemon.sock",
                    idle: idle_person,
                    under: under_person,
                },
            ],
        ))
    })
}

/// Bytes of the state database with its write-ahead log.
fn db_bytes(home: &Path) -> u64 {
    ["state.db", "state.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(home.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Rows of the audit table, read with the `sqlite3` command from a copy of
/// the database and its write-ahead log (the daemon holds state.db
/// exclusively).
fn audit_rows(home: &Path) -> Option<u64> {
    let copy = home.join("bench-audit-copy");
    std::fs::create_dir_all(&copy).ok()?;
    for f in ["state.db", "state.db-wal"] {
        let _ = std::fs::copy(home.join(f), copy.join(f));
    }
    let out = std::process::Command::new("sqlite3")
        .arg(copy.join("state.db"))
        .arg("SELECT count(*) FROM audit")
        .output();
    let _ = std::fs::remove_dir_all(&copy);
    String::from_utf8_lossy(&out.ok()?.stdout)
        .trim()
        .parse()
        .ok()
}

/// The pid of app `name`, from `status --json`.
fn pid_of(sb: &Sandbox, name: &str) -> Result<Option<u64>> {
    Ok(sb
        .status()?
        .iter()
        .find(|a| a.get("name").and_then(|n| n.as_str()) == Some(name))
        .and_then(|a| a.get("pid").and_then(|p| p.as_u64())))
}

/// Attack 3: a flood of refused requests from a client claiming `ai:x`.
fn refusals(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let (n, _) = sizes(plan);
    let total = REFUSALS;
    with_sandbox(bins, |sb| {
        let dpid = prepare(sb)?;
        let sock = sb.home().join("daemon.sock");
        let guarded_pid = pid_of(sb, GUARDED)?;
        let idle = probe::sample(&sock, "status", n, Duration::ZERO, || false);
        let (db0, rows0) = (db_bytes(sb.home()), audit_rows(sb.home()));
        let (rss, _) = before(dpid, "daemon")?;
        let mut a = Attacker::start(
            &bins.me,
            "__refuse",
            &[
                &sock.to_string_lossy(),
                &total.to_string(),
                &REFUSAL_CONNS.to_string(),
                GUARDED,
                "ai:x",
            ],
        )?;
        // Round trips for as long as the flood runs (at most 50x the plan).
        let under = probe::sample(&sock, "status", n * 50, Duration::ZERO, || a.finished());
        let summary = a.wait()?;
        let hwm = peak(dpid, "daemon")?;
        let (db1, rows1) = (db_bytes(sb.home()), audit_rows(sb.home()));
        say!("  attacker: {summary}");
        let refused = attacker::field(&summary, "refused").unwrap_or(0.0);
        let secs = attacker::field(&summary, "secs").unwrap_or(f64::NAN);
        say!(
            "  {refused:.0} refused in {secs:.2} s ({:.0} /s) over {REFUSAL_CONNS} connections; \
             {} person status round trips meanwhile",
            refused / secs,
            under.tried()
        );
        if under.tried() < n {
            say!("  (the flood ended before {n} round trips: fewer samples under attack)");
        }
        let after = pid_of(sb, GUARDED)?;
        if after != guarded_pid || guarded_pid.is_none() {
            return Err(format!(
                "the protected app {GUARDED} changed under the flood: pid {guarded_pid:?} -> {after:?}"
            ));
        }
        let audit = match (rows0, rows1) {
            (Some(r0), Some(r1)) => format!("{} (from {r0} to {r1})", r1 as i64 - r0 as i64),
            _ => "? (sqlite3 not found)".into(),
        };
        say!(
            "  state.db (+wal) grew by {} bytes ({} -> {}), audit rows grew by {audit}; {GUARDED} still runs, same pid",
            db1 as i64 - db0 as i64,
            mib(db0),
            mib(db1)
        );
        let mut rows = table::report(
            "refusals",
            &[Mem {
                process: "daemon",
                idle: rss,
                peak: hwm,
                budget: DAEMON_BUDGET,
            }],
            &[Lat {
                client: "person status, daemon.sock",
                idle,
                under,
            }],
        );
        rows.push(Row::info(
            format!("siege refusals: {total} refused -> state.db growth"),
            format!("{} bytes", db1 as i64 - db0 as i64),
        ));
        rows.push(Row::info(
            format!("siege refusals: {total} refused -> audit rows"),
            audit,
        ));
        Ok(rows)
    })
}
