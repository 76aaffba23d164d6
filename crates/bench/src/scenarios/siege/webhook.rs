//! Attack 4 of `siege`: idle and slow-header TCP connections to the
//! webhook of the bridge the daemon runs (lanes with the webhook source and
//! one agent), from 100 loopback addresses; a genuine sender's POSTs
//! meanwhile, each on a fresh connection from 127.0.0.1.

use super::attacker::Attacker;
use super::probe::{self, Samples};
use super::table::{self, Lat, Mem};
use super::{before, peak, with_sandbox, Plan, DAEMON_BUDGET};
use crate::report::Row;
use crate::sandbox::{Bins, Result, Sandbox};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The bridge's memory budget under the attack (as in the `bridge` scenario).
const BRIDGE_BUDGET: u64 = 32 << 20;
/// Idle connections of the attack.
const IDLE: usize = 300;
/// Slow-header connections of the attack.
const SLOW: usize = 300;
/// The agent the genuine messages are routed to.
const AGENT: &str = "a0";

/// Attack 4; skipped (no rows) when redis-server is not on PATH.
pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    if !on_path("redis-server") {
        say!("  skipped: redis-server is not on PATH, so lanes cannot run (Debian: apt-get install redis-server)");
        return Ok(Vec::new());
    }
    let (n, pace) = super::sizes(plan);
    with_sandbox(bins, |sb| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        let toml = sb.home().join("daemon.toml");
        std::fs::write(
            &toml,
            format!(
                "agents_share_uid = true\n[lanes]\nsources = [\"webhook\"]\n\n\
                 [[lanes.routes]]\nsource = \"webhook\"\nchannel = \"c0\"\nagent = \"{AGENT}\"\n\n\
                 [lanes.webhook]\nlisten = \"127.0.0.1:{port}\"\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", toml.display()))?;
        let dpid = sb.ping()?;
        sb.run(&[
            "start", "--kind", "agent", "--name", AGENT, "--", "sleep", "100000",
        ])?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let bpid = wait_bridge(sb, addr)?;
        let token = std::fs::read_to_string(sb.home().join("secrets/webhook_token"))
            .map_err(|e| format!("cannot read the webhook token: {e}"))?;
        let token = token.trim();
        let idle = posts(addr, token, n, pace);
        if idle.ms.is_empty() {
            return Err(format!(
                "no genuine POST was answered before the attack: {:?}",
                idle.first_error
            ));
        }
        let (drss, _) = before(dpid, "daemon")?;
        let (brss, _) = before(bpid, "bridge")?;
        let mut a = Attacker::start(
            &bins.me,
            "__webhook",
            &[&addr.to_string(), &IDLE.to_string(), &SLOW.to_string()],
        )?;
        a.wait_rounds(1, Duration::from_secs(120))?;
        let under = posts(addr, token, n, pace);
        a.wait_rounds(
            a.field("round").unwrap_or(1.0) as u64 + 1,
            Duration::from_secs(60),
        )?;
        let (dhwm, bhwm) = (peak(dpid, "daemon")?, peak(bpid, "bridge")?);
        say!(
            "  attacker (pid {}): {IDLE} idle + {SLOW} slow-header connections from 100 addresses, re-opened every second; last round: {}",
            a.pid(),
            a.last_line()
        );
        drop(a);
        Ok(table::report(
            "webhook",
            &[
                Mem {
                    process: "bridge",
                    idle: brss,
                    peak: bhwm,
                    budget: BRIDGE_BUDGET,
                },
                Mem {
                    process: "daemon",
                    idle: drss,
                    peak: dhwm,
                    budget: DAEMON_BUDGET,
                },
            ],
            &[Lat {
                client: "genuine webhook POST",
                idle,
                under,
            }],
        ))
    })
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Waits for the bridge app to be online and its webhook to accept; its pid.
fn wait_bridge(sb: &Sandbox, addr: SocketAddr) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let apps = sb.status()?;
        let bridge = apps.iter().find(|a| {
            a.get("name").and_then(|n| n.as_str()) == Some("oxidepm-bridge")
                && a.get("status").and_then(|s| s.as_str()) == Some("online")
        });
        if let Some(pid) = bridge.and_then(|b| b.get("pid")?.as_u64()) {
            if TcpStream::connect(addr).is_ok() {
                return Ok(pid as u32);
            }
        }
        if Instant::now() > deadline {
            let lanes = sb.run(&["lanes"]).unwrap_or_else(|e| e);
            return Err(format!(
                "the bridge's webhook did not come up on {addr} within 60 s; `oxidepm lanes` says:\n{lanes}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One genuine POST on a fresh connection; the time to its 202.
fn post(addr: SocketAddr, token: &str, i: usize) -> std::result::Result<Duration, String> {
    let body =
        format!(r#"{{"channel":"c0","sender":"genuine","text":"message {i}","id":"g-{i}"}}"#);
    let req = format!(
        "POST /in/webhook HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // The status line is enough; the rest is read so the close is clean.
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => answer.extend_from_slice(&buf[..k]),
            Err(e) if answer.is_empty() => return Err(format!("read: {e}")),
            Err(_) => break,
        }
    }
    let dt = t0.elapsed();
    let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
    match head.split_whitespace().nth(1) {
        Some("202") => Ok(dt),
        Some(code) => Err(format!(
            "answered {code}: {}",
            head.lines().next().unwrap_or("")
        )),
        None => Err("closed without an answer".into()),
    }
}

/// `n` genuine POSTs, one every `pace` (or back to back when slower).
fn posts(addr: SocketAddr, token: &str, n: usize, pace: Duration) -> Samples {
    let mut out = Samples::default();
    let mut i = 0;
    let mut next = Instant::now();
    while out.tried() < n {
        probe::wait_until(next);
        next += pace;
        i += 1;
        match post(addr, token, i) {
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
