//! The bridge's side of the lanes: its configuration, the app that runs
//! it, and the routing table with its counters.
//!
//! A route whose agent is not (or no longer) defined is parked, not
//! dropped and not a reason to refuse the bridge's configuration: the
//! bridge sends its messages to `bridge:unrouted` with the reason, and
//! `route list` shows it. It is in force again once the agent is defined.

use super::bridge_user::{
    share_dir, share_socket, write_private, BridgeUser, Problem, DEFAULT_BRIDGE_USER,
    REDIS_DIR_MODE, SHARED_DIR_MODE,
};
use super::error::Error;
use super::handle::{AgentLane, Lanes};
use super::layout::BRIDGE_APP;
use super::programs::sibling;
use super::report::group_pending;
use super::server::Con;
use super::settings::{LanesSettings, SOURCE_TABLES};
use super::source_secret;
use super::system_apps::{ensure_app, find_app, is_running};
use crate::supervise::{control, lock, Shared};
use oxidepm_lanes::bridge_config::{BridgeConfig, RouteConfig, STATUS_KEY};
use oxidepm_lanes::consult::CONSULT;
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::sources::{SecretOrigin, SecretSpec};
use oxidepm_lanes::stream_key::{BRIDGE_GROUP, STATS_KEY, UNROUTED_KEY};
use oxidepm_lanes::{AclUser, Secret, StreamKey};
use oxidepm_proto::{
    Actor, AppKind, AppSpec, BridgeCounters, Counters, Route, RouteOrigin, RouteReport,
    RoutesReport, SourceReport,
};
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What is read of the running bridge: its counters, why its last
/// reload failed (if it did) and its sources.
type BridgeRead = (Counters, Option<String>, Vec<SourceReport>);

