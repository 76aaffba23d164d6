//! `bridge`: the release `oxidepm-bridge` against a private redis-server
//! (unix socket, the lanes' ACL for the `bridge` user, append-only
//! `everysec` as the daemon runs it), without the daemon:
//!
//! * webhook → inbox: 8 senders, each on its own keep-alive connection,
//!   POST as fast as they are answered; every message must be in an inbox;
//! * routing latency: one message at a time, from the POST to the entry
//!   being readable in the inbox (a blocking XREAD), p50 / p99;
//! * outbox → sink: entries written to 8 agents' outboxes at once, until a
//!   local HTTP sink has been POSTed every one of them;
//! * the large-entries attack ([`attack`]): the bridge's peak RSS while one
//!   agent's outbox gets 8 entries of 32 MiB, and another agent's delivery
//!   latency meanwhile.

mod attack;
pub(super) mod http;
pub(super) mod resp;

use super::Plan;
use crate::procfs;
use crate::report::{percentile, Row};
use crate::sandbox::{Bins, Result};
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::bridge_config::{BridgeConfig, RouteConfig, WebhookConfig};
use oxidepm_lanes::stream_key::STATS_KEY;
use oxidepm_lanes::{AgentName, Secret, StreamKey};
use oxidepm_sys::signal::{self, Signal};
use resp::Resp;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const SENDERS: usize = 8;
const AGENTS: usize = 8;
const TOKEN: &str = "bench-webhook-token";
pub(super) const BRIDGE_PW: &str = "bench-bridge-pw";
pub(super) const ADMIN_PW: &str = "bench-admin-pw";

/// The source the benchmark sends through.
const SOURCE: &str = "webhook";

/// Agent `i` of the benchmark.
pub(super) fn agent(i: usize) -> AgentName {
    format!("a{i}").parse().expect("a valid agent name")
}

/// Sizes: (messages in, latency samples, outbox entries).
fn sizes(plan: &Plan) -> (usize, usize, usize) {
    if plan.quick {
        (40_000, 300, 8_000)
    } else {
        (200_000, 2_000, 40_000)
    }
}

