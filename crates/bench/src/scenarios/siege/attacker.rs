//! The attackers of `siege`, each a separate process (the benchmark binary
//! run as `__hold` or `__refuse`), so that the daemon sees them as peers
//! other than the benchmark's own measuring clients.
//!
//! * `oxidepm-bench __hold SOCKET COUNT BLANK` opens COUNT connections and
//!   keeps them open: every second it re-opens those the daemon closed and,
//!   with BLANK = 1, writes a blank line on each (which is not a request, so
//!   it should not count as activity). After each round it prints
//!   `held=<open a second after the round's connects> refused=<closed by
//!   the daemon meanwhile> failed=<connect errors> round=<n>` on stdout.
//!   (A connection still waiting in the listen backlog counts as held: the
//!   benchmark counts the daemon's own descriptors for that.)
//! * `oxidepm-bench __refuse SOCKET TOTAL CONNS TARGET CLAIM` sends TOTAL
//!   `stop TARGET` requests claiming CLAIM over CONNS connections, 16 in
//!   flight on each, as fast as they are answered, then prints
//!   `sent=<n> refused=<n> ok=<n> other=<n> reconnects=<n> secs=<s>`.
//! * `oxidepm-bench __webhook ADDR IDLE SLOW` holds idle and slow-header
//!   TCP connections to the bridge's webhook, as `__hold` does.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Requests in flight per connection of `__refuse`.
const WINDOW: usize = 16;

/// `__hold SOCKET COUNT BLANK`: holds connections until killed.
pub fn hold(args: &[String]) -> ExitCode {
    let (Some(sock), Some(Ok(count)), Some(blank)) = (
        args.first(),
        args.get(1).map(|a| a.parse::<usize>()),
        args.get(2),
    ) else {
        eprintln!("usage: oxidepm-bench __hold SOCKET COUNT BLANK(0|1)");
        return ExitCode::FAILURE;
    };
    let blank = blank == "1";
    let mut conns: Vec<Option<UnixStream>> = (0..count).map(|_| None).collect();
    let mut round = 0u64;
    loop {
        round += 1;
        let mut failed = 0usize;
        for slot in conns.iter_mut().filter(|c| c.is_none()) {
            match UnixStream::connect(sock).and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            }) {
                Ok(s) => *slot = Some(s),
                Err(_) => failed += 1,
            }
        }
        for step in 0..5 {
            std::thread::sleep(Duration::from_millis(200));
            if blank && step == 4 {
                for s in conns.iter_mut().flatten() {
                    let _ = s.write(b"\n");
                }
            }
        }
        // What the daemon let stay for a second.
        let refused = drop_closed(&mut conns);
        if !report(&conns, refused, failed, round) {
            return ExitCode::SUCCESS;
        }
    }
}

/// Forgets the connections the peer closed; how many.
fn drop_closed<S: Read>(conns: &mut [Option<S>]) -> usize {
    let mut n = 0;
    for slot in conns.iter_mut() {
        if slot.as_mut().is_some_and(closed) {
            n += 1;
            *slot = None;
        }
    }
    n
}

/// Prints a round's `held= refused= failed= round=` line; false when the
/// benchmark is gone.
fn report<S>(conns: &[Option<S>], refused: usize, failed: usize, round: u64) -> bool {
    let held = conns.iter().filter(|c| c.is_some()).count();
    let mut out = std::io::stdout();
    writeln!(
        out,
        "held={held} refused={refused} failed={failed} round={round}"
    )
    .and_then(|()| out.flush())
    .is_ok()
}

/// The peer closed the non-blocking `s` (end of stream or an error);
/// whatever it sent before (an error line, a 408) is discarded.
fn closed(s: &mut impl Read) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// What one `__refuse` connection saw.
#[derive(Default, Clone, Copy)]
struct Tally {
    sent: u64,
    refused: u64,
    ok: u64,
    other: u64,
    reconnects: u64,
}

