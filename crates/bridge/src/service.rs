//! The whole bridge: builds the sources, starts their inbound loops and the
//! outbox reader, reloads the configuration (SIGHUP) without dropping
//! anything, and stops cleanly (SIGTERM, SIGINT).
//!
//! Each source's inbound side runs under its own supervision
//! ([`supervise`](crate::supervise)): one that fails is stopped and
//! reported in `bridge:status`, and the rest of the bridge goes on; a
//! reload starts it again.
//!
//! A reload replaces the routing table (messages published from then on
//! use it), the sources' settings, the retry settings and the set of
//! outboxes drained (the reader takes it up within `outbox.block_ms`). The
//! Redis address and user, `outbox.concurrency`, the set of source
//! implementations and the webhook's listen address need a restart; a
//! reload that changes them says so in its report and in the log.

use crate::conn::ConnectError;
use crate::delivery::{DeliveryContext, DeliverySettings};
use crate::outbox::OutboxPlan;
use crate::publish::{Publisher, RoutingTable};
use crate::shutdown::{Shutdown, ShutdownTrigger};
use crate::source::{Source, SourceError};
use crate::sources::KINDS;
use oxidepm_lanes::bridge_config::BridgeConfig;
use oxidepm_lanes::ConfigError;
use oxidepm_lanes::{SecretError, StreamKey};
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

/// How long stopping waits for deliveries and requests in flight.
const GRACE: Duration = Duration::from_secs(5);
/// How long start-up waits for Redis.
const REDIS_PATIENCE: Duration = Duration::from_secs(30);
/// Bound on one non-blocking Redis command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the bridge cannot start, or cannot take up a new configuration.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The configuration file cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The bridge's password cannot be read.
    #[error(transparent)]
    Password(#[from] SecretError),
    /// A source cannot run.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Redis does not take the bridge's connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A source refuses the new configuration.
    #[error("source {name}: {source}")]
    Reload {
        /// The source's name.
        name: String,
        /// Why it refuses.
        source: SourceError,
    },
    /// The configuration's key form differs from the one this process
    /// started with.
    #[error("{0}; restart the bridge to change lanes.key_form")]
    KeyForm(String),
    /// The signal handlers cannot be set up.
    #[error("cannot handle signals: {0}")]
    Signals(#[source] std::io::Error),
}

/// The source implementations of a configuration.
pub struct Sources {
    /// Every source.
    pub all: Vec<Arc<dyn Source>>,
    /// Where the webhook listens, if it is one of them.
    pub webhook_addr: Option<SocketAddr>,
}

/// Builds the source implementations a configuration asks for, each
/// kind of [`KINDS`] in turn.
pub fn build_sources(cfg: &BridgeConfig) -> Result<Sources, BridgeError> {
    let mut all: Vec<Arc<dyn Source>> = Vec::new();
    for kind in KINDS {
        all.extend((kind.build)(cfg)?);
    }
    let webhook_addr = all.iter().find_map(|s| s.listen_addr());
    Ok(Sources { all, webhook_addr })
}

/// Source name → the source that delivers its outboxes: each source its
/// own, and the webhook also those of `webhook.relay`.
fn deliverers(cfg: &BridgeConfig, sources: &[Arc<dyn Source>]) -> HashMap<String, Arc<dyn Source>> {
    let mut m: HashMap<String, Arc<dyn Source>> = HashMap::new();
    for s in sources {
        m.insert(s.name().to_string(), s.clone());
        if s.name() == "webhook" {
            for r in cfg.webhook.iter().flat_map(|w| &w.relay) {
                m.insert(r.clone(), s.clone());
            }
        }
    }
    m
}

/// The outboxes to drain: every agent × every source something delivers.
fn plan(cfg: &BridgeConfig, deliverers: &HashMap<String, Arc<dyn Source>>) -> OutboxPlan {
    let undelivered: Vec<&str> = cfg
        .sources
        .iter()
        .filter(|s| !deliverers.contains_key(*s))
        .map(String::as_str)
        .collect();
    if !undelivered.is_empty() && !cfg.agents.is_empty() {
        log::warn!(
            "outboxes of {} are not drained: no source of this bridge delivers them (their entries wait)",
            undelivered.join(", ")
        );
    }
    let outboxes = cfg
        .agents
        .iter()
        .flat_map(|a| {
            cfg.sources
                .iter()
                .filter(|s| deliverers.contains_key(*s))
                .map(move |s| StreamKey::outbox(a, s))
        })
        .collect();
    OutboxPlan {
        outboxes,
        consumer: cfg.outbox.consumer.clone(),
        block: Duration::from_millis(cfg.outbox.block_ms),
        batch: cfg.outbox.batch,
        claim_idle: Duration::from_millis(cfg.outbox.claim_idle_ms),
        max_entry_bytes: cfg.outbox.max_entry_bytes,
        buffer_bytes: cfg.outbox.buffer_bytes,
    }
}

/// Logs every parked route and a parked default agent; returns how many.
fn warn_parked(cfg: &BridgeConfig) -> usize {
    let plan = cfg.route_plan();
    for p in &plan.parked {
        let r = &p.route;
        log::warn!(
            "route of source {:?} to {:?} is parked: {}",
            r.source,
            r.agent.as_str(),
            p.why
        );
    }
    if let Some(why) = &plan.default_parked {
        log::warn!("default_agent is parked: {why}");
    }
    plan.parked.len() + usize::from(plan.default_parked.is_some())
}

fn delivery_settings(cfg: &BridgeConfig) -> DeliverySettings {
    DeliverySettings {
        retry: cfg.retry,
        deliver_timeout: Duration::from_millis(cfg.outbox.deliver_timeout_ms),
        max_entry_bytes: cfg.outbox.max_entry_bytes,
        dead_maxlen: cfg.outbox.dead_maxlen,
        dead_entry_bytes: cfg.outbox.dead_entry_bytes,
        inbox_maxlen: cfg.inbox_maxlen,
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default)]
pub struct ReloadReport {
    /// Agents now configured.
    pub agents: usize,
    /// Routes now in force.
    pub routes: usize,
    /// Routes parked (and the default agent, when it is).
    pub parked: usize,
    /// Outboxes now drained.
    pub outboxes: usize,
    /// Changes that only take effect after a restart.
    pub need_restart: Vec<String>,
    /// Sources stopped by a failure that the reload started again.
    pub started_again: Vec<String>,
}

impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} agents, {} routes ({} parked), {} outboxes drained",
            self.agents, self.routes, self.parked, self.outboxes
        )?;
        if !self.started_again.is_empty() {
            write!(f, "; started again: {}", self.started_again.join(", "))?;
        }
        if !self.need_restart.is_empty() {
            write!(
                f,
                "; needs a restart to change: {}",
                self.need_restart.join(", ")
            )?;
        }
        Ok(())
    }
}

