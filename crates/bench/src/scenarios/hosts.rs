//! `hosts`: lanes past one host. The whole path webhook -> inbox -> agent
//! -> outbox -> sink, through 1, 2 and 3 bridges (the release binary,
//! each a host with its own consumer name, the webhook POSTs spread over
//! them) on (a) a private redis-server on a unix socket (one bridge, the
//! baseline), (b) one shared redis-server over TCP, (c) a Redis Cluster of
//! three primaries (and three replicas). An echo agent per agent answers
//! every inbox entry into its outbox. Reported: messages per second end
//! to end, and each message's latency from its POST to its answer at the
//! sink, p50 / p99; and how throughput grows from one bridge to three.

use super::bridge::{self, http, spawn_bridge, wait_for, Procs, BRIDGE_PW};
use super::Plan;
use crate::report::{percentile, Row};
use crate::sandbox::{Bins, Result};
use oxidepm_lanes::bridge_config::{BridgeConfig, RouteConfig, WebhookConfig};
use oxidepm_lanes::{AgentName, KeyForm, RedisUrl};
use oxidepm_testkit::cluster::Cluster;
use oxidepm_testkit::shared::{SharedRedis, ROOT_PASSWORD, ROOT_USER};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGENTS: usize = 8;
const SENDERS: usize = 8;
const TOKEN: &str = "bench-hosts-token";
/// The bridges' user on the shared servers (full access: this measures
/// throughput, the ACL is the tests' business).
const USER: &str = "bench_bridge";

fn agent(i: usize) -> AgentName {
    format!("h{i}").parse().expect("a valid agent name")
}

/// A stream key in `form`, built here: this process keeps one key form
/// and measures both.
fn key(form: KeyForm, a: &AgentName, dir: &str) -> String {
    format!("{}:webhook:{dir}", form.agent_part(a.as_str()))
}

/// Where the lanes are.
enum Server {
    Private(std::path::PathBuf),
    Shared(SharedRedis),
    Cluster(Cluster),
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Private(p) => format!("unix://{}", p.display()),
            Server::Shared(s) => s.url(),
            Server::Cluster(c) => c.url(),
        }
    }

    fn form(&self) -> KeyForm {
        match self {
            Server::Private(_) => KeyForm::Plain,
            _ => KeyForm::Tagged,
        }
    }

    /// A connection as the administrator, cluster-aware where needed.
    fn admin(&self) -> Result<Box<dyn redis::ConnectionLike + Send>> {
        let e = |e: redis::RedisError| e.to_string();
        Ok(match self {
            Server::Private(p) => {
                let info = redis::ConnectionInfo {
                    addr: redis::ConnectionAddr::Unix(p.clone()),
                    redis: redis::RedisConnectionInfo {
                        username: Some("sys".into()),
                        password: Some(bridge::ADMIN_PW.into()),
                        ..Default::default()
                    },
                };
                Box::new(
                    redis::Client::open(info)
                        .map_err(e)?
                        .get_connection()
                        .map_err(e)?,
                )
            }
            Server::Shared(s) => Box::new(s.connect(ROOT_USER, ROOT_PASSWORD).map_err(e)?),
            Server::Cluster(c) => {
                let seeds: Vec<String> = c.nodes[..3]
                    .iter()
                    .map(|n| format!("redis://127.0.0.1:{}", n.port))
                    .collect();
                Box::new(
                    redis::cluster::ClusterClientBuilder::new(seeds)
                        .username(ROOT_USER.into())
                        .password(ROOT_PASSWORD.into())
                        .build()
                        .map_err(e)?
                        .get_connection()
                        .map_err(e)?,
                )
            }
        })
    }

    /// A connection as the administrator to the server holding `key`: on
    /// a cluster, its slot's primary (an agent's keys share one).
    fn admin_for(&self, key: &str) -> Result<Box<dyn redis::ConnectionLike + Send>> {
        match self {
            Server::Cluster(c) => Ok(Box::new(c.node(c.primary_of(key)))),
            _ => self.admin(),
        }
    }

    /// The bridges' user and password.
    fn provision(&self) -> Result<(String, String)> {
        let setuser = |con: &mut redis::Connection| {
            redis::cmd("ACL")
                .arg(
                    &[
                        "SETUSER",
                        USER,
                        "reset",
                        "on",
                        ">bench-pw",
                        "~*",
                        "&*",
                        "+@all",
                    ][..],
                )
                .query::<()>(con)
                .map_err(|e| e.to_string())
        };
        match self {
            Server::Private(_) => Ok(("bridge".into(), BRIDGE_PW.into())),
            Server::Shared(s) => {
                setuser(&mut s.root())?;
                Ok((USER.into(), "bench-pw".into()))
            }
            Server::Cluster(c) => {
                for n in &c.nodes {
                    setuser(&mut c.node(n.port))?;
                }
                Ok((USER.into(), "bench-pw".into()))
            }
        }
    }
}

