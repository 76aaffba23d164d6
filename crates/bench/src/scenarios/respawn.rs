//! `respawn`: from SIGKILL of an app to its new process.
//!
//! The app is this binary as `__probe SOCKET`: the first thing it does is read
//! CLOCK_MONOTONIC, which it sends with its pid to a socket the benchmark
//! listens on, so nothing is polled. When the kernel's process events can be
//! read (root), they give, on the same clock, the exit of the killed process,
//! the daemon's fork of the new one and its exec of the app's program. The
//! figure compared with the target is kill -> exec: the new process of the
//! app exists and runs the app's program. kill -> main() adds the dynamic
//! loading and start-up of the probe, which no supervisor controls.

use super::{sleep_ms, with_sandbox, Plan};
use crate::cnproc::{Event, ProcEvents};
use crate::report::{max, median, min, percentile, Row};
use crate::sandbox::{mono_ns, s, Bins, Result, Sandbox};
use oxidepm_sys::signal::{self, Signal};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const APP: &str = "probe";
const WARMUP: usize = 3;

/// Times of one respawn, ns after the kill.
#[derive(Debug, Clone, Copy)]
struct Chain {
    exit: u64,
    fork: u64,
    exec: u64,
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let dpid = sb.ping()?;
        let events = match ProcEvents::open() {
            Ok(ev) => Some(ev),
            Err(e) => {
                say!("  note: no kernel process events ({e}); measuring up to the probe's main() only");
                None
            }
        };
        let sock = sb.home().join("probe.sock");
        let listener = UnixListener::bind(&sock)
            .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
        let sock_arg = sock.to_string_lossy().into_owned();
        start_probe(sb, &sock_arg)?;
        let m = kill_again_and_again(sb, &listener, events.as_ref(), dpid, plan.respawns)?;
        let app = app_info(sb)?;
        say!(
            "  {} kills (after {WARMUP} warm-up); restarts counted by the daemon: {}",
            m.to_main.len(),
            s(&app, "restarts")
        );
        if !m.chains.is_empty() {
            return Ok(rows_of_chains(&m));
        }
        say_line("kill -> the app's main() runs", &m.to_main);
        let floor = exec_floor(&sb.bins.me, &listener, &sock_arg, plan.respawns)?;
        say!(
            "  floor: this benchmark forking and exec-ing the same probe itself: median {floor:.3} ms"
        );
        let med = median(&m.to_main);
        say!("  target: <= 2 ms (this figure includes the probe's exec and start-up)");
        Ok(vec![
            Row::check(
                "crash -> respawn, kill->main (median)",
                format!("{med:.3} ms"),
                "<= 2 ms",
                med <= 2.0,
            ),
            Row::info(
                "crash -> respawn, kill->main (p95)",
                format!("{:.3} ms", percentile(&m.to_main, 95.0)),
            ),
            Row::info(
                "  floor: fork+exec+start of the probe",
                format!("{floor:.3} ms"),
            ),
        ])
    })
}

/// The probe app defined: this binary as `__probe SOCKET`, restarted at
/// once, always.
fn start_probe(sb: &Sandbox, sock_arg: &str) -> Result<()> {
    let me = sb.bins.me.to_string_lossy().into_owned();
    sb.run(&[
        "start",
        "--name",
        APP,
        "--restart",
        "always",
        "--restart-delay",
        "0",
        "--min-uptime",
        "0",
        // Every respawn here is a crash in quick succession: without
        // room, the start limit would rightly make the app errored.
        "--max-restarts",
        "100000",
        "--",
        &me,
        "__probe",
        sock_arg,
    ])?;
    Ok(())
}

/// What the kills measured (the warm-up ones left out).
struct Measured {
    /// Kill to the new probe's main(), ms.
    to_main: Vec<f64>,
    /// The kernel's times of each respawn, when its events can be read.
    chains: Vec<Chain>,
    /// Kills whose fork/exec events did not all arrive.
    missing_events: usize,
}

