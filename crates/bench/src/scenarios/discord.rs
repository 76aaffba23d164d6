//! `discord`: the release `oxidepm-bridge` with its discord source, against
//! the local stand-in of Discord's gateway and REST API (the same code path
//! as production, only the addresses differ) and a private redis-server:
//!
//! * gateway → inbox: MESSAGE_CREATEs dispatched as fast as the stand-in
//!   sends them, until every one is in the agent's inbox;
//! * end to end: one message at a time, from the stand-in dispatching it
//!   to the stand-in receiving the bot's POST of the answer, which a
//!   trivial agent (a thread here: a blocking XREAD of its inbox, then an
//!   XADD to its outbox) writes; p50 / p99. The samples are paced under
//!   Discord's global limit of 50 requests a second per bot, which the
//!   bridge keeps (twilight's rate limiter): faster, the figure would be
//!   that limit's wait, not the bridge's latency.

use super::bridge::resp::Resp;
use super::bridge::{agent, spawn_bridge, start_redis, wait_for, Procs, ADMIN_PW, BRIDGE_PW};
use super::Plan;
use crate::report::{percentile, Row};
use crate::sandbox::{Bins, Result};
use oxidepm_discord_standin::{Msg, StandIn};
use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::bridge_config::{BridgeConfig, DiscordConfig, RouteConfig};
use oxidepm_lanes::StreamKey;
use std::path::Path;
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-discord-token";
const CHANNEL: u64 = 1_300_000_000_000_000_777;
const SOURCE: &str = "discord";
/// Between two latency samples: under 50 posts a second.
const PACE: Duration = Duration::from_millis(25);

/// Sizes: (messages in, latency samples).
fn sizes(plan: &Plan) -> (usize, usize) {
    if plan.quick {
        (5_000, 200)
    } else {
        (20_000, 1_000)
    }
}

fn start_bridge(
    exe: &Path,
    dir: &Path,
    socket: &Path,
    standin: &StandIn,
    procs: &mut Procs,
) -> Result<()> {
    let w = |p: &str, t: &str| std::fs::write(dir.join(p), t).map_err(|e| e.to_string());
    w("bridge.pw", BRIDGE_PW)?;
    w("discord_token", TOKEN)?;
    let mut cfg = BridgeConfig::new(socket.to_path_buf(), dir.join("bridge.pw"));
    cfg.agents = vec![agent(0)];
    cfg.sources = vec![SOURCE.into()];
    cfg.inbox_maxlen = 1 << 40;
    cfg.routes = vec![RouteConfig {
        source: SOURCE.into(),
        channel: Some(CHANNEL.to_string()),
        guild: None,
        address: None,
        agent: agent(0),
    }];
    let mut d = DiscordConfig::new(dir.join("discord_token"));
    d.settings.gateway_url = Some(standin.gateway_url());
    d.settings.api_url = Some(standin.api_url());
    // Every dispatched message must be taken, however many.
    d.settings.dedupe_ids = 1 << 16;
    cfg.discord = Some(d);
    spawn_bridge(exe, dir, &cfg, procs)?;
    if !standin.wait_connected(Duration::from_secs(30)) {
        return Err("the bridge did not connect to the gateway stand-in".into());
    }
    Ok(())
}

fn xlen(admin: &mut Resp, key: &str) -> Result<i64> {
    Ok(admin.cmd(&["XLEN", key])?.int().unwrap_or(0))
}

