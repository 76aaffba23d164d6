//! The lane proxy server: one listening socket per agent, kept in step
//! with the configuration file.
//!
//! Each lane has an accept loop task that owns the lane's connection tasks
//! (a `JoinSet`): aborting the loop closes every connection of that lane
//! and no other. [`Proxy::reload`] re-reads the file: new agents get a
//! socket, removed agents lose theirs (and their connections), the others
//! keep their listener and connections and pick up new settings (password,
//! limits) for new connections.
//!
//! The accept loop also runs the lane's meter (see [`crate::lane::meter`]), so
//! that it too ends with the lane.

use crate::conn::serve;
use crate::lane::meter;
use crate::lane::settings::{self, LaneSettings};
use crate::server::activation::{self, ActivatedSocket};
use crate::server::lane_socket::{bind_lane_socket, chown_socket, ensure_lanes_dir};
use crate::upstream::route::{self, Route};
use oxidepm_lanes::proxy_config::agent_socket;
use oxidepm_lanes::{AgentConfig, AgentName, ConfigError, ProxyConfig};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::runtime::Handle;
use tokio::task::{JoinHandle, JoinSet};

/// Where a lane's listening socket came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// Bound by us at this path; unlinked when the agent goes.
    Bound(PathBuf),
    /// Inherited (socket activation); its file belongs to systemd.
    Activated,
}

/// What every connection of a lane shares.
#[derive(Debug)]
struct LaneShared {
    name: String,
    /// `None`: an inherited socket whose agent is not configured.
    settings: RwLock<Option<Arc<LaneSettings>>>,
    connections: AtomicUsize,
    /// Connections being refused (each is answered, then lingers up to a
    /// second): past `max_connections` of them, more are closed unanswered.
    refusing: AtomicUsize,
}

#[derive(Debug)]
struct Lane {
    origin: Origin,
    listener: Arc<UnixListener>,
    shared: Arc<LaneShared>,
    /// The accept loop; `None` until the first configuration is applied,
    /// so that no inherited connection is accepted before its settings.
    task: Option<JoinHandle<()>>,
    uid: Option<u32>,
}

impl Lane {
    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Debug, Default)]
struct State {
    config: Option<ProxyConfig>,
    /// The way upstream, kept across reloads that do not change it.
    route: Option<Arc<Route>>,
    lanes: HashMap<String, Lane>,
}

/// What a reload did, for the log and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    /// Agents that could not be (re)configured, with why. An agent that
    /// was already served keeps its previous settings.
    pub failed: Vec<(String, String)>,
}

impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "added [{}], removed [{}], kept [{}]",
            self.added.join(", "),
            self.removed.join(", "),
            self.kept.join(", ")
        )?;
        for (a, why) in &self.failed {
            write!(f, "; {a} failed: {why}")?;
        }
        Ok(())
    }
}

/// The running proxy. Its methods may be called from any thread.
pub struct Proxy {
    config_path: PathBuf,
    rt: Handle,
    state: Mutex<State>,
}