/// `__refuse SOCKET TOTAL CONNS TARGET CLAIM`: the refusal flood.
pub fn refuse(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let sock = args.first()?.clone();
        let total: u64 = args.get(1)?.parse().ok()?;
        let conns: u64 = args.get(2)?.parse().ok().filter(|&n| n > 0)?;
        Some((
            sock,
            total,
            conns,
            args.get(3)?.clone(),
            args.get(4)?.clone(),
        ))
    })();
    let Some((sock, total, conns, target, claim)) = parsed else {
        eprintln!("usage: oxidepm-bench __refuse SOCKET TOTAL CONNS TARGET CLAIM");
        return ExitCode::FAILURE;
    };
    let t0 = Instant::now();
    let threads: Vec<_> = (0..conns)
        .map(|i| {
            let n = total / conns + u64::from(i < total % conns);
            let (sock, target, claim) = (sock.clone(), target.clone(), claim.clone());
            std::thread::spawn(move || flood(&sock, n, &target, &claim))
        })
        .collect();
    let mut sum = Tally::default();
    for t in threads {
        match t.join() {
            Ok(Ok(t)) => {
                sum.sent += t.sent;
                sum.refused += t.refused;
                sum.ok += t.ok;
                sum.other += t.other;
                sum.reconnects += t.reconnects;
            }
            Ok(Err(e)) => {
                eprintln!("__refuse: {e}");
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    println!(
        "sent={} refused={} ok={} other={} reconnects={} secs={:.3}",
        sum.sent,
        sum.refused,
        sum.ok,
        sum.other,
        sum.reconnects,
        t0.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// One connection of the flood: `n` requests, `WINDOW` in flight; a
/// connection the daemon closes is opened again (the unanswered requests
/// are sent again on it).
fn flood(sock: &str, n: u64, target: &str, claim: &str) -> Result<Tally, String> {
    let mut t = Tally::default();
    let mut answered = 0u64;
    let mut reconnects_in_a_row = 0;
    while answered < n {
        let mut s = UnixStream::connect(sock).map_err(|e| format!("cannot connect: {e}"))?;
        let mut buf = vec![0u8; 64 * 1024];
        let (mut filled, mut next, mut inflight) = (0usize, answered, 0usize);
        let mut out = Vec::with_capacity(WINDOW * 96);
        let lost = loop {
            if inflight < WINDOW && next < n {
                out.clear();
                while inflight < WINDOW && next < n {
                    let _ = writeln!(
                        out,
                        "{{\"id\":{next},\"claim\":\"{claim}\",\"op\":\"stop\",\"target\":\"{target}\"}}"
                    );
                    next += 1;
                    inflight += 1;
                    t.sent += 1;
                }
                if s.write_all(&out).is_err() {
                    break true;
                }
            }
            if inflight == 0 {
                break false;
            }
            let got = match s.read(&mut buf[filled..]) {
                Ok(0) | Err(_) => break true,
                Ok(k) => k,
            };
            filled += got;
            let mut start = 0;
            while let Some(off) = buf[start..filled].iter().position(|&b| b == b'\n') {
                let line = &buf[start..start + off];
                if contains(line, b"\"ok\":true") {
                    t.ok += 1;
                } else if contains(line, b"E_PROTECTED") || contains(line, b"E_POLICY_DENIED") {
                    t.refused += 1;
                } else {
                    t.other += 1;
                }
                answered += 1;
                inflight -= 1;
                reconnects_in_a_row = 0;
                start += off + 1;
            }
            buf.copy_within(start..filled, 0);
            filled -= start;
            if filled == buf.len() {
                return Err("a reply line longer than 64 KiB".into());
            }
        };
        if lost {
            t.reconnects += 1;
            reconnects_in_a_row += 1;
            if reconnects_in_a_row > 100 {
                return Err(format!(
                    "the daemon closed 100 connections in a row without an answer \
                     ({answered} of {n} answered)"
                ));
            }
        }
    }
    Ok(t)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// An attacker process started by the benchmark; SIGKILLed and reaped on drop.
pub struct Attacker {
    child: std::process::Child,
    last: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Attacker {
    /// Starts `me ROLE ARGS...` with its stdout read line by line.
    pub fn start(me: &std::path::Path, role: &str, args: &[&str]) -> Result<Attacker, String> {
        use std::io::BufRead;
        let mut child = std::process::Command::new(me)
            .arg(role)
            .args(args)
            .env_remove("OXIDEPM_ACTOR")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the attacker {role}: {e}"))?;
        let stdout = child.stdout.take().ok_or("the attacker has no stdout")?;
        let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let l = last.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut g) = l.lock() {
                    *g = line;
                }
            }
        });
        Ok(Attacker {
            child,
            last,
            reader: Some(reader),
        })
    }

    /// The pid of the attacker.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last line it printed (empty before the first).
    pub fn last_line(&self) -> String {
        self.last.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// A `key=<number>` field of its last line.
    pub fn field(&self, key: &str) -> Option<f64> {
        field(&self.last_line(), key)
    }

    /// Waits until a `__hold` attacker has finished `rounds` rounds.
    pub fn wait_rounds(&mut self, rounds: u64, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while self.field("round").unwrap_or(0.0) < rounds as f64 {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("the attacker ended early ({st})"));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the attacker did not finish {rounds} round(s) in {timeout:?} (last: {:?})",
                    self.last_line()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Whether the process has exited (a `__refuse` attacker when done).
    pub fn finished(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit; its exit status and last line.
    pub fn wait(mut self) -> Result<String, String> {
        let st = self.child.wait().map_err(|e| e.to_string())?;
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if !st.success() {
            return Err(format!("the attacker failed ({st}): {}", self.last_line()));
        }
        Ok(self.last_line())
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// A `key=<number>` field of a `k=v k=v` line.
pub fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Source addresses the webhook attacker spreads its connections over
/// (127.0.1.1 and up), as a distributed attacker would, so that the
/// listener's cap per address does not stop it before its total cap.
const SOURCES: u8 = 100;

/// `__webhook ADDR IDLE SLOW`: IDLE connections that send nothing and SLOW
/// ones that send a request line and then a header line every 200 ms, from
/// many loopback addresses; re-opened every second when closed, until
/// killed. Prints the same `held= refused= failed= round=` lines as `__hold`.
pub fn webhook(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let addr: std::net::SocketAddr = args.first()?.parse().ok()?;
        Some((addr, args.get(1)?.parse().ok()?, args.get(2)?.parse().ok()?))
    })();
    let Some((addr, idle, slow)): Option<(std::net::SocketAddr, usize, usize)> = parsed else {
        eprintln!("usage: oxidepm-bench __webhook ADDR IDLE SLOW");
        return ExitCode::FAILURE;
    };
    let mut conns: Vec<Option<std::net::TcpStream>> = (0..idle + slow).map(|_| None).collect();
    let mut round = 0u64;
    loop {
        round += 1;
        let mut failed = 0usize;
        for (i, slot) in conns.iter_mut().enumerate() {
            if slot.is_none() {
                match tcp_from(i, addr) {
                    Ok(mut s) => {
                        if i >= idle {
                            let _ = s.write(b"POST /in/webhook HTTP/1.1\r\n");
                        }
                        *slot = Some(s);
                    }
                    Err(_) => failed += 1,
                }
            }
        }
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(200));
            for s in conns.iter_mut().skip(idle).flatten() {
                let _ = s.write(b"X-Slow: 1\r\n");
            }
        }
        let refused = drop_closed(&mut conns);
        if !report(&conns, refused, failed, round) {
            return ExitCode::SUCCESS;
        }
    }
}

/// A non-blocking TCP connection to `to` from 127.0.1.<1 + i % SOURCES>.
fn tcp_from(i: usize, to: std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let from = std::net::SocketAddr::from(([127, 0, 1, 1 + (i % SOURCES as usize) as u8], 0));
    s.bind(&from.into())?;
    s.connect_timeout(&to.into(), Duration::from_millis(500))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn fields_of_an_attacker_line() {
        let l = "held=32 refused=2968 failed=0 round=4";
        assert_eq!(field(l, "held"), Some(32.0));
        assert_eq!(field(l, "round"), Some(4.0));
        assert_eq!(field(l, "re"), None);
        assert_eq!(field("secs=0.163", "secs"), Some(0.163));
        assert_eq!(field("", "held"), None);
    }
}
