//! `proxy`: the lanes' auth proxy (`oxidepm-lane-proxy`, run by the daemon
//! as `oxidepm-lanes`) against the private Redis directly.
//!
//! A daemon with one agent app `bench` (which makes it run redis-server and
//! the proxy); `redis-benchmark` with 50 clients over unix sockets, plain
//! and pipelined (`-P 16`), with commands the agent may send:
//! `XADD bench:bench:outbox * f v` (its own outbox; the proxy forwards it
//! as it is) and `XLEN bench:webhook:inbox` (a read of its own inbox).
//! Through the agent's socket `lanes/bench.sock` (no password: the socket
//! is the identity) and directly on `redis/redis.sock` as the admin user
//! `sys`. Every XADD run is checked: the stream must have grown by exactly
//! the number of requests (redis-benchmark counts error replies as answers).
//!
//! The outbox written is of a responder family, `sink`, that nothing
//! drains (the bridge would deliver and the proxy then remove entries of a
//! source's outbox). The lane takes 64 connections (the default is 16) for
//! redis-benchmark's 50 clients, and the quota is set so that a million
//! entries fit on any host.
//!
//! What each run through the proxy is judged by is CPU, not throughput:
//! on a small machine the client, Redis and the proxy compete for the same
//! cores, so the throughput ratio (still reported) mostly measures that
//! competition. The proxy's and redis-server's utime+stime (/proc, clock
//! ticks) before and after each run give each one's CPU time per request;
//! the target is the proxy's at most Redis's own. Then [`latency`]: one
//! client's round trips (PING, XLEN of the own inbox), through the proxy
//! and directly, and the p50 the proxy adds. [`profile`]: with
//! `OXIDEPM_BENCH_PERF=<dir>`, a `perf record` of the proxy per run.
//!
//! Then [`attack`]: the proxy under a stalled-connections attack, in a
//! fresh home with the default limits.

mod attack;
mod conn;
mod latency;
mod profile;

pub use conn::{Conn, Reply};

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs;
use crate::report::{median, Row};
use crate::sandbox::{s, Bins, Result, Sandbox};
use oxidepm_lanes::proxy_config::agent_socket;
use oxidepm_lanes::{secret, AclUser, AgentName, Secret, StreamKey};
use serde_json::Value;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLIENTS: usize = 50;
const PIPELINE: usize = 16;
const AGENT: &str = "bench";
/// The family of the agent's own outbox written to: a responder that no
/// app serves, so that nothing drains it.
const OUT_FAMILY: &str = "sink";
/// The daemon's configuration for the throughput runs.
// The agent runs as the benchmark's uid, which a root daemon accepts only
// when told that agents may share one.
const DAEMON_TOML: &str =
    "agents_share_uid = true\n[lanes]\nresponders = [\"ops\", \"sink\"]\nmax_connections = 64\n\
                           maxmemory = 1073741824\nagent_quota = 268435456\n";
/// The family of the inbox read.
const IN_FAMILY: &str = "webhook";

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// One redis-benchmark run's figures.
#[derive(Debug, Clone, Copy)]
struct Bench {
    rps: f64,
    p50: f64,
    p99: f64,
    proxy_cpu: f64,
    redis_cpu: f64,
    /// redis-benchmark's own CPU, fraction of a core.
    client_cpu: f64,
    /// The proxy's CPU time per request, in µs.
    proxy_us: f64,
    /// Redis's CPU time per request, in µs.
    redis_us: f64,
}

/// CPU seconds of this process's waited-for children.
fn children_cpu() -> f64 {
    oxidepm_sys::rusage::children().total().as_secs_f64()
}

/// Where to point redis-benchmark.
struct Target<'a> {
    name: &'static str,
    socket: &'a Path,
    /// The admin user's password, when not through the proxy.
    auth: Option<&'a Secret>,
}

/// A workload: a command and its pipelining.
struct Work<'a> {
    label: String,
    args: Vec<&'a str>,
    pipeline: usize,
    requests: usize,
    /// Stream that must grow by `requests` per run.
    grows: Option<&'a str>,
}

fn cpu_secs(pid: Option<u32>) -> f64 {
    pid.and_then(procfs::stat)
        .map(|s| (s.utime + s.stime) as f64 / procfs::ticks_per_second())
        .unwrap_or(0.0)
}