/// SIGKILLs the probe `WARMUP + respawns` times, each time waiting for
/// its new process to report and `status` to show it.
fn kill_again_and_again(
    sb: &Sandbox,
    listener: &UnixListener,
    events: Option<&ProcEvents>,
    dpid: u32,
    respawns: usize,
) -> Result<Measured> {
    let (mut current, _) = next_probe(listener)?;
    wait_status_pid(sb, current)?;
    let mut m = Measured {
        to_main: Vec::with_capacity(respawns),
        chains: Vec::with_capacity(respawns),
        missing_events: 0,
    };
    for i in 0..WARMUP + respawns {
        let pid = status_pid(sb)?;
        if pid != Some(current) {
            return Err(format!(
                "status shows pid {pid:?} for {APP}, its process is {current}"
            ));
        }
        // Let the previous run's log shim finish and the daemon go idle.
        sleep_ms(20);
        if let Some(ev) = events {
            ev.drain().map_err(|e| format!("process events: {e}"))?;
        }
        let t0 = mono_ns();
        if let Err(e) = signal::kill(current, Signal::SIGKILL) {
            return Err(format!("cannot kill {current}: {e}"));
        }
        let (new_pid, started) = next_probe(listener)
            .map_err(|e| format!("after SIGKILL #{} of {APP} (pid {current}): {e}", i + 1))?;
        if new_pid == current {
            return Err(format!("the probe reported the killed pid {new_pid} again"));
        }
        let chain = match events {
            Some(ev) => chain(ev, dpid, current, new_pid, t0)?,
            None => None,
        };
        if i >= WARMUP {
            m.to_main.push(started.saturating_sub(t0) as f64 / 1e6);
            match chain {
                Some(c) => m.chains.push(c),
                None if events.is_some() => m.missing_events += 1,
                None => {}
            }
        }
        current = new_pid;
        wait_status_pid(sb, current)?;
    }
    Ok(m)
}

/// One figure's median, p95, min and max, said.
fn say_line(what: &str, xs: &[f64]) {
    say!(
        "  {what:<38} median {:>6.3} ms   p95 {:>6.3} ms   min {:>6.3} ms   max {:>6.3} ms",
        median(xs),
        percentile(xs, 95.0),
        min(xs),
        max(xs)
    )
}

/// The rows when the kernel's events gave each respawn's steps: kill ->
/// exec is judged.
fn rows_of_chains(m: &Measured) -> Vec<Row> {
    let ms_of =
        |f: fn(&Chain) -> u64| -> Vec<f64> { m.chains.iter().map(|c| f(c) as f64 / 1e6).collect() };
    let (exit, fork, exec) = (ms_of(|c| c.exit), ms_of(|c| c.fork), ms_of(|c| c.exec));
    let react: Vec<f64> = m
        .chains
        .iter()
        .map(|c| c.fork.saturating_sub(c.exit) as f64 / 1e6)
        .collect();
    say_line("kill -> old process exited (kernel)", &exit);
    say_line("old process exited -> daemon forks", &react);
    say_line("kill -> daemon forks the new process", &fork);
    say_line("kill -> new process execs the app", &exec);
    say_line("kill -> the app's main() runs", &m.to_main);
    if m.missing_events > 0 {
        say!(
            "  note: {} kill(s) without a complete fork/exec event trail",
            m.missing_events
        );
    }
    let (med, p95) = (median(&exec), percentile(&exec, 95.0));
    say!("  target: kill -> exec <= 2 ms");
    vec![
        Row::check(
            "crash -> respawn, kill->exec (median)",
            format!("{med:.3} ms"),
            "<= 2 ms",
            med <= 2.0,
        ),
        Row::info("crash -> respawn, kill->exec (p95)", format!("{p95:.3} ms")),
        Row::info(
            "crash -> respawn, exit->fork (median)",
            format!("{:.3} ms", median(&react)),
        ),
        Row::info(
            "crash -> respawn, kill->main (median)",
            format!("{:.3} ms", median(&m.to_main)),
        ),
    ]
}

