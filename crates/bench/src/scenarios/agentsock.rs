//! `agentsock`: requests per second on `$OXIDEPM_HOME/agent.sock`.
//!
//! 32 clients (the socket's connection limit), each a thread with its own
//! connection, send JSON request lines: one at a time (the reply is read
//! before the next request is sent), then pipelined with 16 requests in
//! flight per client; `ping` and `status` (N apps defined). Then the cost
//! of a new connection: connect + one `whoami` round trip over 2,000
//! sequential connections, against one `whoami` on an open connection; the
//! difference is what accepting a connection and deciding who is asking
//! (peer credentials, process tree) costs.

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{median, percentile, Row};
use crate::sandbox::{Bins, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const PIPELINE: usize = 16;
const NEW_CONNS: usize = 2000;

/// What one load run measured.
struct Load {
    rate: f64,
    done: u64,
    daemon_cpu: f64,
    bench_cpu: f64,
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = plan.apps;
    let span = Duration::from_secs(if plan.quick { 1 } else { 3 });
    let conns = if plan.quick { 500 } else { NEW_CONNS };
    with_sandbox(bins, |sb| {
        // The clients are threads of this one process, which agent.sock
        // would otherwise hold to its cap per peer (8 by default).
        let toml = sb.home().join("daemon.toml");
        std::fs::write(&toml, "agent_max_connections_per_peer = 32\n")
            .map_err(|e| format!("cannot write {}: {e}", toml.display()))?;
        let dpid = sb.ping()?;
        sb.start_sleepers(n, Duration::from_secs(30))?;
        let sock = sb.home().join("agent.sock");
        say!(
            "  {CLIENTS} clients on {}, {n} apps defined, {:.0} s per run",
            sock.display(),
            span.as_secs_f64()
        );

        let mut rows = Vec::new();
        for op in ["ping", "status"] {
            for window in [1, PIPELINE] {
                // Let the previous run's connections close on the daemon's side
                // (agent.sock refuses a 33rd connection).
                sleep_ms(300);
                let l = load(&sock, dpid, op, window, span)?;
                let how = if window == 1 {
                    "1 in flight ".to_string()
                } else {
                    format!("{window} in flight")
                };
                say!(
                    "  {op:<6} {how} per client: {:>9.0} req/s ({} requests); daemon CPU {:.0} % \
                     of a core, this benchmark's clients {:.0} %",
                    l.rate,
                    l.done,
                    l.daemon_cpu * 100.0,
                    l.bench_cpu * 100.0
                );
                let what = format!(
                    "agent.sock {op}, {CLIENTS} clients{}",
                    if window == 1 {
                        String::new()
                    } else {
                        format!(", {window} in flight")
                    }
                );
                if op == "ping" && window == 1 {
                    rows.push(Row::check(
                        what,
                        format!("{:.0} /s", l.rate),
                        ">= 50,000 /s",
                        l.rate >= 50_000.0,
                    ));
                } else {
                    rows.push(Row::info(
                        if op == "status" {
                            format!("{what} ({n} apps)")
                        } else {
                            what
                        },
                        format!("{:.0} /s", l.rate),
                    ));
                }
            }
        }
        say!("  target: ping, {CLIENTS} clients: >= 50,000 /s");

        sleep_ms(300);
        let (fresh, open) = identity_cost(&sock, conns)?;
        let (fm, fp) = (median(&fresh), percentile(&fresh, 95.0));
        let (om, op) = (median(&open), percentile(&open, 95.0));
        say!("  new connection + whoami ({conns} sequential): median {fm:.1} us, p95 {fp:.1} us");
        say!("  whoami on an open connection ({conns}):       median {om:.1} us, p95 {op:.1} us");
        say!(
            "  accept + identity per connection: {:.1} us (difference of the medians)",
            fm - om
        );
        rows.push(Row::info(
            "agent.sock new conn + whoami (median)",
            format!("{fm:.1} us (p95 {fp:.1})"),
        ));
        rows.push(Row::info(
            "agent.sock whoami, open conn (median)",
            format!("{om:.1} us (p95 {op:.1})"),
        ));
        rows.push(Row::info(
            "agent.sock accept + identity cost",
            format!("{:.1} us", fm - om),
        ));
        Ok(rows)
    })
}

/// This process's CPU seconds (all threads).
fn own_cpu() -> f64 {
    oxidepm_sys::rusage::own().total().as_secs_f64()
}

/// CLIENTS threads sending `op` with `window` requests in flight for `span`.
fn load(sock: &Path, dpid: u32, op: &str, window: usize, span: Duration) -> Result<Load> {
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let stop = Arc::new(AtomicBool::new(false));
    // Connect everyone first: a refused connection is an error, not a slow client.
    let mut streams = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let s = UnixStream::connect(sock)
            .map_err(|e| format!("client {i}: cannot connect to {}: {e}", sock.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(15)))
            .map_err(|e| e.to_string())?;
        streams.push(s);
    }
    let mut threads = Vec::with_capacity(CLIENTS);
    for (i, s) in streams.into_iter().enumerate() {
        let (start, stop, op) = (start.clone(), stop.clone(), op.to_string());
        threads.push(std::thread::spawn(move || {
            start.wait();
            client(s, &op, window, &stop).map_err(|e| format!("client {i}: {e}"))
        }));
    }
    let tck = procfs::ticks_per_second();
    let d0 = procfs::stat(dpid).ok_or("the daemon is gone")?;
    let b0 = own_cpu();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(span);
    stop.store(true, Ordering::Relaxed);
    let mut done = 0u64;
    let mut errors = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(k)) => done += k,
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("a client thread panicked".into()),
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let d1 = procfs::stat(dpid).ok_or("the daemon is gone")?;
    let b1 = own_cpu();
    if !errors.is_empty() {
        return Err(format!(
            "{op}, {window} in flight: {} of {CLIENTS} clients failed: {}",
            errors.len(),
            errors[..errors.len().min(3)].join("; ")
        ));
    }
    Ok(Load {
        rate: done as f64 / wall,
        done,
        daemon_cpu: (d1.utime + d1.stime - d0.utime - d0.stime) as f64 / tck / wall,
        bench_cpu: (b1 - b0) / wall,
    })
}