#[allow(clippy::too_many_arguments)]
fn bench_once(
    exe: &Path,
    home: &Path,
    t: &Target<'_>,
    w: &Work<'_>,
    admin: &mut Conn,
    proxy_pid: Option<u32>,
    redis_pid: Option<u32>,
) -> Result<Bench> {
    let before = match w.grows {
        Some(k) => admin.int(&["XLEN", k])?,
        None => 0,
    };
    let mut cmd = Command::new(exe);
    cmd.current_dir(home)
        .stdin(Stdio::null())
        .args(["-s", &t.socket.to_string_lossy()])
        .args(["-n", &w.requests.to_string()])
        .args(["-c", &CLIENTS.to_string()])
        .args(["-P", &w.pipeline.to_string()])
        .arg("--csv");
    if let Some(pw) = t.auth {
        cmd.args(["--user", &AclUser::Admin.to_string(), "-a", pw.expose()]);
    }
    cmd.args(&w.args);
    // Only the runs through the proxy are profiled.
    let perf = t
        .auth
        .is_none()
        .then(|| profile::start(proxy_pid, &w.label))
        .flatten();
    let (p0, r0, c0) = (cpu_secs(proxy_pid), cpu_secs(redis_pid), children_cpu());
    let t0 = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let wall = t0.elapsed().as_secs_f64();
    let (p1, r1, c1) = (cpu_secs(proxy_pid), cpu_secs(redis_pid), children_cpu());
    drop(perf);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("redis-benchmark {} on {}", w.label, t.name);
    if !out.status.success() {
        return Err(format!("{what} failed ({}): {}", out.status, stderr.trim()));
    }
    if let Some(e) = stderr.lines().find(|l| l.contains("Error from server")) {
        return Err(format!("{what}: {e}"));
    }
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('"') && !l.starts_with("\"test\""))
        .ok_or_else(|| format!("{what}: no CSV result in {stdout:?} / {stderr:?}"))?;
    let f: Vec<f64> = row
        .rsplit("\",\"")
        .take(7)
        .map(|x| x.trim_matches('"').parse::<f64>().unwrap_or(f64::NAN))
        .collect();
    // Reversed: max, p99, p95, p50, min, avg, rps.
    if f.len() < 7 || f[6].is_nan() {
        return Err(format!("{what}: cannot read the CSV line {row:?}"));
    }
    if let Some(k) = w.grows {
        let after = admin.int(&["XLEN", k])?;
        let added = after - before;
        if added != w.requests as i64 {
            return Err(format!(
                "{what}: {k} grew by {added}, expected {} (some commands were refused?)",
                w.requests
            ));
        }
        admin.int(&["DEL", k])?;
    }
    Ok(Bench {
        rps: f[6],
        p50: f[3],
        p99: f[1],
        proxy_cpu: (p1 - p0) / wall,
        redis_cpu: (r1 - r0) / wall,
        client_cpu: (c1 - c0) / wall,
        proxy_us: (p1 - p0) * 1e6 / w.requests as f64,
        redis_us: (r1 - r0) * 1e6 / w.requests as f64,
    })
}

fn pid_of(sb: &Sandbox, name: &str) -> Result<Option<u32>> {
    Ok(sb
        .status()?
        .into_iter()
        .find(|a| s(a, "name") == name)
        .and_then(|a| a.get("pid").and_then(Value::as_u64))
        .map(|p| p as u32))
}

/// The added p50 latency the proxy may cost one client, in µs.
const ADDED_P50_US: f64 = 20.0;

