//! The daemon's life in the foreground, one step a function and in this
//! order: the metrics port bound, the supervisor opened, supervision and
//! the lanes started (the apps adopted or resurrected), the sockets served,
//! then a wait for `kill`, a signal or the attached apps' end, and the stop.

use super::config::Config;
use super::{attach, metrics, ops, refusals, reload, retention};
use super::{shim_exe_path, Daemon, Endpoint, Options, StartError};
use crate::access::peer::PinMode;
use crate::access::{Gate, SocketKind};
use crate::lanes::admin::Lanes;
use crate::lanes::layout::{self, Layout};
use crate::lanes::ops as lane_ops;
use crate::lanes::settings::Backend;
use crate::paths::Home;
use crate::server::{self, Limits};
use crate::supervise::{control, reaper, sampler, Shared, Supervisor};
use oxidepm_proto::Actor;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::Notify;

/// Serves until the daemon is to stop; the process's exit status.
pub(super) async fn serve(
    mut opts: Options,
    config: Config,
    keys: reload::Keys,
) -> Result<u8, StartError> {
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
    let (sup, lanes) = open_supervisor(&home, &config)?;
    let restart_rate = supervise(&sup, &home, &config, opts.resurrect).await;
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
        refusals_due: Notify::new(),
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
    serve_ops_lane(&daemon, &config);
    serve_sockets(&daemon, &config)?;
    let by = wait_for_the_end(&daemon, opts.attach.take()).await?;
    Ok(stop(&daemon, by).await)
}

/// The store opened, the supervisor built on it with the apps of the
/// store, and the lanes' side (not started yet).
fn open_supervisor(home: &Home, config: &Config) -> Result<(Shared, Lanes), StartError> {
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
    Ok((sup, lanes))
}

/// Supervision started: the reaper and the restart task, the log writers
/// of an earlier daemon watched again, the apps recovered (and those to
/// resurrect started), then the sampler and the storage watch. The sender
/// of the restart rate limit is the daemon's, to change it on a reload.
async fn supervise(
    sup: &Shared,
    home: &Home,
    config: &Config,
    resurrect: bool,
) -> tokio::sync::watch::Sender<crate::supervise::restarts::RateSettings> {
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
    let resurrect = resurrect || config.resurrect;
    let to_start = crate::supervise::recovery::recover(sup, resurrect);
    if !to_start.is_empty() {
        if let Err(e) = control::start(sup, &to_start, &Actor::system("resurrect")).await {
            log::error!("resurrect: {e}");
        }
    }
    tokio::spawn(sampler::run(sup.clone()));
    tokio::spawn(crate::supervise::supervisor::storage::watch(sup.clone()));
    restart_rate
}

/// The `ops` responder, when daemon.toml has it: agents' requests through
/// their lane, each answered in a task of its own.
fn serve_ops_lane(daemon: &Arc<Daemon>, config: &Config) {
    if config.lanes.backend != Backend::Redis
        || !config.lanes.responders.iter().any(|r| r == lane_ops::NAME)
    {
        return;
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<lane_ops::OpsRequest>();
    let settings = lane_ops::OpsSettings {
        timeout: Duration::from_secs(config.ops_timeout_secs.max(1)),
        max_reply: config.ops_max_reply_bytes,
    };
    let feeds = crate::bus::Feeds::default();
    lane_ops::spawn(
        daemon.lanes.clone(),
        daemon.sup.clone(),
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

/// `daemon.sock` (the daemon does not start without it) and `agent.sock`
/// (it does, saying why), served; then the daemon says it is ready.
fn serve_sockets(daemon: &Arc<Daemon>, config: &Config) -> Result<(), StartError> {
    let home = &daemon.home;
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
    serve_socket(daemon, main, SocketKind::Daemon, main_limits, pin);
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
                serve_socket(daemon, l, SocketKind::Agent, limits, pin);
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
    Ok(())
}

/// One socket's server, in a task of its own.
fn serve_socket(
    daemon: &Arc<Daemon>,
    listener: tokio::net::UnixListener,
    socket: SocketKind,
    limits: Limits,
    pin: PinMode,
) {
    tokio::spawn(server::run(
        listener,
        socket.as_str(),
        limits,
        Arc::new(Endpoint {
            daemon: daemon.clone(),
            socket,
            pin,
        }),
    ));
}

/// Why the daemon stops, and the attached file's apps if it runs one.
struct End {
    /// `SIGTERM`, `SIGINT`, `ended` (the attached apps), or none for `kill`.
    by: Option<&'static str>,
    /// The attached file's apps.
    attached: Option<attach::Attached>,
    /// Whether the file's apps could not be started.
    failed_to_attach: bool,
}

/// Waits, with SIGHUP a reload meanwhile, for `kill`, SIGTERM or SIGINT,
/// or the end of every attached app. The attached file's apps are
/// started here, after the signal handlers: a SIGTERM while they start
/// stops them.
async fn wait_for_the_end(
    daemon: &Arc<Daemon>,
    attach: Option<attach::Attach>,
) -> Result<End, StartError> {
    let mut term = catch(SignalKind::terminate())?;
    let mut int = catch(SignalKind::interrupt())?;
    let mut hup = catch(SignalKind::hangup())?;
    {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                log::info!("SIGHUP received: reading daemon.toml again");
                daemon.reload_on_signal();
            }
        });
    }
    let mut attached = None;
    let mut failed_to_attach = false;
    if let Some(a) = attach {
        match attach::begin(daemon, a).await {
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
            Some(a) if !failed_to_attach => a.all_ended(daemon).await,
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
    Ok(End {
        by,
        attached,
        failed_to_attach,
    })
}

/// A signal caught, or why it cannot be.
fn catch(kind: SignalKind) -> Result<Signal, StartError> {
    signal(kind).map_err(StartError::Signals)
}

/// Stops every app (a `kill` has already), removes the sockets, writes
/// what is left to write; the exit status.
async fn stop(daemon: &Arc<Daemon>, end: End) -> u8 {
    let End {
        by,
        attached,
        failed_to_attach,
    } = end;
    if let Some(why) = by {
        if why == "ended" && !failed_to_attach {
            log::info!("every attached app has ended: stopping the daemon");
        } else if why != "ended" {
            log::info!("{why} received: stopping every app, then the daemon");
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
        control::shutdown(&daemon.sup, &Actor::system("shutdown")).await;
    }
    let status = match attached {
        Some(a) if failed_to_attach => {
            a.finish(daemon, true).await;
            1
        }
        Some(a) => a.finish(daemon, by != Some("ended")).await,
        None => 0,
    };
    let home = &daemon.home;
    let _ = std::fs::remove_file(home.daemon_socket());
    let _ = std::fs::remove_file(home.agent_socket());
    crate::supervise::supervisor::storage::backup_at_exit(&daemon.sup);
    // What was only counted is written before the daemon goes.
    daemon.close_refusal_windows(true);
    log::info!("oxidepmd stopped");
    status
}