/// Processes started here, ended on drop.
pub(super) struct Procs(pub(super) Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            // SIGTERM first, so that each can stop cleanly. The child is
            // not reaped yet, so its pid still names it.
            let _ = signal::kill(c.id(), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub(super) fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ok() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

pub(super) fn start_redis(dir: &Path, procs: &mut Procs) -> Result<PathBuf> {
    let exe = find_on_path("redis-server")
        .ok_or("redis-server is not on PATH (Debian: apt-get install redis-server)")?;
    let socket = dir.join("redis.sock");
    let acl = acl::acl_file(
        &[
            (AclUser::Bridge, Secret::new(BRIDGE_PW)),
            (AclUser::Admin, Secret::new(ADMIN_PW)),
        ],
        &[],
    );
    std::fs::write(dir.join("users.acl"), acl).map_err(|e| e.to_string())?;
    let conf = format!(
        "port 0\nunixsocket {sock}\nunixsocketperm 700\naclfile {d}/users.acl\ndir {d}\n\
         save \"\"\nappendonly yes\nappendfsync everysec\nmaxmemory-policy noeviction\n\
         daemonize no\nlogfile {d}/redis.log\n",
        sock = socket.display(),
        d = dir.display()
    );
    std::fs::write(dir.join("redis.conf"), conf).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .arg(dir.join("redis.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    procs.0.push(child);
    wait_for("redis-server", Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    })?;
    Ok(socket)
}

/// Writes `cfg` as `dir/bridge.json` and starts the bridge on it, its
/// warnings logged to `dir/bridge.log`.
pub(super) fn spawn_bridge(
    exe: &Path,
    dir: &Path,
    cfg: &BridgeConfig,
    procs: &mut Procs,
) -> Result<()> {
    let path = dir.join("bridge.json");
    let text = serde_json::to_string(cfg).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("bridge.log")).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    procs.0.push(child);
    Ok(())
}

fn start_bridge(
    exe: &Path,
    dir: &Path,
    socket: &Path,
    sink: SocketAddr,
    procs: &mut Procs,
) -> Result<SocketAddr> {
    std::fs::write(dir.join("bridge.pw"), BRIDGE_PW).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("token"), TOKEN).map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut cfg = BridgeConfig::new(socket.to_path_buf(), dir.join("bridge.pw"));
    cfg.agents = (0..AGENTS).map(agent).collect();
    cfg.sources = vec![SOURCE.into()];
    // Nobody reads the inboxes here: every message must stay to be counted.
    cfg.inbox_maxlen = 1 << 40;
    cfg.routes = (0..AGENTS)
        .map(|i| RouteConfig {
            source: SOURCE.into(),
            channel: Some(format!("c{i}")),
            guild: None,
            address: None,
            agent: agent(i),
        })
        .collect();
    let mut webhook =
        WebhookConfig::new(SocketAddr::from(([127, 0, 0, 1], port)), dir.join("token"));
    webhook
        .settings
        .deliver
        .insert("*".into(), format!("http://{sink}/out"));
    cfg.webhook = Some(webhook);
    spawn_bridge(exe, dir, &cfg, procs)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_for(
        "the bridge's webhook listener",
        Duration::from_secs(30),
        || std::net::TcpStream::connect(addr).is_ok(),
    )?;
    Ok(addr)
}

/// The message POSTed by sender `s`, number `i`.
fn message(s: usize, i: usize) -> String {
    format!(
        r#"{{"channel":"c{}","sender":"bench-{s}","text":"message {i} from sender {s}","id":"{s}-{i}"}}"#,
        s % AGENTS
    )
}

/// `n` messages over `SENDERS` keep-alive connections, each with one
/// request in flight; returns the seconds taken.
fn send_all(addr: SocketAddr, n: usize) -> Result<f64> {
    let per = n / SENDERS;
    // Requests are made before the clock starts: only sending them counts.
    let requests: Vec<Vec<Vec<u8>>> = (0..SENDERS)
        .map(|s| {
            (0..per)
                .map(|i| http::post_request(addr, "/in/webhook", TOKEN, &message(s, i)))
                .collect()
        })
        .collect();
    let t0 = Instant::now();
    http::drive(addr, requests, 202)?;
    Ok(t0.elapsed().as_secs_f64())
}

fn inbox_total(admin: &mut Resp) -> Result<i64> {
    let mut total = 0;
    for a in 0..AGENTS {
        total += admin
            .cmd(&["XLEN", &StreamKey::inbox(&agent(a), SOURCE).to_string()])?
            .int()
            .unwrap_or(0);
    }
    Ok(total)
}

/// Latency samples, in ms: POST, then a blocking XREAD from the last id
/// returns the entry.
fn latencies(addr: SocketAddr, admin: &mut Resp, samples: usize) -> Result<Vec<f64>> {
    let key = StreamKey::inbox(&agent(0), SOURCE).to_string();
    let key = key.as_str();
    let mut last = admin
        .cmd(&["XREVRANGE", key, "+", "-", "COUNT", "1"])?
        .items()
        .first()
        .and_then(|e| e.items().first().and_then(|id| id.text()))
        .unwrap_or_else(|| "0-0".into());
    let mut c = http::Client::connect(addr)?;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        admin.send(&[
            "XREAD", "COUNT", "1", "BLOCK", "10000", "STREAMS", key, &last,
        ])?;
        let t0 = Instant::now();
        c.send_post("/in/webhook", TOKEN, &message(0, i))?;
        let got = admin.read()?;
        let dt = t0.elapsed();
        let id = got
            .items()
            .first()
            .and_then(|s| s.items().get(1))
            .and_then(|es| es.items().first())
            .and_then(|e| e.items().first())
            .and_then(|id| id.text())
            .ok_or_else(|| format!("XREAD gave no entry: {got:?}"))?;
        let (status, _) = c.read_answer()?;
        if status != 202 {
            return Err(format!("the webhook answered {status}"));
        }
        last = id;
        out.push(dt.as_secs_f64() * 1e3);
    }
    Ok(out)
}

/// Writes `n` entries over the agents' outboxes; returns the seconds until
/// the sink has had them all.
fn drain(admin: &mut Resp, sink: &http::Sink, n: usize) -> Result<f64> {
    let before = sink.count.load(Ordering::SeqCst);
    let cmds: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let a = i % AGENTS;
            [
                "XADD".to_string(),
                StreamKey::outbox(&agent(a), SOURCE).to_string(),
                "*".into(),
                "channel".into(),
                format!("c{a}"),
                "text".into(),
                format!("answer {i}"),
            ]
            .to_vec()
        })
        .collect();
    let t0 = Instant::now();
    for chunk in cmds.chunks(1000) {
        admin.pipeline(chunk)?;
    }
    let want = before + n as u64;
    wait_for(
        "every outbox entry at the sink",
        Duration::from_secs(300),
        || sink.count.load(Ordering::SeqCst) >= want,
    )?;
    Ok(t0.elapsed().as_secs_f64())
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let exe = bins.bridge()?;
    let (n_in, samples, n_out) = sizes(plan);
    let dir = tempfile::Builder::new()
        .prefix("oxidepm-bench-bridge-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let mut procs = Procs(Vec::new());
    let socket = start_redis(dir.path(), &mut procs)?;
    let sink = http::Sink::start()?;
    let addr = start_bridge(&exe, dir.path(), &socket, sink.addr, &mut procs)?;
    let mut admin = Resp::connect(&socket, &AclUser::Admin.to_string(), ADMIN_PW)?;
    let pids = [procs.0[1].id(), procs.0[0].id()];
    let result =
        measure(addr, &mut admin, &sink, pids, (n_in, samples, n_out)).and_then(|mut rows| {
            rows.extend(attack::run(
                &socket, &mut admin, &sink, pids[0], plan.quick,
            )?);
            Ok(rows)
        });
    drop(procs);
    let log = std::fs::read_to_string(dir.path().join("bridge.log")).unwrap_or_default();
    let complaints: Vec<&str> = log.lines().filter(|l| !l.contains("stopping")).collect();
    if !complaints.is_empty() {
        say!("  bridge log (warnings and errors):");
        for l in complaints.iter().take(10) {
            say!("    {l}");
        }
    }
    result
}