/// Reads the kernel's events for one respawn: the exit of `old`, the daemon's
/// fork of `new` and the exec in `new`; times relative to `t0`.
fn chain(ev: &ProcEvents, daemon: u32, old: u32, new: u32, t0: u64) -> Result<Option<Chain>> {
    let (mut exit, mut fork, mut exec) = (None, None, None);
    let deadline = Instant::now() + Duration::from_millis(500);
    while exit.is_none() || fork.is_none() || exec.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(e) = ev.next(left).map_err(|e| format!("process events: {e}"))? else {
            return Ok(None);
        };
        match e {
            Event::Exit { ts, pid, tgid } if pid == old && tgid == old => exit = Some(ts),
            Event::Fork {
                ts,
                parent,
                child_pid,
                child_tgid,
            } if parent == daemon && child_pid == new && child_tgid == new => fork = Some(ts),
            Event::Exec { ts, tgid } if tgid == new && exec.is_none() => exec = Some(ts),
            _ => {}
        }
    }
    let rel = |t: Option<u64>| t.unwrap_or(0).saturating_sub(t0);
    Ok(Some(Chain {
        exit: rel(exit),
        fork: rel(fork),
        exec: rel(exec),
    }))
}

/// Median time from this process forking the probe (in a new session, as
/// the daemon does) to the probe's `main`: what any supervisor must pay.
fn exec_floor(me: &Path, listener: &UnixListener, sock: &str, runs: usize) -> Result<f64> {
    let mut t = Vec::with_capacity(runs);
    for _ in 0..WARMUP + runs {
        let mut cmd = Command::new(me);
        cmd.args(["__probe", sock])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        oxidepm_sys::exec::own_session(&mut cmd);
        let t0 = mono_ns();
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run the probe: {e}"))?;
        let got = next_probe(listener);
        let _ = child.kill();
        let _ = child.wait();
        let (_, started) = got?;
        t.push(started.saturating_sub(t0) as f64 / 1e6);
        sleep_ms(5);
    }
    Ok(median(&t[WARMUP..]))
}

/// Waits (5 s at most) for the next probe to report; its pid and start time.
fn next_probe(listener: &UnixListener) -> Result<(u32, u64)> {
    if !matches!(
        oxidepm_sys::poll::readable(listener, Duration::from_secs(5)),
        Ok(true)
    ) {
        return Err("no new process of the app reported within 5 s".into());
    }
    let (stream, _) = listener
        .accept()
        .map_err(|e| format!("accept on the probe socket: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("reading the probe's report: {e}"))?;
    let mut it = line.split_whitespace().map(str::parse::<u64>);
    match (it.next(), it.next()) {
        (Some(Ok(pid)), Some(Ok(ns))) => Ok((pid as u32, ns)),
        _ => Err(format!("bad probe report {line:?}")),
    }
}

fn app_info(sb: &Sandbox) -> Result<Value> {
    sb.status()?
        .into_iter()
        .find(|a| a.get("name").and_then(Value::as_str) == Some(APP))
        .ok_or_else(|| format!("{APP} is not in `oxidepm status`"))
}

fn status_pid(sb: &Sandbox) -> Result<Option<u32>> {
    Ok(app_info(sb)?
        .get("pid")
        .and_then(Value::as_u64)
        .map(|p| p as u32))
}

/// Waits until `status` reports `pid` for the app (the daemon may record the
/// new pid a moment after the process runs).
fn wait_status_pid(sb: &Sandbox, pid: u32) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let now = status_pid(sb)?;
        if now == Some(pid) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(2) {
            return Err(format!(
                "`oxidepm status` shows pid {now:?} for {APP} 2 s after its process {pid} started"
            ));
        }
        sleep_ms(2);
    }
}