/// A local HTTP sink that notes when each message's answer arrived.
struct Sink {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<(Instant, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Sink {
    fn start() -> Result<Sink> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, st) = (got.clone(), stop.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(c) = c else { continue };
                let g = g.clone();
                std::thread::spawn(move || serve(c, g));
            }
        });
        Ok(Sink { addr, got, stop })
    }

    fn count(&self) -> usize {
        self.got.lock().map(|g| g.len()).unwrap_or(0)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// One keep-alive connection of the sink: each POST's body's `text`, when.
fn serve(c: TcpStream, got: Arc<Mutex<Vec<(Instant, String)>>>) {
    let _ = c.set_nodelay(true);
    let Ok(w) = c.try_clone() else { return };
    let mut w = w;
    let mut r = BufReader::new(c);
    loop {
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            let l = line.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len.min(1 << 20)];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let text = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["text"].as_str().map(str::to_string))
            .unwrap_or_default();
        if let Ok(mut g) = got.lock() {
            g.push((Instant::now(), text));
        }
        if w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

/// Starts bridge `i` (host `host-<i>`) on `server`.
fn start_bridge(
    exe: &Path,
    dir: &Path,
    server: &Server,
    i: usize,
    sink: SocketAddr,
    procs: &mut Procs,
) -> Result<SocketAddr> {
    let (user, pw) = server.provision()?;
    let bdir = dir.join(format!("bridge-{i}"));
    std::fs::create_dir_all(&bdir).map_err(|e| e.to_string())?;
    std::fs::write(bdir.join("pw"), pw).map_err(|e| e.to_string())?;
    std::fs::write(bdir.join("token"), TOKEN).map_err(|e| e.to_string())?;
    let url: RedisUrl = server.url().parse().map_err(|e| format!("{e}"))?;
    let mut cfg = BridgeConfig::new(url, bdir.join("pw"));
    cfg.key_form = server.form();
    cfg.user = user;
    cfg.agents = (0..AGENTS).map(agent).collect();
    cfg.sources = vec!["webhook".into()];
    cfg.inbox_maxlen = 1 << 40;
    cfg.routes = (0..AGENTS)
        .map(|a| RouteConfig {
            source: "webhook".into(),
            channel: Some(format!("c{a}")),
            guild: None,
            address: None,
            agent: agent(a),
        })
        .collect();
    let port = oxidepm_testkit::free_port();
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let mut w = WebhookConfig::new(listen, bdir.join("token"));
    w.settings
        .deliver
        .insert("*".into(), format!("http://{sink}/out"));
    cfg.webhook = Some(w);
    cfg.outbox.consumer = format!("host-{i}");
    spawn_bridge(exe, &bdir, &cfg, procs)?;
    wait_for("a bridge's webhook", Duration::from_secs(30), || {
        TcpStream::connect(listen).is_ok()
    })?;
    Ok(listen)
}

/// The echo agents: each answers every entry of its inbox into its outbox,
/// until `stop`.
fn echo_agents(server: &Server, stop: Arc<AtomicBool>) -> Result<Vec<std::thread::JoinHandle<()>>> {
    let form = server.form();
    let mut out = Vec::new();
    for a in 0..AGENTS {
        let (inbox, outbox) = (
            key(form, &agent(a), "inbox"),
            key(form, &agent(a), "outbox"),
        );
        let mut con = server.admin_for(&inbox)?;
        let stop = stop.clone();
        out.push(std::thread::spawn(move || {
            // From the newest entry now (a server is reused across runs);
            // never `$` again, which would miss entries between reads.
            let newest: redis::RedisResult<redis::streams::StreamRangeReply> =
                redis::cmd("XREVRANGE")
                    .arg(&inbox)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query(&mut *con);
            let mut last = newest
                .ok()
                .and_then(|r| r.ids.into_iter().next().map(|e| e.id))
                .unwrap_or_else(|| "0-0".to_string());
            while !stop.load(Ordering::SeqCst) {
                let r: redis::RedisResult<redis::streams::StreamReadReply> = redis::cmd("XREAD")
                    .arg(&["COUNT", "200", "BLOCK", "200", "STREAMS", &inbox, &last][..])
                    .query(&mut *con);
                let Ok(r) = r else { continue };
                let mut pipe = redis::pipe();
                for k in r.keys {
                    for e in k.ids {
                        let text: String = e.get("text").unwrap_or_default();
                        let channel: String = e.get("channel").unwrap_or_default();
                        pipe.cmd("XADD")
                            .arg(&outbox)
                            .arg("*")
                            .arg("channel")
                            .arg(channel)
                            .arg("text")
                            .arg(text)
                            .ignore();
                        last = e.id;
                    }
                }
                if !pipe.is_empty() {
                    let _ = pipe.query::<()>(&mut *con);
                }
            }
        }));
    }
    Ok(out)
}

/// One run: `n` messages POSTed over the bridges' webhooks; returns
/// (msgs/s end to end, p50 ms, p99 ms).
fn run_once(exe: &Path, server: &Server, bridges: usize, n: usize) -> Result<(f64, f64, f64)> {
    let dir = tempfile::Builder::new()
        .prefix("oxidepm-bench-hosts-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let mut procs = Procs(Vec::new());
    let sink = Sink::start()?;
    let mut hooks = Vec::new();
    for i in 0..bridges {
        hooks.push(start_bridge(
            exe,
            dir.path(),
            server,
            i,
            sink.addr,
            &mut procs,
        )?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let agents = echo_agents(server, stop.clone())?;
    // Let every bridge take up its outboxes and every agent its inbox.
    std::thread::sleep(Duration::from_millis(500));
    let epoch = Instant::now();
    let per = n / SENDERS;
    let t0 = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let addr = hooks[s % hooks.len()];
            std::thread::spawn(move || -> Result<Vec<(usize, Instant)>> {
                let mut c = http::Client::connect(addr)?;
                let mut sent = Vec::with_capacity(per);
                for i in 0..per {
                    let id = s * per + i;
                    let body = format!(
                        r#"{{"channel":"c{}","sender":"s{s}","text":"m{id}"}}"#,
                        id % AGENTS
                    );
                    sent.push((id, Instant::now()));
                    c.send_post("/in/webhook", TOKEN, &body)?;
                    let (status, _) = c.read_answer()?;
                    if status != 202 {
                        return Err(format!("the webhook answered {status}"));
                    }
                }
                Ok(sent)
            })
        })
        .collect();
    let mut sent_at = vec![epoch; per * SENDERS];
    for s in senders {
        for (id, at) in s.join().map_err(|_| "a sender panicked")?? {
            sent_at[id] = at;
        }
    }
    let total = per * SENDERS;
    let waited = wait_for("every answer at the sink", Duration::from_secs(120), || {
        sink.count() >= total
    });
    stop.store(true, Ordering::SeqCst);
    for a in agents {
        let _ = a.join();
    }
    drop(procs);
    if let Err(e) = waited {
        // What the bridges said, to tell why.
        for i in 0..bridges {
            let log = std::fs::read_to_string(dir.path().join(format!("bridge-{i}/bridge.log")))
                .unwrap_or_default();
            for l in log.lines().take(5) {
                say!("    bridge {i}: {l}");
            }
        }
        say!("    answers at the sink: {} of {total}", sink.count());
        if let Ok(mut con) = server.admin() {
            for dir in ["inbox", "outbox"] {
                let k = key(server.form(), &agent(0), dir);
                let n: redis::RedisResult<i64> = redis::cmd("XLEN").arg(&k).query(&mut *con);
                say!("    XLEN {k}: {n:?}");
            }
        }
        return Err(e);
    }
    let got = sink.got.lock().map_err(|_| "the sink's lock")?.clone();
    let mut lat: Vec<f64> = got
        .iter()
        .filter_map(|(at, text)| {
            let id: usize = text.strip_prefix('m')?.parse().ok()?;
            Some(at.duration_since(*sent_at.get(id)?).as_secs_f64() * 1e3)
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    let last = got.iter().map(|(at, _)| *at).max().unwrap_or(t0);
    let rate = total as f64 / last.duration_since(t0).as_secs_f64().max(1e-9);
    Ok((rate, percentile(&lat, 50.0), percentile(&lat, 99.0)))
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let exe = bins.bridge()?;
    let n = if plan.quick { 4_000 } else { 40_000 };
    say!("  {n} messages per run, {SENDERS} senders (keep-alive, one request in flight each) spread over the bridges, {AGENTS} echo agents");
    let mut rows = Vec::new();
    let dir = tempfile::Builder::new()
        .prefix("oxidepm-bench-hosts-private-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let mut procs = Procs(Vec::new());
    let socket = bridge::start_redis(dir.path(), &mut procs)?;
    let private = Server::Private(socket);
    let (base, p50, p99) = run_once(&exe, &private, 1, n)?;
    say!("  private unix redis, 1 bridge: {base:.0} msg/s, p50 {p50:.2} ms, p99 {p99:.2} ms");
    rows.push(Row::info(
        "hosts: private redis, 1 bridge",
        format!("{base:.0} msg/s, p50/p99 {p50:.2}/{p99:.2} ms"),
    ));
    drop(procs);
    for (label, server) in [
        (
            "shared TCP redis",
            Server::Shared(SharedRedis::start(false)),
        ),
        ("3-primary cluster", Server::Cluster(Cluster::start(false))),
    ] {
        let mut one = f64::NAN;
        for bridges in 1..=3 {
            let (rate, p50, p99) = run_once(&exe, &server, bridges, n)?;
            if bridges == 1 {
                one = rate;
            }
            say!(
                "  {label}, {bridges} bridge(s): {rate:.0} msg/s ({:.2}x one bridge, {:.2}x private), p50 {p50:.2} ms, p99 {p99:.2} ms",
                rate / one,
                rate / base
            );
            rows.push(Row::info(
                format!("hosts: {label}, {bridges} bridge(s)"),
                format!(
                    "{rate:.0} msg/s ({:.2}x of 1), p50/p99 {p50:.2}/{p99:.2} ms",
                    rate / one
                ),
            ));
        }
    }
    Ok(rows)
}
