//! The lane proxy under a stalled-connections attack, with the default
//! limits: three attacking agents each open their lane's 16 connections
//! (and 8 more, which are refused), send the start of an XADD whose value
//! is declared 1 MB long and 900 kB of it, and stall. Meanwhile another
//! agent makes round trips (PING) through its own lane.
//!
//! Measured: the proxy's peak RSS (VmHWM: the proxy has done nothing else
//! in this home) against its idle RSS plus the three lanes' buffer budgets
//! (4 MiB each) and 8 MiB for everything else; the other agent's round
//! trip, median and p99, against idle (DESIGN: within 2×), while the
//! attack's commands stall and, for information, while its data arrives
//! (when the attacker's own threads take the CPU too); and that the
//! command deadline closed every stalled command.

use super::{pid_of, Conn, Reply};
use crate::procfs;
use crate::report::{median, mib, percentile, Row};
use crate::sandbox::{Bins, Result, Sandbox};
use crate::scenarios::{sleep_ms, with_sandbox, Plan};
use oxidepm_lanes::proxy_config::agent_socket;
use oxidepm_lanes::AgentName;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const VICTIM: &str = "bench";
const ATTACKERS: [&str; 3] = ["m1", "m2", "m3"];
/// The default `max_connections`, and the attempts past it.
const HELD: usize = 16;
const REFUSED: usize = 8;
/// The default `lane_buffer`.
const LANE_BUFFER: u64 = 4 << 20;
/// What the proxy may need besides the lanes' budgets: a task, a socket
/// pair and small buffers per connection, the runtime's own.
const SLACK: u64 = 8 << 20;
/// The start of an XADD whose value is declared 1,000,000 bytes long (it
/// is never completed, so whose outbox it names does not matter).
const HALF_XADD: &[u8] =
    b"*5\r\n$4\r\nXADD\r\n$17\r\nm1:webhook:outbox\r\n$1\r\n*\r\n$1\r\nv\r\n$1000000\r\n";
/// Bytes of the value each stalled connection sends.
const SENT: usize = 900_000;

fn lane(home: &Path, agent: &str) -> Result<PathBuf> {
    let name: AgentName = agent.parse().map_err(|e| format!("{e}"))?;
    Ok(agent_socket(&home.join("lanes"), &name))
}

/// `n` round trips (PING) on `c`, in milliseconds each.
fn round_trips(c: &mut Conn, n: usize) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        match c.cmd(&["PING"])? {
            Reply::Status(s) if s == "PONG" => {}
            other => return Err(format!("PING through the proxy: {other:?}")),
        }
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(out)
}

/// A connection the proxy serves (checked with a PING): one that arrives
/// while the daemon's own check of the socket is still being closed may be
/// refused, and is tried again.
fn served(socket: &Path) -> Result<UnixStream> {
    for _ in 0..500 {
        let mut c = Conn::open(socket)?;
        match c.cmd(&["PING"])? {
            Reply::Status(s) if s == "PONG" => return Ok(c.w),
            Reply::Error(e) if e.starts_with("OXIDEPM connections") => sleep_ms(10),
            other => return Err(format!("PING on {}: {other:?}", socket.display())),
        }
    }
    Err(format!("{} keeps refusing connections", socket.display()))
}

/// One attacking connection: the half command, sent from a thread (which
/// blocks while the proxy does not read), and the socket to read the
/// proxy's last word from.
fn stall(socket: &Path) -> Result<UnixStream> {
    let s = UnixStream::connect(socket)
        .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    stall_on(s)
}

/// Sends the half command on `s`, from a thread of its own.
fn stall_on(s: UnixStream) -> Result<UnixStream> {
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        let mut data = HALF_XADD.to_vec();
        data.resize(HALF_XADD.len() + SENT, b'x');
        // Ends when all is sent or when the proxy closes the connection.
        let _ = w.write_all(&data);
    });
    Ok(s)
}

/// What the proxy said before closing `s` (a reset ends it too: the proxy
/// leaves the rest of the command unread).
fn last_words(mut s: UnixStream, patience: Duration) -> Vec<u8> {
    let _ = s.set_read_timeout(Some(patience));
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok(n) = s.read(&mut b) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
    }
    out
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let trips = if plan.quick { 500 } else { 2000 };
    with_sandbox(bins, |sb| {
        let victim = start_agents(sb)?;
        let home = sb.home().to_path_buf();
        let pid = pid_of(sb, "oxidepm-lanes")?.ok_or("the proxy oxidepm-lanes has no pid")?;
        let rss = |key: &str| {
            procfs::status_bytes(pid, key).ok_or(format!("no {key} for the proxy (pid {pid})"))
        };
        let mut c = Conn::open(&victim)?;
        round_trips(&mut c, 100)?;
        let idle_rss = rss("VmRSS")?;
        let idle = round_trips(&mut c, trips)?;
        let (attack, stalled, refused) = launch(&home)?;
        // While the attack's data pours in (the attacker's own threads
        // compete for the CPU), then while its commands stall (the proxy
        // holds what it read; the deadline is 10 s away).
        let during = round_trips(&mut c, trips)?;
        sleep_ms(1000);
        let stalling = round_trips(&mut c, trips)?;
        let closed = closed_by_deadline(stalled);
        let ended = attack.elapsed();
        let turned_away = refused
            .into_iter()
            .map(|s| last_words(s, Duration::from_secs(5)))
            .filter(|w| w.starts_with(b"-OXIDEPM connections"))
            .count();
        let peak = rss("VmHWM")?;
        let after = round_trips(&mut c, 100)?;
        Ok(report(&Figures {
            trips,
            idle_rss,
            peak,
            idle,
            during,
            stalling,
            after,
            closed,
            turned_away,
            ended,
        }))
    })
}