/// Round trips at one client (PING, XLEN of the own inbox), through the
/// proxy and directly: p50, p99 and what the proxy adds to the p50.
fn one_client(
    redis: &Path,
    lane: &Path,
    pw: &Secret,
    inbox: &str,
    plan: &Plan,
) -> Result<Vec<Row>> {
    let n = if plan.quick { 5_000 } else { 20_000 };
    let mut direct = Conn::open(redis)?;
    let admin_user = AclUser::Admin.to_string();
    match direct.cmd(&["AUTH", &admin_user, pw.expose()])? {
        Reply::Status(s) if s == "OK" => {}
        other => return Err(format!("AUTH {admin_user}: {other:?}")),
    }
    let proxied = Conn::open(lane)?;
    let (mut d, mut x) = (direct.w, proxied.w);
    say!("  one client, {n} round trips each, direct and through the proxy alternating in blocks:");
    // In a virtual machine, waking an idle vCPU costs tens of µs, and the
    // guest's haltpoll idle driver adapts how long it spins first: the
    // proxy's two extra wake-ups per round trip then cost either a few µs
    // or a few tens, from run to run.
    let idle = std::fs::read_to_string("/sys/devices/system/cpu/cpuidle/current_driver");
    if let Ok(driver) = idle {
        say!("    cpuidle driver: {}", driver.trim());
    }
    let mut rows = Vec::new();
    for probe in [
        latency::Probe::new("PING", &["PING"], b"+PONG"),
        latency::Probe::new("XLEN", &["XLEN", inbox], b":"),
    ] {
        let (dt, xt) = latency::measure(&mut d, &mut x, &probe, n)?;
        let added = xt.p50() - dt.p50();
        say!(
            "    {:<5} direct p50 {:.1} µs p99 {:.1} µs; proxy p50 {:.1} µs p99 {:.1} µs; added p50 {added:+.1} µs",
            probe.label,
            dt.p50(),
            dt.p99(),
            xt.p50(),
            xt.p99()
        );
        rows.push(Row::check(
            format!("proxy added p50, one client, {}", probe.label),
            format!(
                "{added:+.1} µs ({:.1} vs {:.1}; p99 {:.1} vs {:.1})",
                xt.p50(),
                dt.p50(),
                xt.p99(),
                dt.p99()
            ),
            &format!("<= {ADDED_P50_US} µs"),
            added <= ADDED_P50_US,
        ));
    }
    Ok(rows)
}

/// Runs the scenario: throughput and CPU per request, one client's latency, then the attack.
pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    if let Some(skipped) = missing_tools() {
        return Ok(skipped);
    }
    let mut rows = with_sandbox(bins, |sb| throughput(sb, plan))?;
    say!("  -- under a stalled-connections attack, default limits --");
    match attack::run(bins, plan) {
        Ok(more) => rows.extend(more),
        Err(e) => {
            say!("  ERROR: {e}");
            rows.push(Row::failed("proxy under a stalled-connections attack", &e));
        }
    }
    Ok(rows)
}

/// The row that says why the scenario is skipped, when redis-benchmark or
/// redis-server is not on PATH.
fn missing_tools() -> Option<Vec<Row>> {
    if find_on_path("redis-benchmark").is_none() {
        say!("  SKIPPED: redis-benchmark is not on PATH (Debian: apt-get install redis-tools)");
        return Some(vec![Row::info(
            "proxy vs direct Redis",
            "skipped: no redis-benchmark (apt-get install redis-tools)".into(),
        )]);
    }
    if find_on_path("redis-server").is_none() {
        say!("  SKIPPED: redis-server is not on PATH (Debian: apt-get install redis-server)");
        return Some(vec![Row::info(
            "proxy vs direct Redis",
            "skipped: no redis-server (apt-get install redis-server)".into(),
        )]);
    }
    None
}

/// The agent's lane, up, and what reaching Redis both ways takes.
struct Lane {
    /// The agent's socket (the proxy).
    socket: PathBuf,
    /// The private Redis's socket.
    redis: PathBuf,
    /// The admin user's password.
    pw: Secret,
    /// A connection to Redis as the admin user.
    admin: Conn,
}