/// A running bridge.
pub struct Bridge {
    config_path: PathBuf,
    /// The file's configuration, as read.
    config: Mutex<BridgeConfig>,
    /// The shared routes (`shared_routes`), which follow the file's.
    shared: Mutex<Vec<oxidepm_lanes::bridge_config::RouteConfig>>,
    publisher: Publisher,
    ctx: Arc<DeliveryContext>,
    plan_tx: watch::Sender<OutboxPlan>,
    sources: Vec<Arc<dyn Source>>,
    webhook_addr: Option<SocketAddr>,
    trigger: ShutdownTrigger,
    supervisor: crate::supervise::Supervisor,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Bridge {
    /// Reads the configuration, connects to Redis, binds the sources and
    /// starts every loop. Must be called inside a tokio runtime.
    pub async fn start(config_path: PathBuf) -> Result<Arc<Bridge>, BridgeError> {
        let cfg = BridgeConfig::load(&config_path)?;
        // Before any key is built: every key follows the deployment's form.
        oxidepm_lanes::stream_key::set_key_form(cfg.key_form)
            .map_err(|e| BridgeError::KeyForm(e.to_string()))?;
        let target = crate::conn::target(&cfg)?;
        let Sources {
            all: sources,
            webhook_addr,
        } = build_sources(&cfg)?;
        let con = crate::conn::connect_patiently(&target, COMMAND_TIMEOUT, REDIS_PATIENCE).await?;
        // The shared routes as they are now, so that the first message
        // already finds them; a failure leaves them to the watcher.
        let mut shared_raw = Vec::new();
        if cfg.shared_routes {
            match crate::shared_routes::fetch(&mut con.clone()).await {
                Ok(raw) => shared_raw = raw,
                Err(e) => log::error!("{e}; trying again every second"),
            }
        }
        let shared = crate::shared_routes::parse(&shared_raw);
        let file_cfg = cfg.clone();
        let cfg = with_shared(cfg, &shared);
        let table = RoutingTable::from_config(&cfg);
        let routes = table.routes.len();
        let parked = warn_parked(&cfg);
        let publisher = Publisher::new(con.clone(), table);
        let (trigger, shutdown) = Shutdown::new();
        let delivering = deliverers(&cfg, &sources);
        let plan = plan(&cfg, &delivering);
        let ctx = Arc::new(DeliveryContext {
            con,
            deliverers: std::sync::RwLock::new(delivering),
            settings: std::sync::RwLock::new(delivery_settings(&cfg)),
            slots: Semaphore::new(cfg.outbox.concurrency),
            room: tokio::sync::Notify::new(),
            shutdown: shutdown.clone(),
        });
        let (plan_tx, plan_rx) = watch::channel(plan.clone());
        let supervisor =
            crate::supervise::Supervisor::new(ctx.con.clone(), publisher.clone(), shutdown.clone());
        supervisor.clear().await;
        for s in &sources {
            supervisor.start(s.clone());
        }
        let tasks = vec![
            tokio::spawn(crate::readers::run(
                ctx.clone(),
                target.clone(),
                plan_rx,
                GRACE,
            )),
            tokio::spawn(crate::conn::keep_alive(ctx.con.clone(), {
                let mut shutdown = shutdown.clone();
                async move { shutdown.wait().await }
            })),
        ];
        log::info!(
            "bridge started as {} on {}: {} agents, {routes} routes ({parked} parked), {} outboxes drained",
            target.user,
            target.url,
            cfg.agents.len(),
            plan.outboxes.len()
        );
        let watch_shared = cfg
            .shared_routes
            .then(|| (con_for_watch(&publisher), shutdown.clone()));
        let bridge = Arc::new(Bridge {
            config_path,
            config: Mutex::new(file_cfg),
            shared: Mutex::new(shared),
            publisher,
            ctx,
            plan_tx,
            webhook_addr,
            sources,
            trigger,
            supervisor,
            tasks: Mutex::new(tasks),
        });
        if let Some((con, sd)) = watch_shared {
            let weak = Arc::downgrade(&bridge);
            let apply = move |routes| {
                let bridge = weak.upgrade()?;
                Some(bridge.set_shared_routes(routes).map(|r| r.to_string()))
            };
            let w = tokio::spawn(crate::shared_routes::watch(apply, con, shared_raw, sd));
            bridge
                .tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(w);
        }
        Ok(bridge)
    }

    /// Applies a new set of shared routes (after the file's).
    pub fn set_shared_routes(
        &self,
        routes: Vec<oxidepm_lanes::bridge_config::RouteConfig>,
    ) -> Result<ReloadReport, BridgeError> {
        *self.shared.lock().unwrap_or_else(|p| p.into_inner()) = routes;
        let file = self
            .config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.apply(file)
    }

    /// Where the webhook listens, if it runs.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_addr
    }