/// A secret a source of the bridge's configuration needs: the source, the
/// secret, and what the person wrote (read and checked before anything is
/// written; `None` for one the daemon makes, copied as it is).
type Handed = (&'static str, SecretSpec, Option<Secret>);

impl Lanes {
    /// Routes: those of daemon.toml (`config`) then those added at runtime.
    pub fn routes(&self, shared: &Shared) -> Vec<(Route, RouteOrigin)> {
        let mut out: Vec<(Route, RouteOrigin)> = self
            .settings
            .routes
            .iter()
            .cloned()
            .map(|r| (r, RouteOrigin::Config))
            .collect();
        match lock(shared).store.routes() {
            Ok(rs) => out.extend(rs.into_iter().map(|r| (r, RouteOrigin::Runtime))),
            Err(e) => log::error!("cannot read routes: {e}"),
        }
        out
    }

    /// Writes the bridge's files and runs it (an adapter app with the
    /// `bridge` identity; as its own user when the daemon is root, see
    /// [`bridge_user`](super::bridge_user)), or has it reload (SIGHUP) when
    /// it runs. When it cannot run as it must, it is stopped and
    /// `oxidepm lanes` says why.
    pub async fn ensure_bridge(&self, shared: &Shared, agents: &[AgentLane]) -> Result<(), Error> {
        let Some(exe) = sibling("oxidepm-bridge") else {
            log::warn!("oxidepm-bridge is missing beside oxidepmd: no bridge runs");
            return Ok(());
        };
        let l = &self.layout;
        source_secret::ensure_made(&l.secrets_dir())
            .map_err(|(source_name, error)| Error::SourceToken { source_name, error })?;
        if let Err(e) = self.refresh_server_agents().await {
            log::warn!("lanes: the other hosts' agents cannot be read now: {e}");
        }
        let routes: Vec<Route> = self.routes(shared).into_iter().map(|(r, _)| r).collect();
        let Some(conf) = self.bridge_conf(agents, &routes)? else {
            log::info!(
                "lanes: no source is configured ({}); no bridge runs",
                source_tables()
            );
            return Ok(());
        };
        // A secret the person wrote (the bot token) is checked before
        // anything is written: one others could have read is not handed on.
        let handed = match handed_secrets(&l.secrets_dir(), &conf) {
            Ok(h) => h,
            Err(problem) => return self.keep_bridge_stopped(shared, problem).await,
        };
        let user = match self.prepare_bridge_user(agents, &conf).await {
            Ok(u) => u,
            Err(problem) => return self.keep_bridge_stopped(shared, problem).await,
        };
        self.write_bridge_files(&conf, user.as_ref(), &handed)
            .map_err(Error::BridgeConf)?;
        self.set_bridge_problem(None);

        let mut spec = AppSpec::new(
            BRIDGE_APP,
            exe.display().to_string(),
            vec!["--config".into(), l.bridge_conf().display().to_string()],
        );
        spec.kind = AppKind::Adapter;
        spec.protected = true;
        spec.user = user.map(|u| u.name);
        let id = find_app(shared, BRIDGE_APP);
        match id {
            Some(id) if is_running(shared, id) => {
                let same = lock(shared).app(id).is_some_and(|a| a.spec == spec);
                if same {
                    if let Some(pid) = lock(shared).app(id).and_then(|a| a.rt.pid) {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid as i32),
                            nix::sys::signal::Signal::SIGHUP,
                        );
                    }
                    return Ok(());
                }
                // Another program, configuration or user (an older daemon
                // ran it as root): a reload would keep the old process.
                let actor = Actor::system("lanes");
                lock(shared).replace_spec(id, spec, &actor)?;
                control::restart(shared, &[id], &actor).await?;
                Ok(())
            }
            _ => ensure_app(shared, spec, id).await,
        }
    }

    /// The bridge's own user when the daemon is root (made when missing),
    /// with the home, `bridge/` and `redis/` opened to it just enough, and
    /// the Maildir and the webhook's port checked for it; `None` when the
    /// daemon is not root and runs the bridge as itself.
    async fn prepare_bridge_user(
        &self,
        agents: &[AgentLane],
        conf: &BridgeConfig,
    ) -> Result<Option<BridgeUser>, Problem> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        let name = self
            .settings
            .bridge_user
            .as_deref()
            .unwrap_or(DEFAULT_BRIDGE_USER);
        let user = BridgeUser::get_or_make(name).await?;
        if let Some(a) = agents.iter().find(|a| a.uid == Some(user.uid)) {
            return Err(Problem::SharedWithAgent {
                name: user.name,
                agent: a.name.to_string(),
            });
        }
        if let Some(w) = &conf.webhook {
            user.check_port(w.settings.listen.port())?;
        }
        let l = &self.layout;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Problem::Io { path, source }
        };
        std::fs::set_permissions(l.home.root(), std::fs::Permissions::from_mode(0o711))
            .map_err(io(l.home.root()))?;
        share_dir(&l.bridge_dir(), Some(&user), SHARED_DIR_MODE).map_err(io(&l.bridge_dir()))?;
        // A shared server is reached over the network: no socket to share.
        if !self.is_shared() {
            share_dir(&l.redis_dir(), Some(&user), REDIS_DIR_MODE).map_err(io(&l.redis_dir()))?;
            share_socket(&l.redis_socket(), &user).map_err(io(&l.redis_socket()))?;
        }
        user.reaches(&l.bridge_conf())?;
        if !self.is_shared() {
            user.reaches(&l.redis_socket())?;
        }
        if let Some(e) = &conf.email {
            user.prepare_maildir(Path::new(&e.maildir))?;
        }
        Ok(Some(user))
    }

    /// Records why the bridge cannot run, and stops it if it runs: never
    /// as another user than it should.
    async fn keep_bridge_stopped(&self, shared: &Shared, problem: Problem) -> Result<(), Error> {
        log::error!("lanes: the bridge does not run: {problem}");
        self.set_bridge_problem(Some(problem.to_string()));
        // Whatever its state: one waiting to be restarted must not be.
        if let Some(id) = find_app(shared, BRIDGE_APP) {
            control::stop(shared, &[id], &Actor::system("lanes"), false).await;
        }
        Ok(())
    }

    fn set_bridge_problem(&self, problem: Option<String>) {
        *self
            .state
            .bridge_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// Why the bridge does not run, when the daemon decided it cannot.
    pub fn bridge_problem(&self) -> Option<String> {
        self.state
            .bridge_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Writes everything the bridge reads into `bridge/`, as `user`'s
    /// files: its configuration, and copies of its password and of the
    /// secrets of its sources (`handed`; the canonical ones stay in
    /// `secrets/`); a secret of a source it does not serve is removed.
    fn write_bridge_files(
        &self,
        conf: &BridgeConfig,
        user: Option<&BridgeUser>,
        handed: &[Handed],
    ) -> io::Result<()> {
        let l = &self.layout;
        self.write_bridge_json(conf, user)?;
        let copy = |from: PathBuf, to: PathBuf| -> io::Result<()> {
            let secret = Secret::read(&from).map_err(io::Error::other)?;
            write_private(&to, secret.expose().as_bytes(), user)
        };
        copy(
            secrets::path(&l.secrets_dir(), AclUser::Bridge),
            l.bridge_password(),
        )?;
        for (source, spec) in LanesSettings::source_secrets() {
            let to = spec.file(&l.bridge_dir());
            match handed.iter().find(|(s, ..)| *s == source) {
                Some((_, _, Some(given))) => write_private(&to, given.expose().as_bytes(), user)?,
                Some((_, _, None)) => copy(l.secrets_dir().join(spec.name), to)?,
                None => {
                    let _ = std::fs::remove_file(to);
                }
            }
        }
        let _ = std::fs::remove_file(l.old_bridge_conf());
        Ok(())
    }

    /// Writes the bridge's configuration; false (and nothing written) when
    /// no source has settings.
    #[cfg(test)]
    pub(super) fn write_bridge_conf(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<bool, Error> {
        let Some(conf) = self.bridge_conf(agents, routes)? else {
            return Ok(false);
        };
        self.write_bridge_json(&conf, None)
            .map_err(Error::BridgeConf)?;
        Ok(true)
    }

    fn write_bridge_json(&self, conf: &BridgeConfig, user: Option<&BridgeUser>) -> io::Result<()> {
        share_dir(&self.layout.bridge_dir(), user, SHARED_DIR_MODE)?;
        write_private(&self.layout.bridge_conf(), &serde_json::to_vec(conf)?, user)
    }

    /// The bridge's configuration for `agents` and `routes`: the sources
    /// it has settings for, and their routes; `None` when there are none.
    fn bridge_conf(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<Option<BridgeConfig>, Error> {
        let served = self.served_sources();
        if served.is_empty() {
            return Ok(None);
        }
        let mut conf = self.bridge_base(agents);
        conf.routes = routes
            .iter()
            .filter(|r| served.contains(&r.source))
            .filter_map(|r| match route_config(r) {
                Ok(c) => Some(c),
                Err(e) => {
                    // Shown by `route list`; the other routes go on.
                    log::warn!("route {} left out: {e}", r.describe());
                    None
                }
            })
            .collect();
        conf.sources = served;
        self.source_sections(&mut conf);
        Ok(Some(conf))
    }

    /// The sources the bridge serves: those it has settings for, and
    /// consult when agents consult each other. Outboxes of the others keep
    /// their entries until one is configured.
    fn served_sources(&self) -> Vec<String> {
        let s = &self.settings;
        let tables = s.served_tables();
        s.sources
            .iter()
            .filter(|name| tables.contains(&name.as_str()))
            .cloned()
            .chain(self.consults().then(|| CONSULT.to_string()))
            .collect()
    }

    /// The bridge's configuration without sources and routes: its Redis,
    /// its user, its agents and its bounds.
    fn bridge_base(&self, agents: &[AgentLane]) -> BridgeConfig {
        let l = &self.layout;
        let mut conf = match &self.settings.redis_url {
            Some(url) => {
                let mut c = BridgeConfig::new(url.clone(), l.bridge_password());
                c.tls = self.settings.tls_files();
                // One consumer per host in the one group `bridge`.
                c.outbox.consumer = self.host_id.clone();
                c
            }
            None => BridgeConfig::new(l.redis_socket(), l.bridge_password()),
        };
        conf.key_form = self.settings.key_form();
        conf.user = self.user_name(&AclUser::Bridge);
        // On a shared server every bridge serves every host's agents.
        conf.agents = self.bridge_agents(agents);
        conf.shared_routes = self.routes_shared();
        if let Some(m) = self.settings.maxlen {
            conf.inbox_maxlen = m;
        }
        let b = &self.settings.bridge;
        let o = &mut conf.outbox;
        o.max_entry_bytes = b.max_entry_bytes.unwrap_or(o.max_entry_bytes);
        o.buffer_bytes = b.buffer_bytes.unwrap_or(o.buffer_bytes);
        o.dead_maxlen = b.dead_maxlen.unwrap_or(o.dead_maxlen);
        o.dead_entry_bytes = b.dead_entry_bytes.unwrap_or(o.dead_entry_bytes);
        conf.default_agent = self.settings.default_agent.clone();
        conf
    }

    /// Each source's section: its settings of daemon.toml as they are,
    /// with the file of its secret (a copy in `bridge/`) where it has one.
    fn source_sections(&self, conf: &mut BridgeConfig) {
        self.settings.fill_sections(conf, &self.layout.bridge_dir());
        conf.consult = self.consults().then(|| self.consult_config());
    }

    /// The routing table with where each route comes from, the default
    /// agent and the bridge's counters.
    pub async fn routes_report(&self, shared: &Shared) -> Result<RoutesReport, Error> {
        let mut all = self.routes(shared);
        all.extend(
            self.shared_routes(shared)
                .await
                .into_iter()
                .map(|r| (r, RouteOrigin::Runtime)),
        );
        let plain: Vec<Route> = all.iter().map(|(r, _)| r.clone()).collect();
        let (parked, default_agent_parked) = self.parked(&self.agents(shared), &plain)?;
        let routes: Vec<RouteReport> = all
            .into_iter()
            .zip(parked)
            .map(|((r, origin), why)| RouteReport {
                parked: why,
                ..RouteReport::new(r, origin)
            })
            .collect();
        let (counters, reload_error, sources) = self.read_bridge(shared).await;
        Ok(RoutesReport {
            problem: self.bridge_problem(),
            counters,
            default_agent: self.settings.default_agent.as_ref().map(|a| a.to_string()),
            default_agent_parked,
            reload_error,
            routes,
            consult: self.consult_report(),
            sources,
        })
    }

    /// What the running bridge wrote into Redis: its counters (`None`
    /// when the read itself failed), why its last reload failed, and its
    /// sources.
    async fn read_bridge(
        &self,
        shared: &Shared,
    ) -> (Option<Counters>, Option<String>, Vec<SourceReport>) {
        let outboxes: Vec<String> = self
            .agents(shared)
            .iter()
            .flat_map(|a| {
                self.settings
                    .sources
                    .iter()
                    .map(String::as_str)
                    .chain(self.consults().then_some(CONSULT))
                    .map(move |s| StreamKey::outbox(&a.name, s).to_string())
            })
            .collect();
        let Ok((user, pw)) = self.admin() else {
            return (Some(Counters::Unread {}), None, Vec::new());
        };
        let Ok(mut con) = self.server().connect(&user, &pw).await else {
            return (Some(Counters::Unread {}), None, Vec::new());
        };
        let (c, e, s) = read_bridge_status(&mut con, &outboxes).await;
        (Some(c), e, s)
    }

    /// Checks a route given at runtime.
    pub fn check_route(&self, shared: &Shared, r: &Route) -> Result<(), Error> {
        r.check()?;
        if !self.settings.sources.contains(&r.source) {
            return Err(Error::UnknownSource {
                family: r.source.clone(),
                sources: self.settings.sources.clone(),
            });
        }
        let own = self.agents(shared);
        if !self
            .bridge_agents(&own)
            .iter()
            .any(|a| a.as_str() == r.agent.as_str())
        {
            return Err(Error::NoSuchAgent {
                agent: r.agent.clone(),
            });
        }
        // The bridge keeps the first of two routes for the same messages;
        // a second one to another agent would do nothing but confuse.
        if let Some((existing, _)) = self
            .routes(shared)
            .into_iter()
            .find(|(o, _)| same_match(o, r) && o.agent != r.agent)
        {
            return Err(Error::RouteConflict {
                route: Box::new(r.clone()),
                existing: Box::new(existing),
            });
        }
        Ok(())
    }

    /// Why each of `routes` is parked (`None`: in force) with these
    /// agents, and why the default agent is, as the bridge decides it.
    fn parked(
        &self,
        agents: &[AgentLane],
        routes: &[Route],
    ) -> Result<(Vec<Option<String>>, Option<String>), Error> {
        let Some(conf) = self.bridge_conf(agents, routes)? else {
            let why = format!(
                "no source has settings ({}): no bridge runs",
                source_tables()
            );
            return Ok((vec![Some(why); routes.len()], None));
        };
        let plan = conf.route_plan();
        let each = routes
            .iter()
            .map(|r| {
                if !conf.sources.contains(&r.source) {
                    return Some(format!(
                        "the bridge does not serve source {:?}: it has no [lanes.{}] section",
                        r.source, r.source
                    ));
                }
                match route_config(r) {
                    Ok(c) => plan.why_parked(&c).map(|w| w.to_string()),
                    Err(e) => Some(e.to_string()),
                }
            })
            .collect();
        Ok((each, plan.default_parked.map(|w| w.to_string())))
    }

    /// What deleting agent `agent` does to the routes: `None` when it has
    /// none (nor is it the default agent).
    pub fn parked_by_deleting(&self, shared: &Shared, agent: &str) -> Option<String> {
        let mine: Vec<String> = self
            .routes(shared)
            .into_iter()
            .filter(|(r, _)| r.agent == agent)
            .map(|(r, origin)| format!("{} ({})", r.describe(), origin.as_str()))
            .collect();
        let default = self
            .settings
            .default_agent
            .as_ref()
            .is_some_and(|d| d.as_str() == agent);
        if mine.is_empty() && !default {
            return None;
        }
        let mut what = Vec::new();
        if !mine.is_empty() {
            what.push(format!("its routes are parked: {}", mine.join(", ")));
        }
        if default {
            what.push("it was the default agent, which is parked".to_string());
        }
        Some(format!(
            "{}; their messages go to bridge:unrouted until an agent {agent:?} is defined again \
             (`oxidepm route list` shows them; `oxidepm route rm` removes a runtime route)",
            what.join("; ")
        ))
    }
}

/// The sources' tables of daemon.toml, as messages list them
/// (`[lanes.webhook], [lanes.email], …`).
fn source_tables() -> String {
    SOURCE_TABLES
        .iter()
        .map(|t| format!("[lanes.{t}]"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The secrets the sources of `conf` need, those the person wrote read
/// and checked; the problem of the first that cannot be handed on.
fn handed_secrets(secrets_dir: &Path, conf: &BridgeConfig) -> Result<Vec<Handed>, Problem> {
    let sections = conf.sections();
    let mut handed = Vec::new();
    for (source, spec) in LanesSettings::source_secrets() {
        if !sections.contains(&source) {
            continue;
        }
        let given = match spec.origin {
            SecretOrigin::Made => None,
            SecretOrigin::Given { .. } => Some(
                source_secret::read(secrets_dir, source, spec).map_err(|error| {
                    Problem::SourceSecret {
                        source_name: source,
                        error,
                    }
                })?,
            ),
        };
        handed.push((source, spec, given));
    }
    Ok(handed)
}

/// Reads the bridge's status hash, its counters and the pending entries
/// of `outboxes` over `con`.
async fn read_bridge_status(con: &mut Con, outboxes: &[String]) -> BridgeRead {
    let status: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(STATUS_KEY)
        .query_async(&mut *con)
        .await
        .unwrap_or_default();
    let reload_error = status.get("reload_error").map(|e| {
        format!(
            "{e} (at {}); the bridge runs with its previous configuration",
            status.get("reload_failed_at").map_or("?", String::as_str)
        )
    });
    let sources = oxidepm_lanes::source_status::read(&status)
        .into_iter()
        .map(|s| SourceReport {
            error: s.error,
            failed_at: s.failed_at,
            name: s.name,
            up: s.up,
        })
        .collect();
    let mut pending: i64 = 0;
    for k in outboxes {
        pending += group_pending(con, k, BRIDGE_GROUP).await;
    }
    let stats: HashMap<String, i64> = redis::cmd("HGETALL")
        .arg(STATS_KEY)
        .query_async(&mut *con)
        .await
        .unwrap_or_default();
    let stat = |k: &str| stats.get(k).copied().unwrap_or(0);
    let counters = Counters::Read(BridgeCounters {
        dead: stat("dead"),
        delivered: stat("delivered"),
        malformed: stat("malformed"),
        pending,
        retried: stat("retried"),
        routed: stat("routed"),
        too_large: stat("too_large"),
        trimmed: stat("trimmed"),
        waited: stat("waited"),
        unrouted: stat("unrouted"),
        unrouted_stream: redis::cmd("XLEN")
            .arg(UNROUTED_KEY)
            .query_async::<i64>(&mut *con)
            .await
            .unwrap_or(0),
        delivery_ms: stat("delivery_ms"),
        lost: stat("lost"),
    });
    (counters, reload_error, sources)
}

/// The bridge's form of a route, or why its agent is not an agent name.
pub(super) fn route_config(r: &Route) -> Result<RouteConfig, Error> {
    r.try_map_agent(|a| a.parse())
        .map_err(|source| Error::RouteAgent {
            route: Box::new(r.clone()),
            source,
        })
}

/// Whether two routes match the same messages (addresses without regard
/// to case).
fn same_match(a: &Route, b: &Route) -> bool {
    let lower = |v: &Option<String>| v.as_ref().map(|s| s.to_lowercase());
    a.source == b.source
        && a.channel == b.channel
        && a.guild == b.guild
        && lower(&a.address) == lower(&b.address)
}
