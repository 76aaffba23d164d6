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
mod serve;
mod views;

use crate::access::gate::AuthorizeError;
use crate::access::peer::PinMode;
use crate::access::{Caller, Gate, Peer, SocketKind};
use crate::lanes::admin::Lanes;
use crate::paths::lock::DaemonLock;
use crate::paths::trust::{self, HomeError};
use crate::paths::Home;
use crate::server::{self, Sink};
use crate::store::StoreError;
use crate::supervise::Shared;
use config::ConfigError;
use oxidepm_proto::{Op, Request};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::Instant;
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
    /// Notified when the earliest refusal window to close changes.
    refusals_due: Notify,
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
    // Before any thread: the runtime thread and the few blocking threads
    // share two arenas instead of leaving one each behind.
    oxidepm_sys::memory::limit_arenas(2);
    let (config, keys) = reload::read(&opts.home.config())?;
    raise_fd_limit();
    log::info!("{}", crate::supervise::spawn::shield_from_oom());
    crate::supervise::oom::baseline();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let result = rt.block_on(serve::serve(opts, config, keys));
    // The home is let go last: a `kill` that waits for the lock must find
    // the daemon gone, not its runtime still winding down its threads (a
    // blocking task still running is not waited for past this).
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
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

/// The daemon's own program (the log writers are found beside it).
fn shim_exe_path() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_default()
}