    /// A handle to publish with (what sources are given).
    pub fn publisher(&self) -> Publisher {
        self.publisher.clone()
    }

    /// Reads the configuration again and applies it, then starts every
    /// source stopped by a failure again; on error the previous
    /// configuration stays in force (and a failed source stopped).
    pub fn reload(&self) -> Result<ReloadReport, BridgeError> {
        let file = BridgeConfig::load(&self.config_path)?;
        let mut report = self.apply(file)?;
        report.started_again = self.supervisor.restart_failed();
        Ok(report)
    }

    /// Applies the file's configuration `file` with the shared routes.
    fn apply(&self, file: BridgeConfig) -> Result<ReloadReport, BridgeError> {
        let shared = self
            .shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let cfg = with_shared(file.clone(), &shared);
        let table = RoutingTable::from_config(&cfg);
        let mut old = self.config.lock().unwrap_or_else(|p| p.into_inner());
        let mut need_restart = Vec::new();
        if cfg.redis != old.redis
            || cfg.tls != old.tls
            || cfg.password_file != old.password_file
            || cfg.user != old.user
        {
            need_restart.push("the Redis socket, user or password file".to_string());
        }
        if cfg.outbox.concurrency != old.outbox.concurrency {
            need_restart.push("outbox.concurrency".into());
        }
        let sections = cfg.sections();
        for kind in KINDS.iter().filter(|k| k.restart_to_add) {
            let running = self.sources.iter().any(|s| s.name() == kind.name);
            if sections.contains(&kind.name) != running {
                need_restart.push(format!("adding or removing the {} source", kind.name));
            }
        }
        for s in &self.sources {
            let more = s.reload(&cfg).map_err(|source| BridgeError::Reload {
                name: s.name().to_string(),
                source,
            })?;
            need_restart.extend(more);
        }
        let routes = table.routes.len();
        let parked = warn_parked(&cfg);
        self.publisher.set_table(table);
        let delivering = deliverers(&cfg, &self.sources);
        let plan = plan(&cfg, &delivering);
        *self
            .ctx
            .deliverers
            .write()
            .unwrap_or_else(|p| p.into_inner()) = delivering;
        *self.ctx.settings.write().unwrap_or_else(|p| p.into_inner()) = delivery_settings(&cfg);
        let report = ReloadReport {
            agents: cfg.agents.len(),
            routes,
            parked,
            outboxes: plan.outboxes.len(),
            need_restart,
            started_again: Vec::new(),
        };
        self.plan_tx.send_replace(plan);
        *old = file;
        Ok(report)
    }