/// Appends `{"id":<id>,"op":"<op>"}\n`.
fn request(buf: &mut Vec<u8>, id: u64, op: &str) {
    let _ = writeln!(buf, "{{\"id\":{id},\"op\":\"{op}\"}}");
}

/// One client: keeps `window` requests in flight until `stop`, then drains;
/// checks that every reply is the successful answer to the next id.
fn client(mut s: UnixStream, op: &str, window: usize, stop: &AtomicBool) -> Result<u64> {
    let mut out = Vec::with_capacity(window * 32);
    let mut buf = vec![0u8; 256 * 1024];
    let (mut filled, mut next_id, mut expect, mut inflight) = (0usize, 1u64, 1u64, 0usize);
    let mut prefix = Vec::with_capacity(32);
    let mut done = 0u64;
    loop {
        if !stop.load(Ordering::Relaxed) && inflight < window {
            out.clear();
            while inflight < window {
                request(&mut out, next_id, op);
                next_id += 1;
                inflight += 1;
            }
            s.write_all(&out).map_err(|e| format!("write: {e}"))?;
        }
        if inflight == 0 {
            return Ok(done);
        }
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let got = s
            .read(&mut buf[filled..])
            .map_err(|e| format!("read: {e}"))?;
        if got == 0 {
            return Err(format!(
                "the daemon closed the connection after {done} replies (connection limit?)"
            ));
        }
        let scan_from = filled;
        filled += got;
        // Complete lines.
        let mut start = 0usize;
        let mut i = scan_from;
        while let Some(off) = buf[i..filled].iter().position(|&b| b == b'\n') {
            let line = &buf[start..i + off];
            prefix.clear();
            let _ = write!(prefix, "{{\"id\":{expect},\"ok\":true");
            if !line.starts_with(&prefix) {
                return Err(format!(
                    "unexpected reply to request {expect}: {}",
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                ));
            }
            expect += 1;
            inflight -= 1;
            done += 1;
            start = i + off + 1;
            i = start;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
    }
}

/// Connect + one whoami (fresh connection each time), and whoami on one
/// open connection; microseconds each.
fn identity_cost(sock: &PathBuf, runs: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let whoami = b"{\"id\":1,\"op\":\"whoami\"}\n";
    let check = |line: &str| -> Result<()> {
        if line.starts_with("{\"id\":1,\"ok\":true") && line.contains("\"class\":\"ai\"") {
            Ok(())
        } else {
            Err(format!(
                "unexpected whoami answer on agent.sock: {}",
                line.trim()
            ))
        }
    };
    let mut fresh = Vec::with_capacity(runs);
    let mut line = String::new();
    for i in 0..runs + 20 {
        let t0 = Instant::now();
        let mut s = UnixStream::connect(sock)
            .map_err(|e| format!("new connection {i}: cannot connect: {e}"))?;
        s.write_all(whoami)
            .map_err(|e| format!("new connection {i}: {e}"))?;
        let mut r = BufReader::new(&s);
        line.clear();
        r.read_line(&mut line)
            .map_err(|e| format!("new connection {i}: {e}"))?;
        let dt = t0.elapsed();
        check(&line).map_err(|e| format!("new connection {i}: {e}"))?;
        drop(r);
        drop(s);
        if i >= 20 {
            fresh.push(dt.as_secs_f64() * 1e6);
        }
    }
    let s = UnixStream::connect(sock).map_err(|e| format!("cannot connect: {e}"))?;
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut open = Vec::with_capacity(runs);
    for i in 0..runs + 20 {
        let t0 = Instant::now();
        w.write_all(whoami).map_err(|e| e.to_string())?;
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let dt = t0.elapsed();
        check(&line)?;
        if i >= 20 {
            open.push(dt.as_secs_f64() * 1e6);
        }
    }
    Ok((fresh, open))
}
