//! `subscribe`: the daemon's `status` round trip (on its socket, no CLI
//! process) during a crash storm, without a subscriber and then with one
//! that never reads its stream: a slow subscriber must not slow the daemon.

use super::{with_sandbox, Plan};
use crate::report::{max, median, ms, percentile, Row};
use crate::sandbox::{Bins, Result, Sandbox};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Give up on a storm after this long.
const GIVE_UP: Duration = Duration::from_secs(300);

/// One raw connection to `daemon.sock`.
fn connect(sb: &Sandbox) -> Result<UnixStream> {
    let path = sb.home().join("daemon.sock");
    let s = UnixStream::connect(&path)
        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| format!("cannot set a read timeout: {e}"))?;
    Ok(s)
}

/// Status round trips (ms) during a storm of `n` crash-looping apps, with a
/// subscriber that never reads when `slow`; and whether the storm ended.
fn storm(sb: &mut Sandbox, n: usize, slow: bool) -> Result<Vec<f64>> {
    sb.ping()?;
    // Held open, never read: its stream backs up into the daemon's queue.
    let _slow = if slow {
        let mut s = connect(sb)?;
        s.write_all(b"{\"id\":1,\"op\":\"subscribe\"}\n")
            .map_err(|e| format!("cannot subscribe: {e}"))?;
        Some(s)
    } else {
        None
    };
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[apps]]\nname = \"c{i}\"\nscript = \"/bin/sh\"\nargs = [\"-c\", \"exit 3\"]\nrestart_delay = \"0ms\"\nmax_restarts = 3\n\n"
        ));
    }
    let cfg = sb.home().join("storm.toml");
    std::fs::write(&cfg, text).map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
    let stream = connect(sb)?;
    let mut w = stream
        .try_clone()
        .map_err(|e| format!("cannot clone a socket: {e}"))?;
    let mut r = BufReader::new(stream);
    let t0 = Instant::now();
    sb.run(&["start", &cfg.to_string_lossy()])?;
    let mut times = Vec::new();
    let mut line = String::new();
    loop {
        let t = Instant::now();
        w.write_all(b"{\"id\":2,\"op\":\"status\"}\n")
            .map_err(|e| format!("cannot ask status: {e}"))?;
        line.clear();
        r.read_line(&mut line)
            .map_err(|e| format!("no status answer: {e}"))?;
        times.push(ms(t.elapsed()));
        let errored = line.matches("\"status\":\"errored\"").count();
        if errored == n {
            return Ok(times);
        }
        if t0.elapsed() > GIVE_UP {
            return Err(format!(
                "only {errored} of {n} apps errored after {GIVE_UP:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = if plan.quick { 50 } else { 200 };
    let base = with_sandbox(bins, |sb| storm(sb, n, false))?;
    let slow = with_sandbox(bins, |sb| storm(sb, n, true))?;
    let line = |t: &[f64]| (median(t), percentile(t, 99.0), max(t));
    let (b50, b99, bmax) = line(&base);
    let (s50, s99, smax) = line(&slow);
    say!(
        "  status during a {n}-app storm, no subscriber ({} runs): p50 {b50:.2} ms, p99 {b99:.2} ms, max {bmax:.2} ms",
        base.len()
    );
    say!(
        "  the same with a subscriber that never reads ({} runs): p50 {s50:.2} ms, p99 {s99:.2} ms, max {smax:.2} ms",
        slow.len()
    );
    Ok(vec![
        Row::info(
            format!("status in a {n}-app storm, no subscriber (p50 / p99)"),
            format!("{b50:.2} / {b99:.2} ms"),
        ),
        Row::info(
            format!("status in a {n}-app storm, a slow subscriber (p50 / p99)"),
            format!("{s50:.2} / {s99:.2} ms"),
        ),
    ])
}