/// The throughput runs, direct and through the proxy, then one client's
/// latency; in the sandbox `sb`.
fn throughput(sb: &mut Sandbox, plan: &Plan) -> Result<Vec<Row>> {
    let exe = find_on_path("redis-benchmark").ok_or("redis-benchmark is not on PATH")?;
    let rounds = if plan.quick { 1 } else { 3 };
    let (plain_n, piped_n) = if plan.quick {
        (50_000, 200_000)
    } else {
        (200_000, 1_000_000)
    };
    std::fs::create_dir_all(sb.home())
        .and_then(|()| std::fs::write(sb.home().join("daemon.toml"), DAEMON_TOML))
        .map_err(|e| format!("cannot write daemon.toml: {e}"))?;
    sb.ping()?;
    sb.run(&[
        "start", "--kind", "agent", "--name", AGENT, "--", "sleep", "100000",
    ])?;
    let agent_name: AgentName = AGENT.parse().map_err(|e| format!("{e}"))?;
    let outbox = StreamKey::outbox(&agent_name, OUT_FAMILY).to_string();
    let inbox = StreamKey::inbox(&agent_name, IN_FAMILY).to_string();
    let (outbox, inbox) = (outbox.as_str(), inbox.as_str());
    let mut lane = open_lane(sb, &agent_name, outbox, inbox)?;
    let proxy_pid = pid_of(sb, "oxidepm-lanes")?;
    let redis_pid = pid_of(sb, "oxidepm-redis")?;
    let bridge = sb
        .status()?
        .into_iter()
        .find(|a| s(a, "name") == "oxidepm-bridge")
        .map(|a| format!("{} (restarts {})", s(&a, "status"), s(&a, "restarts")));
    say!(
        "  proxy pid {}, redis-server pid {}, oxidepm-bridge {}",
        proxy_pid.map_or("?".into(), |p| p.to_string()),
        redis_pid.map_or("?".into(), |p| p.to_string()),
        bridge.unwrap_or_else(|| "not running".into())
    );
    say!(
        "  redis-benchmark -c {CLIENTS}: -n {plain_n} plain, -n {piped_n} with -P {PIPELINE}; \
         {rounds} round(s), direct and proxy alternating"
    );
    let direct = Target {
        name: "redis.sock (direct, user sys)",
        socket: &lane.redis,
        auth: Some(&lane.pw),
    };
    let proxied = Target {
        name: "lanes/bench.sock (proxy)",
        socket: &lane.socket,
        auth: None,
    };
    let mut rows = Vec::new();
    for w in &workloads(outbox, inbox, plain_n, piped_n) {
        let (mut d, mut p): (Vec<Bench>, Vec<Bench>) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let order: [(&Target<'_>, bool); 2] = if round % 2 == 0 {
                [(&direct, false), (&proxied, true)]
            } else {
                [(&proxied, true), (&direct, false)]
            };
            for (t, is_proxy) in order {
                let b = bench_once(&exe, sb.home(), t, w, &mut lane.admin, proxy_pid, redis_pid)?;
                if is_proxy {
                    p.push(b);
                } else {
                    d.push(b);
                }
            }
        }
        rows.extend(compare(w, &d, &p));
    }
    say!(
        "  target: proxy CPU per request <= 1.0x Redis's own, plain and pipelined \
         (throughput for reference: on 2 cores client, Redis and proxy compete)"
    );
    rows.extend(one_client(
        &lane.redis,
        &lane.socket,
        &lane.pw,
        inbox,
        plan,
    )?);
    Ok(rows)
}

/// Waits for the agent's lane and Redis, and checks that the commands of
/// the runs work both ways (an error reply would be counted as an answer
/// by redis-benchmark).
fn open_lane(sb: &Sandbox, agent: &AgentName, outbox: &str, inbox: &str) -> Result<Lane> {
    let lane = agent_socket(&sb.home().join("lanes"), agent);
    let redis = sb.home().join("redis").join("redis.sock");
    let t0 = Instant::now();
    while UnixStream::connect(&lane).is_err() || UnixStream::connect(&redis).is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(format!(
                "{} or {} not reachable 20 s after defining the agent",
                lane.display(),
                redis.display()
            ));
        }
        sleep_ms(20);
    }
    let pw_file = secret::path(&sb.home().join("secrets"), AclUser::Admin);
    let pw = Secret::read(&pw_file).map_err(|e| e.to_string())?;
    let admin_user = AclUser::Admin.to_string();
    let mut admin = Conn::open(&redis)?;
    match admin.cmd(&["AUTH", &admin_user, pw.expose()])? {
        Reply::Status(s) if s == "OK" => {}
        other => {
            return Err(format!(
                "AUTH {admin_user} on {}: {other:?}",
                redis.display()
            ))
        }
    }
    let mut agent = Conn::open(&lane)?;
    match agent.cmd(&["XADD", outbox, "*", "f", "v"])? {
        Reply::Bulk(Some(_)) => {}
        other => return Err(format!("XADD {outbox} through the proxy: {other:?}")),
    }
    match agent.cmd(&["XLEN", inbox])? {
        Reply::Int(_) => {}
        other => return Err(format!("XLEN {inbox} through the proxy: {other:?}")),
    }
    match agent.cmd(&["ACL", "WHOAMI"])? {
        Reply::Bulk(Some(u)) => say!("  lane {}: ACL user {u}", lane.display()),
        other => say!("  note: ACL WHOAMI through the proxy: {other:?}"),
    }
    drop(agent);
    admin.int(&["DEL", outbox])?;
    Ok(Lane {
        socket: lane,
        redis,
        pw,
        admin,
    })
}