/// The victim and the attackers defined as agents; the victim's lane,
/// once it is reachable.
fn start_agents(sb: &mut Sandbox) -> Result<PathBuf> {
    // The agents run as the benchmark's uid, which a root daemon accepts
    // only when told that agents may share one.
    std::fs::create_dir_all(sb.home())
        .and_then(|()| std::fs::write(sb.home().join("daemon.toml"), "agents_share_uid = true\n"))
        .map_err(|e| format!("cannot write daemon.toml: {e}"))?;
    sb.ping()?;
    for a in std::iter::once(VICTIM).chain(ATTACKERS) {
        sb.run(&[
            "start", "--kind", "agent", "--name", a, "--", "sleep", "100000",
        ])?;
    }
    let victim = lane(sb.home(), VICTIM)?;
    let t0 = Instant::now();
    while UnixStream::connect(&victim).is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(format!("{} not reachable after 20 s", victim.display()));
        }
        sleep_ms(20);
    }
    Ok(victim)
}

/// The attack: on each attacker's lane, `HELD` connections that each stall
/// in a half command, and `REFUSED` more past the lane's cap; when the
/// stalling began.
fn launch(home: &Path) -> Result<(Instant, Vec<UnixStream>, Vec<UnixStream>)> {
    let mut held = Vec::new();
    for a in ATTACKERS {
        let sock = lane(home, a)?;
        for _ in 0..HELD {
            held.push(served(&sock)?);
        }
    }
    let mut stalled = Vec::new();
    let mut refused = Vec::new();
    let attack = Instant::now();
    for s in held {
        stalled.push(stall_on(s)?);
    }
    for a in ATTACKERS {
        let sock = lane(home, a)?;
        for _ in 0..REFUSED {
            refused.push(stall(&sock)?);
        }
    }
    Ok((attack, stalled, refused))
}

/// How many stalled connections the proxy closed with its timeout error.
fn closed_by_deadline(stalled: Vec<UnixStream>) -> usize {
    let mut closed = 0;
    for s in stalled {
        let words = last_words(s, Duration::from_secs(60));
        if words.starts_with(b"-OXIDEPM timeout") {
            closed += 1;
        } else {
            say!(
                "  a stalled connection ended with {:?}",
                String::from_utf8_lossy(&words[..words.len().min(120)])
            );
        }
    }
    closed
}

/// What the attack run measured.
struct Figures {
    /// PINGs per round-trip sample.
    trips: usize,
    /// The proxy's RSS before the attack.
    idle_rss: u64,
    /// Its peak RSS, after.
    peak: u64,
    /// The victim's round trips before, as the attack arrives, while it
    /// stalls, and after.
    idle: Vec<f64>,
    during: Vec<f64>,
    stalling: Vec<f64>,
    after: Vec<f64>,
    /// Stalled commands closed by the deadline.
    closed: usize,
    /// Connections past the cap turned away.
    turned_away: usize,
    /// From the attack to the last stalled connection's end.
    ended: Duration,
}

/// The figures said and judged: the proxy's peak RSS within its budget,
/// the victim's p50 at most twice idle, every stalled command closed.
fn report(f: &Figures) -> Vec<Row> {
    let Figures {
        trips,
        idle_rss,
        peak,
        closed,
        turned_away,
        ended,
        ..
    } = *f;
    let budget = idle_rss + ATTACKERS.len() as u64 * LANE_BUFFER + SLACK;
    let (i50, i99) = (median(&f.idle), percentile(&f.idle, 99.0));
    let (d50, d99) = (median(&f.during), percentile(&f.during, 99.0));
    let (s50, s99) = (median(&f.stalling), percentile(&f.stalling, 99.0));
    let n = ATTACKERS.len() * HELD;
    say!(
        "  proxy RSS: idle {}, peak under attack {} (budget {}: idle + {} lanes x {} + {})",
        mib(idle_rss),
        mib(peak),
        mib(budget),
        ATTACKERS.len(),
        mib(LANE_BUFFER),
        mib(SLACK)
    );
    say!(
        "  {VICTIM}'s round trip ({trips} PINGs): idle p50 {i50:.3} ms p99 {i99:.3} ms; \
         as the attack arrives p50 {d50:.3} ms p99 {d99:.3} ms; while it stalls p50 \
         {s50:.3} ms p99 {s99:.3} ms; after p50 {:.3} ms",
        median(&f.after)
    );
    say!(
        "  {closed} of {n} stalled commands closed by the deadline after {:.1} s; \
         {turned_away} of {} connections past the cap turned away",
        ended.as_secs_f64(),
        ATTACKERS.len() * REFUSED
    );
    vec![
        Row::check(
            format!("proxy peak RSS, {n} stalled half commands on 3 lanes"),
            format!("{} (idle {})", mib(peak), mib(idle_rss)),
            &format!("<= {}", mib(budget)),
            peak <= budget,
        ),
        Row::check(
            "other agent's round trip while 48 commands stall, p50",
            format!("{s50:.3} ms (idle {i50:.3} ms)"),
            "<= 2x idle",
            s50 <= 2.0 * i50,
        ),
        Row::info(
            "other agent's round trip while 48 commands stall, p99",
            format!("{s99:.3} ms (idle {i99:.3} ms)"),
        ),
        Row::info(
            "other agent's round trip as the attack arrives, p50 / p99",
            format!("{d50:.3} / {d99:.3} ms (idle {i50:.3} / {i99:.3} ms)"),
        ),
        Row::check(
            "stalled commands closed by the deadline",
            format!("{closed} of {n}"),
            "all",
            closed == n,
        ),
    ]
}
