//! `health`: the daemon's CPU and memory with N apps, each under a health
//! check every second. The TCP variant points every app's check at one
//! listener of this benchmark (which counts the connections, so the checks
//! are seen to run); the command variant runs `true` as each check.

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{s, Bins, Result, Sandbox};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;

/// Seconds of each measuring window (`--quick`: shorter).
pub(super) fn window(plan: &Plan) -> Duration {
    Duration::from_secs(if plan.quick { 5 } else { 20 })
}

/// CPU a process used during a window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cpu {
    /// utime + stime of `/proc/<pid>/stat`, seconds (clock-tick resolution).
    pub secs: f64,
    /// The sum of the threads' on-CPU time from `/proc/<pid>/task/*/schedstat`
    /// (nanosecond resolution), when no thread came or went meanwhile.
    pub sched_secs: Option<f64>,
    /// Length of the window, seconds.
    pub wall: f64,
    /// utime + stime of the process's reaped children, seconds.
    pub children: f64,
}

impl Cpu {
    /// The most precise figure: schedstat when usable, else clock ticks.
    pub fn best(&self) -> f64 {
        self.sched_secs.unwrap_or(self.secs)
    }

    /// Percent of one core.
    pub fn percent(&self) -> f64 {
        self.best() / self.wall * 100.0
    }

    /// `0.123 s = 0.62 % of one core (ticks: 0.12 s)`.
    pub fn describe(&self) -> String {
        format!(
            "{:.3} s in {:.1} s = {:.2} % of one core (utime+stime {:.2} s{})",
            self.best(),
            self.wall,
            self.percent(),
            self.secs,
            if self.sched_secs.is_some() {
                "; figure from schedstat"
            } else {
                ""
            }
        )
    }
}

/// Threads of `pid` and their on-CPU nanoseconds.
fn sched_ns(pid: u32) -> Option<Vec<(u32, u64)>> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Some(tid) = t.file_name().to_str().and_then(|x| x.parse::<u32>().ok()) else {
            continue;
        };
        let text = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        v.push((tid, text.split_whitespace().next()?.parse().ok()?));
    }
    v.sort_unstable();
    Some(v)
}

/// The on-CPU nanoseconds of all of `pid`'s threads now.
pub(super) fn sched_ns_total(pid: u32) -> Option<u64> {
    Some(sched_ns(pid)?.iter().map(|x| x.1).sum())
}

/// Measures the CPU of `pid` over `span` (sleeping meanwhile).
pub(super) fn cpu_over(pid: u32, span: Duration) -> Result<Cpu> {
    let gone = || format!("the daemon (pid {pid}) is gone");
    let tck = procfs::ticks_per_second();
    let s0 = procfs::stat(pid).ok_or_else(gone)?;
    let n0 = sched_ns(pid);
    let t0 = Instant::now();
    std::thread::sleep(span);
    let s1 = procfs::stat(pid).ok_or_else(gone)?;
    let n1 = sched_ns(pid);
    let wall = t0.elapsed().as_secs_f64();
    let sched_secs = match (n0, n1) {
        (Some(a), Some(b)) => {
            let ta: BTreeSet<u32> = a.iter().map(|x| x.0).collect();
            let tb: BTreeSet<u32> = b.iter().map(|x| x.0).collect();
            (ta == tb).then(|| {
                let sum = |v: &[(u32, u64)]| v.iter().map(|x| x.1).sum::<u64>();
                sum(&b).saturating_sub(sum(&a)) as f64 / 1e9
            })
        }
        _ => None,
    };
    Ok(Cpu {
        secs: (s1.utime + s1.stime).saturating_sub(s0.utime + s0.stime) as f64 / tck,
        sched_secs,
        wall,
        children: (s1.cutime + s1.cstime).saturating_sub(s0.cutime + s0.cstime) as f64 / tck,
    })
}