/// CPU seconds used so far by `pid`.
fn cpu_of(pid: u32) -> f64 {
    procfs::stat(pid)
        .map(|s| (s.utime + s.stime) as f64 / procfs::ticks_per_second())
        .unwrap_or(f64::NAN)
}

/// CPU seconds used so far by this process (the senders).
fn own_cpu() -> f64 {
    oxidepm_sys::rusage::own().total().as_secs_f64()
}

/// `pids`: the bridge's and redis-server's; `sizes`: messages in, latency
/// samples, outbox entries.
fn measure(
    addr: SocketAddr,
    admin: &mut Resp,
    sink: &http::Sink,
    pids: [u32; 2],
    (n_in, samples, n_out): (usize, usize, usize),
) -> Result<Vec<Row>> {
    say!(
        "  {SENDERS} keep-alive connections (one request in flight on each, driven from one thread) x {} messages, {AGENTS} agents routed by channel, redis appendfsync everysec",
        n_in / SENDERS
    );
    send_all(addr, 8_000)?;
    let warm = inbox_total(admin)?;
    let cpu0 = [cpu_of(pids[0]), cpu_of(pids[1]), own_cpu()];
    let secs = send_all(addr, n_in)?;
    let cpu1 = [cpu_of(pids[0]), cpu_of(pids[1]), own_cpu()];
    let sent = (n_in / SENDERS * SENDERS) as i64;
    let rate = sent as f64 / secs;
    let kept = inbox_total(admin)? - warm;
    let calls = |cmd: &str, info: &str| -> f64 {
        info.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|l| l.split(['=', ',']).nth(1)?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let info = admin
        .cmd(&["INFO", "commandstats"])?
        .text()
        .unwrap_or_default();
    say!(
        "  messages per Redis write (XADD / HINCRBY): {:.1}",
        calls("xadd", &info) / calls("hincrby", &info)
    );
    let us = |i: usize| (cpu1[i] - cpu0[i]) * 1e6 / sent as f64;
    say!(
        "  CPU per message: bridge {:.1} us, redis-server {:.1} us, the senders {:.1} us",
        us(0),
        us(1),
        us(2)
    );
    say!("  webhook -> inbox: {sent} messages in {secs:.2} s = {rate:.0} msg/s; {kept} in the inboxes");
    if kept != sent {
        return Err(format!(
            "{sent} messages were accepted but {kept} are in the inboxes"
        ));
    }

    let lat = latencies(addr, admin, samples)?;
    let (p50, p99) = (percentile(&lat, 50.0), percentile(&lat, 99.0));
    say!("  routing latency (POST -> readable in the inbox), {samples} samples: p50 {p50:.3} ms, p99 {p99:.3} ms");

    send_drain_warmup(admin, sink)?;
    let secs_out = drain(admin, sink, n_out)?;
    let rate_out = n_out as f64 / secs_out;
    say!("  outbox -> sink: {n_out} entries over {AGENTS} outboxes in {secs_out:.2} s = {rate_out:.0} deliveries/s");
    let delivered = admin
        .cmd(&["HGET", STATS_KEY, "delivered"])?
        .text()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let requests = sink.count.load(Ordering::SeqCst);
    say!("  sink requests {requests}, bridge:stats delivered {delivered}");
    say!("  target: webhook -> inbox >= 50,000 msg/s");
    Ok(vec![
        Row::check(
            "bridge: webhook -> inbox, 8 senders",
            format!("{rate:.0} msg/s"),
            ">= 50,000 /s",
            rate >= 50_000.0,
        ),
        Row::info(
            "bridge: outbox -> sink",
            format!("{rate_out:.0} deliveries/s"),
        ),
        Row::info(
            "bridge: routing latency p50 / p99",
            format!("{p50:.3} / {p99:.3} ms"),
        ),
    ])
}

/// A first small drain, so that connections to the sink exist.
fn send_drain_warmup(admin: &mut Resp, sink: &http::Sink) -> Result<()> {
    drain(admin, sink, 800).map(|_| ())
}
