//! The daemon: start-up (home, lock, state, recovery), the listeners, and
//! shutdown. Requests are answered in [`handler`] and [`ops`].

pub mod attach;
pub mod config;
pub mod daemon_log;
mod degraded;
mod detach;
pub mod entry;
mod errors;
mod handler;
pub mod journal_log;
pub mod metrics;
mod ops;
mod refusals;
pub mod reload;
pub mod retention;
mod views;

use crate::access::gate::AuthorizeError;
use crate::access::peer::PinMode;
use crate::access::{Caller, Gate, Peer, SocketKind};
use crate::lanes::admin::Lanes;
use crate::lanes::layout::{self, Layout};
use crate::lanes::ops as lane_ops;
use crate::lanes::settings::Backend;
use crate::paths::lock::DaemonLock;
use crate::paths::trust::{self, HomeError};
use crate::paths::Home;
use crate::server::{self, Limits, Sink};
use crate::store::StoreError;
use crate::supervise::{control, reaper, sampler, Shared, Supervisor};
use config::{Config, ConfigError};
use oxidepm_proto::{Actor, Op, Request};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UnixStream;
use tokio::sync::Notify;

pub use detach::detach;

/// The running daemon.
pub struct Daemon {
    /// The supervisor.
    pub sup: Shared,
    /// Home directory.
    pub home: Home,
    /// Who is asking, and what they may do (replaced whole when daemon.toml
    /// is reloaded; see [`Daemon::gate`]).
    gate: std::sync::RwLock<Arc<Gate>>,
    /// The part of daemon.toml in force (see [`reload`]).
    live: std::sync::Mutex<reload::Live>,
    /// The restart rate limit, for the restart task.
    restart_rate: tokio::sync::watch::Sender<crate::supervise::restarts::RateSettings>,
    /// Notified when a `kill` request asks the daemon to exit.
    pub exit: Notify,
    /// The agents' lanes.
    pub lanes: Lanes,
    /// Refusals written, and those only counted, per kind and window.
    refusals: std::sync::Mutex<refusals::Refusals>,
    /// Each actor's budget of log bytes read.
    pub log_reads: ops::ReadRate,
    /// The largest answer through an agent's `ops` lane, in bytes.
    pub ops_max_reply: usize,
    /// What is counted of requests for `/metrics` (counted when it is off
    /// too: a few counters, cheaper than asking).
    pub metrics: metrics::Metrics,
    started: Instant,
}

/// One of the daemon's sockets, as its server sees it.
struct Endpoint {
    daemon: Arc<Daemon>,
    socket: SocketKind,
    pin: PinMode,
}

impl server::Handler for Endpoint {
    type Peer = Peer;

    fn identify(&self, stream: &UnixStream, accepted: u64) -> Peer {
        use std::os::fd::AsFd;
        let sup = crate::supervise::lock(&self.daemon.sup);
        Peer::identify(stream.as_fd(), self.socket, &*sup, self.pin, accepted)
    }

    fn holder(&self, peer: &Peer) -> server::Holder {
        holder(peer)
    }

    async fn handle(&self, peer: &Peer, req: Request, sink: &mut Sink) -> std::io::Result<()> {
        self.daemon.handle(peer, req, sink).await
    }
}

/// Whose connection quota a peer uses. Labels are chosen by the client, so
/// they are no key; what the daemon saw at accept is. An app's whole tree
/// shares one quota; outside the daemon's tree each process has its own
/// (on daemon.sock that is the socket owner or root: a person, who gets the
/// slots kept for persons).
fn holder(peer: &Peer) -> server::Holder {
    use crate::access::peer::Origin;
    let uid = peer.info.uid.map_or("?".to_string(), |u| u.to_string());
    let (key, outside) = match &peer.info.origin {
        Origin::App { name, .. } => (format!("uid {uid} app {name}"), false),
        Origin::Outside => {
            let pid = peer.info.pid.map_or("?".to_string(), |p| p.to_string());
            (format!("uid {uid} pid {pid}"), true)
        }
        Origin::Unattributed => (format!("uid {uid} unattributed"), false),
        Origin::Unknown => (format!("uid {uid} unknown"), false),
    };
    let own = peer
        .info
        .uid
        .is_some_and(|u| u == 0 || u == oxidepm_sys::ids::euid());
    server::Holder {
        key: server::PeerKey(key),
        person: peer.socket == SocketKind::Daemon && outside && own,
    }
}