    /// Says in `bridge:status` whether the last reload failed, for
    /// `oxidepm route list`: a failed reload must not look like one that
    /// took.
    pub async fn record_reload(&self, error: Option<&str>) {
        let mut con = self.ctx.con.clone();
        if let Err(e) = crate::stats::record_reload(&mut con, error).await {
            log::warn!("cannot record the reload's outcome in Redis: {e}");
        }
    }

    /// Stops: no new request or read; deliveries and requests in flight
    /// get a grace period; what is not acknowledged stays pending in Redis.
    pub async fn shutdown(&self) {
        self.trigger.trigger();
        self.supervisor.stop(GRACE * 2).await;
        // A stopped bridge runs no source: none may look up.
        self.supervisor.clear().await;
        let tasks: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(GRACE * 2, t).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// `cfg` with the shared routes after its own (an earlier route wins).
fn with_shared(
    mut cfg: BridgeConfig,
    shared: &[oxidepm_lanes::bridge_config::RouteConfig],
) -> BridgeConfig {
    cfg.routes.extend(shared.iter().cloned());
    cfg
}

/// The watcher's connection: the publisher's (multiplexed, shared).
fn con_for_watch(publisher: &Publisher) -> crate::conn::Con {
    publisher.connection()
}

/// Runs the bridge until SIGTERM or SIGINT; SIGHUP reloads the
/// configuration. Must be called inside a tokio runtime.
pub async fn run(config_path: PathBuf) -> Result<(), BridgeError> {
    use tokio::signal::unix::{signal, SignalKind};
    // Handlers first: SIGHUP's default action would end the process.
    let sig = |k| signal(k).map_err(BridgeError::Signals);
    let mut hup = sig(SignalKind::hangup())?;
    let mut term = sig(SignalKind::terminate())?;
    let mut int = sig(SignalKind::interrupt())?;
    let bridge = Bridge::start(config_path).await?;
    bridge.record_reload(None).await;
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    loop {
        tokio::select! {
            _ = hup.recv() => match bridge.reload() {
                Ok(report) => {
                    log::info!("configuration reloaded: {report}");
                    if !report.need_restart.is_empty() {
                        log::warn!("restart the bridge to change: {}", report.need_restart.join(", "));
                    }
                    bridge.record_reload(None).await;
                }
                Err(e) => {
                    log::error!("reload failed, previous configuration kept: {e}");
                    bridge.record_reload(Some(&e.to_string())).await;
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    log::info!("bridge stopping");
    bridge.shutdown().await;
    log::info!("bridge stopped");
    Ok(())
}
