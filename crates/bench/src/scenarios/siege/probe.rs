//! The measuring clients of `siege`: a person asking `status` on
//! daemon.sock, another agent asking `whoami` on agent.sock. Each sample is
//! a whole round trip on a fresh connection (connect, one request, its
//! answer), as `oxidepm status` or a one-shot agent call does it, so that
//! being let in counts as much as being answered.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long one round trip may take before it counts as failed.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Round trips of one client: the answered ones' times, and the failures.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Milliseconds of each answered round trip.
    pub ms: Vec<f64>,
    /// Round trips not answered (refused, closed, timed out, an error).
    pub failed: usize,
    /// The first failure, for the report.
    pub first_error: Option<String>,
}

impl Samples {
    /// Round trips tried.
    pub fn tried(&self) -> usize {
        self.ms.len() + self.failed
    }

    /// Answered round trips, percent of those tried.
    pub fn success_pct(&self) -> f64 {
        if self.tried() == 0 {
            return f64::NAN;
        }
        self.ms.len() as f64 * 100.0 / self.tried() as f64
    }
}

/// One request on a fresh connection; the time to its successful answer.
pub fn round_trip(sock: &Path, op: &str) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut s = UnixStream::connect(sock).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("{{\"id\":1,\"op\":\"{op}\"}}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    let dt = t0.elapsed();
    if line.is_empty() {
        return Err("the daemon closed the connection without an answer".into());
    }
    if !line.starts_with("{\"id\":1,\"ok\":true") {
        return Err(format!(
            "unexpected answer: {}",
            line.trim().chars().take(200).collect::<String>()
        ));
    }
    Ok(dt)
}

/// Round trips of `op`, one every `pace` (or back to back when they take
/// longer), until `n` were tried or `done` says to stop (checked before
/// each); a failure pauses 10 ms, as a client retrying would. Pacing
/// spreads the samples over the attacker's rounds rather than one instant.
pub fn sample(
    sock: &Path,
    op: &str,
    n: usize,
    pace: Duration,
    mut done: impl FnMut() -> bool,
) -> Samples {
    let mut out = Samples::default();
    let mut next = Instant::now();
    while out.tried() < n && !done() {
        wait_until(next);
        next += pace;
        match round_trip(sock, op) {
            Ok(d) => out.ms.push(d.as_secs_f64() * 1e3),
            Err(e) => {
                out.failed += 1;
                out.first_error.get_or_insert(e);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    out
}

/// Sleeps until `t` (returns at once when it has passed).
pub fn wait_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