/// Options of `oxidepmd`.
#[derive(Debug)]
pub struct Options {
    /// Home directory.
    pub home: Home,
    /// Start the apps that were running at the last stop.
    pub resurrect: bool,
    /// Container mode: the file whose apps to run in the foreground.
    pub attach: Option<attach::Attach>,
}

/// Checks the home before anything is written in it (see
/// [`crate::paths::trust`]), creates it with mode 0700 if missing
/// (tightening an existing one that others may read), then `logs/`.
/// Sockets are thus made inside a directory that already has its mode.
pub fn prepare_home(home: &Home) -> Result<(), HomeError> {
    use std::os::unix::fs::PermissionsExt;
    let root = home.root();
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| HomeError::Io { path, source }
    };
    trust::check_above(root)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(io(root))?;
    // Checked after creating: a home someone else made meanwhile fails here.
    trust::check_home(home)?;
    let meta = std::fs::symlink_metadata(root).map_err(io(root))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(io(root))?;
    }
    // check_home has refused a link in place of logs/; one that exists
    // is left as it is.
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .create(home.logs_dir())
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(io(&home.logs_dir())(e)),
        _ => Ok(()),
    }
}

impl Daemon {
    /// Checks a request against the gate and the apps as they are now;
    /// fills `apps` with the names it touches. `Ok(Some(names))`: the
    /// request named no app and the caller's grant narrows it to these.
    fn authorize(
        &self,
        caller: &Caller,
        op: &Op,
        apps: &mut Vec<String>,
    ) -> Result<Option<Vec<String>>, AuthorizeError> {
        let s = crate::supervise::lock(&self.sup);
        self.gate().authorize(&*s, caller, op, apps)
    }