/// Counts connections to a loopback port until dropped.
struct Listener {
    port: u16,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn open() -> Result<Listener> {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                if c.is_ok() {
                    a.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Listener {
            port,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    fn count(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes `n` sleeping apps, each with the `[apps.health]` lines `check`.
fn config(sb: &Sandbox, n: usize, check: &str) -> Result<std::path::PathBuf> {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[apps]]\nname = \"h{i}\"\nscript = \"sleep\"\nargs = [\"100000\"]\n\n\
             [apps.health]\n{check}\ninterval = \"1s\"\n\n"
        ));
    }
    let path = sb.home().join("health.toml");
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Waits (15 s at most) for every app to report `healthy`.
fn wait_healthy(sb: &Sandbox, n: usize) -> Result<Duration> {
    let t0 = Instant::now();
    loop {
        let apps = sb.status()?;
        let ok = apps
            .iter()
            .filter(|a| a.get("health").and_then(Value::as_str) == Some("healthy"))
            .count();
        if ok >= n {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(15) {
            let other: Vec<String> = apps
                .iter()
                .filter(|a| a.get("health").and_then(Value::as_str) != Some("healthy"))
                .take(5)
                .map(|a| format!("{} {}/{}", s(a, "name"), s(a, "status"), s(a, "health")))
                .collect();
            return Err(format!(
                "only {ok} of {n} apps healthy after 15 s (e.g. {})",
                other.join(", ")
            ));
        }
        sleep_ms(100);
    }
}

/// Restarts counted by the daemon over all apps.
fn restarts(sb: &Sandbox) -> Result<u64> {
    Ok(sb
        .status()?
        .iter()
        .filter_map(|a| a.get("restarts").and_then(Value::as_u64))
        .sum())
}

/// One variant; its figures.
struct Figures {
    cpu: Cpu,
    rss: u64,
    checks: Option<u64>,
}

fn variant(bins: &Bins, plan: &Plan, name: &str, tcp: bool) -> Result<Figures> {
    let n = plan.apps;
    let span = window(plan);
    with_sandbox(bins, |sb| {
        let listener = if tcp { Some(Listener::open()?) } else { None };
        let check = match &listener {
            Some(l) => format!("tcp = \"127.0.0.1:{}\"", l.port),
            None => "command = [\"true\"]".to_string(),
        };
        let dpid = sb.ping()?;
        let cfg = config(sb, n, &check)?;
        sb.run(&["start", &cfg.to_string_lossy()])?;
        sb.wait_online(n, Duration::from_secs(30))?;
        let h = wait_healthy(sb, n)?;
        say!(
            "  {name}: {n} apps online, all healthy {:.1} s later; measuring {} s",
            h.as_secs_f64(),
            span.as_secs()
        );
        // Let the checks spread out and the sampler run.
        sleep_ms(1500);
        let r0 = restarts(sb)?;
        let c0 = listener.as_ref().map(Listener::count);
        let cpu = cpu_over(dpid, span)?;
        let c1 = listener.as_ref().map(Listener::count);
        let rss = procfs::status_bytes(dpid, "VmRSS").unwrap_or(0);
        let hwm = procfs::status_bytes(dpid, "VmHWM").unwrap_or(0);
        let r1 = restarts(sb)?;
        let checks = c0.zip(c1).map(|(a, b)| b - a);
        say!("  {name}: daemon CPU {}", cpu.describe());
        if !tcp {
            say!(
                "  {name}: reaped children's CPU (the `true` probes) {:.2} s",
                cpu.children
            );
        }
        if let Some(c) = checks {
            say!(
                "  {name}: {c} connections reached the listener = {:.1} checks/s (expected ~{n}/s)",
                c as f64 / cpu.wall
            );
        }
        say!(
            "  {name}: daemon VmRSS {} at the end (peak VmHWM {}); restarts meanwhile: {}",
            mib(rss),
            mib(hwm),
            r1 - r0
        );
        drop(listener);
        Ok(Figures { cpu, rss, checks })
    })
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = plan.apps;
    let tcp = variant(bins, plan, "tcp", true)?;
    let cmd = variant(bins, plan, "command", false)?;
    say!("  target: no CPU target in DESIGN.md; daemon RSS with 100 apps <= 8 MiB");
    let mut rows = vec![
        Row::info(
            format!("health tcp 1s x {n}: daemon CPU"),
            format!("{:.2} % of a core", tcp.cpu.percent()),
        ),
        Row::check(
            format!("health tcp 1s x {n}: daemon RSS"),
            mib(tcp.rss),
            "<= 8 MiB",
            tcp.rss <= 8 * MIB,
        ),
    ];
    if let Some(c) = tcp.checks {
        rows.push(Row::info(
            format!("health tcp 1s x {n}: checks seen"),
            format!("{:.1}/s", c as f64 / tcp.cpu.wall),
        ));
    }
    rows.push(Row::info(
        format!("health command 1s x {n}: daemon CPU"),
        format!(
            "{:.2} % of a core (+{:.2} s probes)",
            cmd.cpu.percent(),
            cmd.cpu.children
        ),
    ));
    rows.push(Row::check(
        format!("health command 1s x {n}: daemon RSS"),
        mib(cmd.rss),
        "<= 8 MiB",
        cmd.rss <= 8 * MIB,
    ));
    Ok(rows)
}