/// The four workloads: XADD to the own outbox and XLEN of the own inbox,
/// plain and pipelined.
fn workloads<'a>(outbox: &'a str, inbox: &'a str, plain_n: usize, piped_n: usize) -> [Work<'a>; 4] {
    [
        Work {
            label: format!("XADD {outbox} * f v"),
            args: vec!["XADD", outbox, "*", "f", "v"],
            pipeline: 1,
            requests: plain_n,
            grows: Some(outbox),
        },
        Work {
            label: format!("XADD {outbox} * f v -P {PIPELINE}"),
            args: vec!["XADD", outbox, "*", "f", "v"],
            pipeline: PIPELINE,
            requests: piped_n,
            grows: Some(outbox),
        },
        Work {
            label: format!("XLEN {inbox}"),
            args: vec!["XLEN", inbox],
            pipeline: 1,
            requests: plain_n,
            grows: None,
        },
        Work {
            label: format!("XLEN {inbox} -P {PIPELINE}"),
            args: vec!["XLEN", inbox],
            pipeline: PIPELINE,
            requests: piped_n,
            grows: None,
        },
    ]
}

/// One workload's runs direct (`d`) and through the proxy (`p`), said and
/// judged: the proxy's CPU per request against Redis's own, and (for
/// reference) throughput and the p50 added.
fn compare(w: &Work<'_>, d: &[Bench], p: &[Bench]) -> Vec<Row> {
    let med = |v: &[Bench], f: fn(&Bench) -> f64| median(&v.iter().map(f).collect::<Vec<f64>>());
    let (drps, prps) = (med(d, |b| b.rps), med(p, |b| b.rps));
    let (dp50, pp50) = (med(d, |b| b.p50), med(p, |b| b.p50));
    let ratio = prps / drps;
    say!("  {}:", w.label);
    say!(
        "    direct {:>9.0} req/s  p50 {:.3} ms  p99 {:.3} ms  (CPU, % of a core: redis {:.0}, client {:.0})   rounds: {}",
        drps,
        dp50,
        med(d, |b| b.p99),
        med(d, |b| b.redis_cpu) * 100.0,
        med(d, |b| b.client_cpu) * 100.0,
        d.iter()
            .map(|b| format!("{:.0}", b.rps))
            .collect::<Vec<_>>()
            .join(" ")
    );
    say!(
        "    proxy  {:>9.0} req/s  p50 {:.3} ms  p99 {:.3} ms  (CPU, % of a core: redis {:.0}, client {:.0}, proxy {:.0})   rounds: {}",
        prps,
        pp50,
        med(p, |b| b.p99),
        med(p, |b| b.redis_cpu) * 100.0,
        med(p, |b| b.client_cpu) * 100.0,
        med(p, |b| b.proxy_cpu) * 100.0,
        p.iter()
            .map(|b| format!("{:.0}", b.rps))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (pus, rus) = (med(p, |b| b.proxy_us), med(p, |b| b.redis_us));
    let cpu = pus / rus;
    say!(
        "    CPU per request through the proxy: proxy {pus:.2} µs, redis {rus:.2} µs \
         (proxy/redis {cpu:.2}; redis direct {:.2} µs)",
        med(d, |b| b.redis_us)
    );
    say!(
        "    proxy/direct {ratio:.2}; p50 added by the proxy {:+.3} ms",
        pp50 - dp50
    );
    let short = if w.pipeline > 1 {
        format!("{} -P{}", w.args[0], w.pipeline)
    } else {
        w.args[0].to_string()
    };
    vec![
        Row::check(
            format!("proxy CPU / Redis CPU per request, {short}"),
            format!("{cpu:.2} ({pus:.2} vs {rus:.2} µs)"),
            "<= 1.0",
            cpu <= 1.0,
        ),
        Row::info(
            format!("proxy/direct throughput, {short}, {CLIENTS} clients"),
            format!("{ratio:.2} ({prps:.0} vs {drps:.0} /s)"),
        ),
        Row::info(
            format!("proxy added p50, {short}, {CLIENTS} clients"),
            format!("{:+.3} ms ({pp50:.3} vs {dp50:.3})", pp50 - dp50),
        ),
    ]
}