    /// The gate in force.
    pub fn gate(&self) -> Arc<Gate> {
        self.gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Milliseconds since the daemon started.
    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// Why the daemon could not start, or could not go on serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// daemon.toml cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The async runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The state database cannot be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The daemon cannot find its own executable, which runs the log shims.
    #[error("cannot find the daemon's own executable: {0}")]
    OwnExe(#[source] std::io::Error),
    /// The main socket cannot be bound.
    #[error("cannot listen on {}: {source}", path.display())]
    Listen {
        /// The socket's path.
        path: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// `metrics` of daemon.toml cannot be bound (in use, no permission).
    #[error("cannot serve metrics on {at}: {source} (change or remove `metrics` in daemon.toml)")]
    Metrics {
        /// The address or path, as written.
        at: String,
        /// The failure.
        source: std::io::Error,
    },
    /// SIGTERM or SIGINT cannot be caught.
    #[error("{0}")]
    Signals(#[source] std::io::Error),
}

/// Runs the daemon in the foreground until `kill` or SIGTERM/SIGINT (or,
/// attached to a file, until its apps have ended); the process's exit
/// status (0 unless attached).
pub fn run(opts: Options, lock: DaemonLock) -> Result<u8, StartError> {
    let (config, keys) = reload::read(&opts.home.config())?;
    raise_fd_limit();
    log::info!("{}", crate::supervise::spawn::shield_from_oom());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let result = rt.block_on(serve(opts, config, keys));
    drop(lock);
    result
}

/// Raises the soft limit on open descriptors to the hard one: each adopted
/// app holds a pidfd, and a start needs pipes, so the usual soft limit of
/// 1024 is reached with a thousand apps. What is left low is said in
/// daemon.log; supervision then degrades (polling) but never kills.
fn raise_fd_limit() {
    match oxidepm_sys::fdlimit::raise_to_hard() {
        Ok(l) => log::info!(
            "open descriptors: soft limit {}, hard limit {}",
            l.soft.map_or("unlimited".into(), |n| n.to_string()),
            l.hard.map_or("unlimited".into(), |n| n.to_string())
        ),
        Err(e) => log::warn!("cannot raise the limit on open descriptors: {e}"),
    }
}

async fn serve(mut opts: Options, config: Config, keys: reload::Keys) -> Result<u8, StartError> {
    let home = opts.home.clone();
    // Bound before anything starts: a port in use stops the daemon before
    // it has started or adopted any app. (The address was checked when
    // daemon.toml was loaded.)
    let metrics_listener = match config.metrics_listen() {
        Ok(Some(at)) => Some(
            metrics::http::bind(&at).map_err(|source| StartError::Metrics {
                at: config.metrics.clone().unwrap_or_default(),
                source,
            })?,
        ),
        _ => None,
    };
    let store =
        crate::store::Store::open_for_daemon(&home.state_db(), config.allow_read_only_state)?;
    let shim_exe = std::env::current_exe().map_err(StartError::OwnExe)?;
    let sup = Supervisor::new(home.clone(), store, shim_exe);
    // Before anything builds a key: every lanes process writes them in
    // the one form of this configuration.
    if let Err(e) = oxidepm_lanes::stream_key::set_key_form(config.lanes.key_form()) {
        log::error!("lanes: {e}");
    }
    let lanes = Lanes::new(Layout { home: home.clone() }, config.lanes.clone());
    {
        let mut s = crate::supervise::lock(&sup);
        if config.lanes.backend == Backend::Redis {
            let layout = lanes.layout.clone();
            let families = lanes.live_families();
            let scheme = config.lanes.lane_url_scheme;
            // A name that is not a valid agent name (an old state) gets no
            // lane, only the plain agent variables.
            s.lane_env = Some(Box::new(move |kind, name: &str| {
                let name = name.parse().ok()?;
                if kind == oxidepm_proto::AppKind::Responder {
                    return Some(crate::lanes::responders::responder_env(
                        &layout, &name, scheme,
                    ));
                }
                let families = families.read().unwrap_or_else(|p| p.into_inner()).clone();
                Some(layout::agent_env(&layout, &name, &families, scheme))
            }));
        }
        s.load()?;
        let root = std::env::var(crate::supervise::cgroup::ROOT_ENV).ok();
        let containment =
            crate::supervise::cgroup::Containment::detect(home.root(), root.as_deref());
        s.set_containment(containment);
        s.agents_share_uid = config.agents_share_uid;
        s.log_output = crate::supervise::logshim::LogOutput::new(config.log_target);
        s.log_output.check();
    }
    if let Err(e) = reaper::become_subreaper() {
        log::warn!("cannot become a child subreaper ({e}); orphans of apps will be reaped by init");
    }
    tokio::spawn(reaper::run(sup.clone()));
    let (restart_rate, rate_rx) = tokio::sync::watch::channel(config.restart_rate());
    tokio::spawn(crate::supervise::restarts::run(sup.clone(), rate_rx));
    // Writers started by an earlier daemon: watched again, so that their
    // death is survived too.
    let regained = crate::supervise::logwriters::regain(&home.logs_dir(), &shim_exe_path());
    if regained > 0 {
        log::info!("watching {regained} log writers started before this daemon");
    }
    let resurrect = opts.resurrect || config.resurrect;
    let to_start = crate::supervise::recovery::recover(&sup, resurrect);
    if !to_start.is_empty() {
        if let Err(e) = control::start(&sup, &to_start, &Actor::system("resurrect")).await {
            log::error!("resurrect: {e}");
        }
    }
    tokio::spawn(sampler::run(sup.clone()));
    tokio::spawn(crate::supervise::supervisor::storage::watch(sup.clone()));
    // Lanes come up before agents are served: an agent re-adopted or
    // resurrected finds its socket.
    if let Err(e) = lanes.reconcile(&sup, &[]).await {
        log::error!("lanes are not available: {e}");
    }
    lanes.spawn_renewal(sup.clone());

    let daemon = Arc::new(Daemon {
        sup: sup.clone(),
        home: home.clone(),
        gate: std::sync::RwLock::new(Arc::new(Gate::new(
            config.tiers.clone(),
            config.adapters.clone(),
            config.agents.clone(),
        ))),
        live: std::sync::Mutex::new(reload::Live::new(keys, &config)),
        restart_rate,
        exit: Notify::new(),
        lanes,
        refusals: std::sync::Mutex::new(refusals::Refusals::new(config.retention.refusal_limits())),
        log_reads: ops::ReadRate::new(config.logs_read_mib_per_sec),
        ops_max_reply: config.ops_max_reply_bytes,
        metrics: metrics::Metrics::default(),
        started: Instant::now(),
    });
    tokio::spawn(retention::run(daemon.clone()));
    if let Some(listener) = metrics_listener {
        let at = config.metrics.as_deref().unwrap_or("");
        log::info!("serving metrics on {at}");
        tokio::spawn(metrics::http::run(listener, daemon.clone()));
    }

    if config.lanes.backend == Backend::Redis
        && config.lanes.responders.iter().any(|r| r == lane_ops::NAME)
    {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<lane_ops::OpsRequest>();
        let settings = lane_ops::OpsSettings {
            timeout: Duration::from_secs(config.ops_timeout_secs.max(1)),
            max_reply: config.ops_max_reply_bytes,
        };
        let feeds = crate::bus::Feeds::default();
        lane_ops::spawn(
            daemon.lanes.clone(),
            sup.clone(),
            tx,
            settings,
            feeds.clone(),
        );
        let d = daemon.clone();
        tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                let d = d.clone();
                let feeds = feeds.clone();
                tokio::spawn(async move {
                    let caller = {
                        let s = crate::supervise::lock(&d.sup);
                        d.gate().lane_caller(&*s, &r.agent)
                    };
                    let _ = r.reply.send(d.answer_lane(&caller, r.req, &feeds).await);
                });
            }
        });
    }

    let pin = PinMode::from_env();
    if pin == PinMode::StartTime {
        log::warn!(
            "peers are pinned by start time only ({}=starttime)",
            crate::access::peer::PIN_ENV
        );
    }
    let main = server::bind(&home.daemon_socket()).map_err(|source| StartError::Listen {
        path: home.daemon_socket(),
        source,
    })?;
    let main_limits = Limits {
        max_line: oxidepm_proto::MAX_DAEMON_LINE,
        idle: None,
        write_timeout: Some(Duration::from_secs(30)),
        caps: server::Caps {
            max_conns: config.daemon_max_connections,
            per_peer: config.daemon_max_connections_per_peer,
            reserved: config.daemon_reserved_connections,
        },
    };
    tokio::spawn(server::run(
        main,
        SocketKind::Daemon.as_str(),
        main_limits,
        Arc::new(Endpoint {
            daemon: daemon.clone(),
            socket: SocketKind::Daemon,
            pin,
        }),
    ));

    if config.agent_socket {
        match server::bind(&home.agent_socket()) {
            Ok(l) => {
                let limits = Limits {
                    max_line: oxidepm_proto::MAX_LINE,
                    idle: Some(Duration::from_secs(config.agent_idle_timeout_secs.max(1))),
                    write_timeout: Some(Duration::from_secs(10)),
                    caps: server::Caps {
                        max_conns: config.agent_max_connections,
                        per_peer: config.agent_max_connections_per_peer,
                        reserved: 0,
                    },
                };
                tokio::spawn(server::run(
                    l,
                    SocketKind::Agent.as_str(),
                    limits,
                    Arc::new(Endpoint {
                        daemon: daemon.clone(),
                        socket: SocketKind::Agent,
                        pin,
                    }),
                ));
            }
            Err(e) => log::warn!(
                "starting without the agent socket: cannot bind {}: {e}",
                home.agent_socket().display()
            ),
        }
    } else {
        log::info!("agent socket disabled by agent_socket = false");
    }

    log::info!(
        "oxidepmd {} ready on {} (pid {})",
        env!("CARGO_PKG_VERSION"),
        home.daemon_socket().display(),
        std::process::id()
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(StartError::Signals)?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(StartError::Signals)?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(StartError::Signals)?;
    {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                log::info!("SIGHUP received: reading daemon.toml again");
                daemon.reload_on_signal();
            }
        });
    }
    // After the handlers: a SIGTERM while the file's apps start stops them.
    let mut attached = None;
    let mut failed_to_attach = false;
    if let Some(a) = opts.attach.take() {
        match attach::begin(&daemon, a).await {
            Ok(a) => attached = Some(a),
            Err((a, e)) => {
                log::error!("{e}; stopping the daemon");
                attached = Some(a);
                failed_to_attach = true;
            }
        }
    }
    let all_ended = async {
        match attached.as_mut() {
            Some(a) if !failed_to_attach => a.all_ended(&daemon).await,
            Some(_) => {}
            None => std::future::pending().await,
        }
    };
    let by = tokio::select! {
        _ = daemon.exit.notified() => None,
        _ = term.recv() => Some("SIGTERM"),
        _ = int.recv() => Some("SIGINT"),
        _ = all_ended => Some("ended"),
    };
    if let Some(why) = by {
        if why == "ended" && !failed_to_attach {
            log::info!("every attached app has ended: stopping the daemon");
        } else if why != "ended" {
            log::info!("{why} received: stopping every app, then the daemon");
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
        control::shutdown(&sup, &Actor::system("shutdown")).await;
    }
    let status = match attached {
        Some(a) if failed_to_attach => {
            a.finish(&daemon, true);
            1
        }
        Some(a) => a.finish(&daemon, by != Some("ended")),
        None => 0,
    };
    let _ = std::fs::remove_file(home.daemon_socket());
    let _ = std::fs::remove_file(home.agent_socket());
    crate::supervise::supervisor::storage::backup_at_exit(&sup);
    // What was only counted is written before the daemon goes.
    daemon.close_refusal_windows(true);
    log::info!("oxidepmd stopped");
    Ok(status)
}

/// The daemon's own program (the log writers are found beside it).
fn shim_exe_path() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_default()
}