impl Proxy {
    /// Loads `config_path`, takes over `activated` sockets and starts
    /// serving, on the runtime `rt`. Fails if the configuration cannot be
    /// read; an agent that cannot be served is reported in the log.
    pub fn start(
        config_path: PathBuf,
        activated: Vec<ActivatedSocket>,
        rt: Handle,
    ) -> Result<(Arc<Proxy>, ReloadReport), ConfigError> {
        let cfg = ProxyConfig::load(&config_path)?;
        let proxy = Arc::new(Proxy {
            config_path,
            rt,
            state: Mutex::new(State::default()),
        });
        {
            let _enter = proxy.rt.enter();
            let mut st = proxy.lock();
            for sock in activated {
                if let Err(why) = sock.name.parse::<AgentName>() {
                    log::error!("closing an inherited socket: {why}");
                    continue;
                }
                if st.lanes.contains_key(&sock.name) {
                    log::error!(
                        "two inherited sockets are named '{}'; closing one",
                        sock.name
                    );
                    continue;
                }
                let listener =
                    match activation::into_listener(sock.fd).and_then(UnixListener::from_std) {
                        Ok(l) => Arc::new(l),
                        Err(e) => {
                            log::error!("inherited socket '{}' cannot be used: {e}", sock.name);
                            continue;
                        }
                    };
                let shared = Arc::new(LaneShared {
                    name: sock.name.clone(),
                    settings: RwLock::new(None),
                    connections: AtomicUsize::new(0),
                    refusing: AtomicUsize::new(0),
                });
                st.lanes.insert(
                    sock.name,
                    Lane {
                        origin: Origin::Activated,
                        listener,
                        shared,
                        task: None,
                        uid: None,
                    },
                );
            }
        }
        let report = proxy.apply(cfg);
        Ok((proxy, report))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Re-reads the configuration file and applies it. On an error the
    /// previous configuration stays in force, untouched.
    pub fn reload(&self) -> Result<ReloadReport, ConfigError> {
        let cfg = ProxyConfig::load(&self.config_path)?;
        Ok(self.apply(cfg))
    }

    /// The agents served now (configured and listening).
    pub fn agents(&self) -> Vec<String> {
        let st = self.lock();
        let mut v: Vec<String> = st
            .lanes
            .values()
            .filter(|l| read_settings(&l.shared).is_some())
            .map(|l| l.shared.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Stops every lane, closes every connection and unlinks the sockets
    /// this process bound.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        for (_, mut lane) in st.lanes.drain() {
            lane.stop();
            if let Origin::Bound(path) = &lane.origin {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    fn apply(&self, cfg: ProxyConfig) -> ReloadReport {
        let _enter = self.rt.enter();
        let mut report = ReloadReport::default();
        let mut st = self.lock();
        if let Some(old) = &st.config {
            if old.lanes_dir != cfg.lanes_dir {
                log::warn!(
                    "lanes_dir changed from {} to {}: existing sockets stay until they are \
                     removed or the proxy restarts; new ones are created in the new directory",
                    old.lanes_dir.display(),
                    cfg.lanes_dir.display()
                );
            }
        }
        let lanes = settings::lanes(&cfg);
        let route = match route::from_config(&cfg, st.route.as_ref()) {
            Ok(r) => r,
            Err(why) => {
                // Nothing changes: every lane keeps what it had.
                log::error!("{why}");
                for (a, _) in &lanes {
                    report.failed.push((a.name.to_string(), why.clone()));
                }
                return report;
            }
        };
        st.route = Some(route.clone());
        st.remove_gone(&lanes, &mut report);
        // Agents that stay or arrive.
        let dir_ok = ensure_lanes_dir(&cfg.lanes_dir);
        for (a, responder) in &lanes {
            let old = st
                .lanes
                .get(a.name.as_str())
                .and_then(|l| read_settings(&l.shared));
            let settings =
                match settings::lane_settings(&cfg, &route, a, old.as_deref(), *responder) {
                    Ok(s) => Arc::new(s),
                    Err(e) => {
                        report.failed.push((a.name.to_string(), e.to_string()));
                        continue;
                    }
                };
            let done = match st.lanes.get_mut(a.name.as_str()) {
                Some(lane) => lane.update(a, settings, &mut report),
                None => st.add(&cfg, a, settings, &dir_ok, &mut report),
            };
            if let Err(why) = done {
                report.failed.push((a.name.to_string(), why));
            }
        }
        // Start (or restart) every lane that has no accept loop.
        for lane in st.lanes.values_mut() {
            if lane.task.is_none() {
                let task = self
                    .rt
                    .spawn(accept_loop(lane.listener.clone(), lane.shared.clone()));
                lane.task = Some(task);
            }
        }
        st.config = Some(cfg);
        report
    }
}

impl State {
    /// Stops the lanes of agents not in `lanes`: a bound socket is
    /// removed, an inherited one kept, answering "unavailable".
    fn remove_gone(&mut self, lanes: &[(AgentConfig, bool)], report: &mut ReloadReport) {
        let gone: Vec<String> = self
            .lanes
            .keys()
            .filter(|n| !lanes.iter().any(|(a, _)| a.name == n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            let Some(mut lane) = self.lanes.remove(&name) else {
                continue;
            };
            let was_served = read_settings(&lane.shared).is_some();
            lane.stop();
            match &lane.origin {
                Origin::Bound(path) => {
                    if let Err(e) = std::fs::remove_file(path) {
                        log::warn!("lane {name}: cannot remove {}: {e}", path.display());
                    }
                }
                Origin::Activated => {
                    // Keep the inherited socket; answer "unavailable" on it.
                    *lane
                        .shared
                        .settings
                        .write()
                        .unwrap_or_else(|p| p.into_inner()) = None;
                    self.lanes.insert(name.clone(), lane);
                }
            }
            if was_served {
                report.removed.push(name);
            }
        }
    }

    /// Binds the socket of a new agent `a` (`dir_ok`: the lanes'
    /// directory is there) and adds its lane, served with `settings`;
    /// `Err` says why not.
    fn add(
        &mut self,
        cfg: &ProxyConfig,
        a: &AgentConfig,
        settings: Arc<LaneSettings>,
        dir_ok: &io::Result<()>,
        report: &mut ReloadReport,
    ) -> Result<(), String> {
        if let Err(e) = dir_ok {
            return Err(e.to_string());
        }
        let path = agent_socket(&cfg.lanes_dir, &a.name);
        let listener =
            match bind_lane_socket(&path, a.socket_mode, a.uid).and_then(UnixListener::from_std) {
                Ok(l) => Arc::new(l),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            };
        let shared = Arc::new(LaneShared {
            name: a.name.to_string(),
            settings: RwLock::new(Some(settings)),
            connections: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
        });
        self.lanes.insert(
            a.name.to_string(),
            Lane {
                origin: Origin::Bound(path),
                listener,
                shared,
                task: None,
                uid: a.uid,
            },
        );
        report.added.push(a.name.to_string());
        Ok(())
    }
}

impl Lane {
    /// Serves the lane's new connections with `settings` (and its socket's
    /// owner as `a` says); `Err` says why not.
    fn update(
        &mut self,
        a: &AgentConfig,
        settings: Arc<LaneSettings>,
        report: &mut ReloadReport,
    ) -> Result<(), String> {
        let was_served = read_settings(&self.shared).is_some();
        if let Origin::Bound(path) = &self.origin {
            if self.uid != a.uid {
                chown_socket(path, a.uid).map_err(|e| e.to_string())?;
                self.uid = a.uid;
            }
        }
        *self
            .shared
            .settings
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(settings);
        if was_served {
            report.kept.push(a.name.to_string());
        } else {
            report.added.push(a.name.to_string());
        }
        Ok(())
    }
}

fn read_settings(shared: &LaneShared) -> Option<Arc<LaneSettings>> {
    shared
        .settings
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Why the proxy stopped, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The signal handlers cannot be set up.
    #[error("cannot handle signals: {0}")]
    Signals(#[source] io::Error),
}

/// Accepts on one lane, and measures its outboxes, until aborted; dropping
/// it closes the lane's connections.
async fn accept_loop(listener: Arc<UnixListener>, shared: Arc<LaneShared>) {
    let mut conns = JoinSet::new();
    let source = {
        let shared = shared.clone();
        move || {
            read_settings(&shared)
                .filter(|s| !s.responder)
                .map(|s| meter::Source {
                    meter: s.meter.clone(),
                    route: s.route.clone(),
                    password: s.password.clone(),
                    interval: s.meter_interval,
                })
        }
    };
    let metering = meter::run(source);
    tokio::pin!(metering);
    loop {
        tokio::select! {
            () = &mut metering => {}
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    // Counted here, in the order of arrival: the first
                    // `max_connections` are served, whichever task runs first.
                    let settings = read_settings(&shared);
                    let seat = settings.as_ref().map(|s| Seat::take(&shared, s.max_connections));
                    let shared = shared.clone();
                    conns.spawn(async move { client(stream, shared, settings, seat).await });
                }
                Err(e) => {
                    // EMFILE and the like: do not spin.
                    log::error!("lane {}: accept failed: {e}", shared.name);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// A connection's place on its lane: among those served, among those
/// being refused, or neither (a flood past both); given back on drop.
struct Seat {
    shared: Arc<LaneShared>,
    kind: SeatKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SeatKind {
    Served,
    Refused,
    Dropped,
}

impl Seat {
    /// Takes a place among at most `max` served connections, else among
    /// at most `max` being refused (each is answered, then lingers up to
    /// a second), else none.
    fn take(shared: &Arc<LaneShared>, max: usize) -> Seat {
        let seat = |kind| Seat {
            shared: shared.clone(),
            kind,
        };
        if shared.connections.fetch_add(1, Ordering::Relaxed) < max {
            return seat(SeatKind::Served);
        }
        shared.connections.fetch_sub(1, Ordering::Relaxed);
        if shared.refusing.fetch_add(1, Ordering::Relaxed) < max {
            return seat(SeatKind::Refused);
        }
        shared.refusing.fetch_sub(1, Ordering::Relaxed);
        seat(SeatKind::Dropped)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        match self.kind {
            SeatKind::Served => self.shared.connections.fetch_sub(1, Ordering::Relaxed),
            SeatKind::Refused => self.shared.refusing.fetch_sub(1, Ordering::Relaxed),
            SeatKind::Dropped => 0,
        };
    }
}

async fn client(
    stream: tokio::net::UnixStream,
    shared: Arc<LaneShared>,
    settings: Option<Arc<LaneSettings>>,
    seat: Option<Seat>,
) {
    let (Some(settings), Some(seat)) = (settings, seat) else {
        serve::refuse(
            stream,
            &format!(
                "ERR lane unavailable: agent '{}' is not configured",
                shared.name
            ),
        )
        .await;
        return;
    };
    match seat.kind {
        SeatKind::Served => serve::serve(stream, settings).await,
        SeatKind::Refused => {
            log::warn!(
                "lane {}: refused a connection over the limit of {}",
                shared.name,
                settings.max_connections
            );
            serve::refuse(
                stream,
                &format!(
                    "OXIDEPM connections: agent '{}' has {} connections open, the most its \
                     lane takes (lanes.max_connections); close one and try again",
                    shared.name, settings.max_connections
                ),
            )
            .await;
        }
        // Answering costs a task and a second each: not for a flood.
        SeatKind::Dropped => {}
    }
    drop(seat);
}

/// Runs the proxy until SIGTERM or SIGINT; SIGHUP reloads the
/// configuration. Must be called inside a tokio runtime.
pub async fn run(config_path: PathBuf, activated: Vec<ActivatedSocket>) -> Result<(), RunError> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k| signal(k).map_err(RunError::Signals);
    let mut hup = sig(SignalKind::hangup())?;
    let mut term = sig(SignalKind::terminate())?;
    let mut int = sig(SignalKind::interrupt())?;
    let (proxy, report) = Proxy::start(config_path, activated, Handle::current())?;
    log::info!("lane proxy started: {report}");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    loop {
        tokio::select! {
            _ = hup.recv() => match proxy.reload() {
                Ok(report) => log::info!("configuration reloaded: {report}"),
                Err(e) => log::error!("reload failed, previous configuration kept: {e}"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    log::info!("lane proxy stopping");
    proxy.shutdown();
    Ok(())
}