/// The trivial agent: answers every inbox entry after `from` until `n`
/// answers are written.
fn agent_thread(
    socket: &Path,
    from: String,
    n: usize,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let mut con = Resp::connect(socket, &AclUser::Admin.to_string(), ADMIN_PW)?;
    let inbox = StreamKey::inbox(&agent(0), SOURCE).to_string();
    let outbox = StreamKey::outbox(&agent(0), SOURCE).to_string();
    Ok(std::thread::spawn(move || {
        let mut last = from;
        for _ in 0..n {
            let got = con.cmd(&[
                "XREAD", "COUNT", "1", "BLOCK", "30000", "STREAMS", &inbox, &last,
            ])?;
            let entry = got
                .items()
                .first()
                .and_then(|s| s.items().get(1))
                .and_then(|es| es.items().first())
                .cloned()
                .ok_or("the agent's XREAD timed out")?;
            last = entry
                .items()
                .first()
                .and_then(|id| id.text())
                .ok_or("an entry without an id")?;
            let channel = CHANNEL.to_string();
            con.cmd(&["XADD", &outbox, "*", "channel", &channel, "text", "pong"])?;
        }
        Ok(())
    }))
}

fn measure(
    standin: &StandIn,
    socket: &Path,
    admin: &mut Resp,
    (n_in, samples): (usize, usize),
) -> Result<Vec<Row>> {
    let inbox = StreamKey::inbox(&agent(0), SOURCE).to_string();
    // Throughput: every message dispatched, then counted in the inbox.
    let before = xlen(admin, &inbox)?;
    let msgs: Vec<Msg> = (0..n_in)
        .map(|i| Msg::new(CHANNEL, &format!("message {i}")))
        .collect();
    let t0 = Instant::now();
    for m in &msgs {
        standin.send_message(m);
    }
    let want = before + n_in as i64;
    let mut seen = before;
    wait_for(
        "every message in the inbox",
        Duration::from_secs(300),
        || {
            seen = xlen(admin, &inbox).unwrap_or(seen);
            seen >= want
        },
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let rate = n_in as f64 / secs;
    say!("  gateway -> inbox: {n_in} messages in {secs:.2} s = {rate:.0} msgs/s");

    // End to end, one at a time.
    let last = admin
        .cmd(&["XREVRANGE", &inbox, "+", "-", "COUNT", "1"])?
        .items()
        .first()
        .and_then(|e| e.items().first().and_then(|id| id.text()))
        .unwrap_or_else(|| "0-0".into());
    let agent = agent_thread(socket, last, samples)?;
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples {
        let posted = standin.post_count();
        let m = Msg::new(CHANNEL, &format!("ping {i}"));
        let t0 = Instant::now();
        standin.send_message(&m);
        if !standin.wait_posts(posted + 1, Duration::from_secs(30)) {
            return Err(format!("answer {i} was never posted"));
        }
        let dt = t0.elapsed();
        lat.push(dt.as_secs_f64() * 1e3);
        std::thread::sleep(PACE.saturating_sub(dt));
    }
    agent
        .join()
        .map_err(|_| "the agent thread panicked".to_string())??;
    let (p50, p99) = (percentile(&lat, 50.0), percentile(&lat, 99.0));
    say!("  message -> answer posted: p50 {p50:.2} ms, p99 {p99:.2} ms ({samples} samples)");
    Ok(vec![
        Row::info("discord: gateway -> inbox", format!("{rate:.0} msgs/s")),
        Row::info(
            "discord: message -> agent answer posted",
            format!("p50 {p50:.2} ms, p99 {p99:.2} ms"),
        ),
    ])
}

/// Runs the scenario: redis-server, the stand-in and the release bridge.
pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let exe = bins.bridge()?;
    let dir = tempfile::Builder::new()
        .prefix("oxidepm-bench-discord-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let mut procs = Procs(Vec::new());
    let socket = start_redis(dir.path(), &mut procs)?;
    let standin = StandIn::start(TOKEN).map_err(|e| format!("cannot start the stand-in: {e}"))?;
    standin.allow_channel(CHANNEL);
    start_bridge(&exe, dir.path(), &socket, &standin, &mut procs)?;
    let mut admin = Resp::connect(&socket, &AclUser::Admin.to_string(), ADMIN_PW)?;
    let result = measure(&standin, &socket, &mut admin, sizes(plan));
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
