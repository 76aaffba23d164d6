//! The bridge's side of the lanes: its configuration, the app that runs
//! it, and the routing table with its counters.

use super::admin::{
    connect, ensure_app, find_app, group_pending, is_running, sibling, AgentLane, Lanes,
};
use super::bridge_user::{
    share_dir, share_socket, write_private, BridgeUser, Problem, DEFAULT_BRIDGE_USER,
    REDIS_DIR_MODE, SHARED_DIR_MODE,
};
use super::error::Error;
use super::layout::BRIDGE_APP;
use crate::supervise::{control, lock, Shared};
use oxidepm_lanes::bridge_config::{BridgeConfig, EmailConfig, RouteConfig, WebhookConfig};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::stream_key::{BRIDGE_GROUP, STATS_KEY, UNROUTED_KEY};
use oxidepm_lanes::{AclUser, Secret, StreamKey};
use oxidepm_proto::{
    Actor, AppKind, AppSpec, BridgeCounters, Counters, Route, RouteOrigin, RouteReport,
    RoutesReport,
};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The name of the webhook's bearer token among the secrets.
const WEBHOOK_TOKEN: &str = "webhook_token";

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
        secrets::ensure(&l.secrets_dir(), WEBHOOK_TOKEN).map_err(Error::WebhookToken)?;
        let routes: Vec<Route> = self.routes(shared).into_iter().map(|(r, _)| r).collect();
        let Some(conf) = self.bridge_conf(agents, &routes)? else {
            log::info!(
                "lanes: no source is configured ([lanes.webhook], [lanes.email]); no bridge runs"
            );
            return Ok(());
        };
        let user = match self.prepare_bridge_user(agents, &conf) {
            Ok(u) => u,
            Err(problem) => return self.keep_bridge_stopped(shared, problem).await,
        };
        self.write_bridge_files(&conf, user.as_ref())
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
    fn prepare_bridge_user(
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
        let user = BridgeUser::get_or_make(name)?;
        if let Some(a) = agents.iter().find(|a| a.uid == Some(user.uid)) {
            return Err(Problem::SharedWithAgent {
                name: user.name,
                agent: a.name.to_string(),
            });
        }
        if let Some(w) = &conf.webhook {
            user.check_port(w.listen.port())?;
        }
        let l = &self.layout;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Problem::Io { path, source }
        };
        std::fs::set_permissions(l.home.root(), std::fs::Permissions::from_mode(0o711))
            .map_err(io(l.home.root()))?;
        share_dir(&l.bridge_dir(), Some(&user), SHARED_DIR_MODE).map_err(io(&l.bridge_dir()))?;
        share_dir(&l.redis_dir(), Some(&user), REDIS_DIR_MODE).map_err(io(&l.redis_dir()))?;
        share_socket(&l.redis_socket(), &user).map_err(io(&l.redis_socket()))?;
        user.reaches(&l.bridge_conf())?;
        user.reaches(&l.redis_socket())?;
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
    /// webhook token (the canonical ones stay in `secrets/`).
    fn write_bridge_files(&self, conf: &BridgeConfig, user: Option<&BridgeUser>) -> io::Result<()> {
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
        if conf.webhook.is_some() {
            copy(
                secrets::path(&l.secrets_dir(), WEBHOOK_TOKEN),
                l.bridge_token(),
            )?;
        } else {
            let _ = std::fs::remove_file(l.bridge_token());
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
        let l = &self.layout;
        // The bridge serves the sources it has settings for; outboxes of
        // the others keep their entries until one is configured.
        let served: Vec<String> = self
            .settings
            .sources
            .iter()
            .filter(|s| match s.as_str() {
                "webhook" => self.settings.webhook.is_some(),
                "email" => self.settings.email.is_some(),
                _ => false,
            })
            .cloned()
            .collect();
        if served.is_empty() {
            return Ok(None);
        }
        let mut conf = BridgeConfig::new(l.redis_socket(), l.bridge_password());
        conf.agents = agents.iter().map(|a| a.name.clone()).collect();
        conf.routes = routes
            .iter()
            .filter(|r| served.contains(&r.source))
            .map(|r| {
                Ok(RouteConfig {
                    source: r.source.clone(),
                    channel: r.channel.clone(),
                    guild: r.guild.clone(),
                    address: r.address.clone(),
                    agent: r.agent.parse().map_err(|source| Error::RouteAgent {
                        route: Box::new(r.clone()),
                        source,
                    })?,
                })
            })
            .collect::<Result<_, Error>>()?;
        conf.sources = served;
        conf.default_agent = self.settings.default_agent.clone();
        conf.webhook = self.settings.webhook.as_ref().map(|w| WebhookConfig {
            deliver: w.deliver.clone(),
            limits: w.limits,
            ..WebhookConfig::new(w.listen, l.bridge_token())
        });
        conf.email = self.settings.email.as_ref().map(|e| EmailConfig {
            maildir: e.maildir.clone(),
            smtp: e.smtp.clone(),
            from: e.from.clone(),
            domain: e.domain.clone(),
        });
        Ok(Some(conf))
    }

    /// The routing table with where each route comes from, the default
    /// agent and the bridge's counters.
    pub async fn routes_report(&self, shared: &Shared) -> Result<RoutesReport, Error> {
        let routes: Vec<RouteReport> = self
            .routes(shared)
            .into_iter()
            .map(|(r, origin)| RouteReport::new(r, origin))
            .collect();
        let pw = Secret::read(&secrets::path(&self.layout.secrets_dir(), AclUser::Admin));
        let sock = self.layout.redis_socket();
        let outboxes: Vec<String> = self
            .agents(shared)
            .iter()
            .flat_map(|a| {
                self.settings
                    .sources
                    .iter()
                    .map(move |s| StreamKey::outbox(&a.name, s).to_string())
            })
            .collect();
        let counters = match pw {
            Err(_) => Some(Counters::Unread {}),
            Ok(pw) => tokio::task::spawn_blocking(move || -> Counters {
                let Ok(mut con) = connect(&sock, &pw) else {
                    return Counters::Unread {};
                };
                let pending: i64 = outboxes
                    .iter()
                    .map(|k| group_pending(&mut con, k, BRIDGE_GROUP))
                    .sum();
                let stats: std::collections::HashMap<String, i64> = redis::cmd("HGETALL")
                    .arg(STATS_KEY)
                    .query(&mut con)
                    .unwrap_or_default();
                let stat = |k: &str| stats.get(k).copied().unwrap_or(0);
                Counters::Read(BridgeCounters {
                    dead: stat("dead"),
                    delivered: stat("delivered"),
                    pending,
                    retried: stat("retried"),
                    routed: stat("routed"),
                    unrouted: stat("unrouted"),
                    unrouted_stream: redis::cmd("XLEN")
                        .arg(UNROUTED_KEY)
                        .query::<i64>(&mut con)
                        .unwrap_or(0),
                })
            })
            .await
            .ok(),
        };
        Ok(RoutesReport {
            problem: self.bridge_problem(),
            counters,
            default_agent: self.settings.default_agent.as_ref().map(|a| a.to_string()),
            routes,
        })
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
        if !self
            .agents(shared)
            .iter()
            .any(|a| a.name == r.agent.as_str())
        {
            return Err(Error::NoSuchAgent {
                agent: r.agent.clone(),
            });
        }
        Ok(())
    }
}
