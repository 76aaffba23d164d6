//! Bringing the lanes in line with the defined agents: the private Redis
//! (a `system` app), its ACL users, the auth proxy (another `system` app),
//! each agent's streams and lane description. Everything is derived from
//! the set of agent apps, so one `reconcile` serves start-up, a new agent
//! and a deleted one alike.

use super::bridge_user;
use super::budgets;
use super::conf_file::write_atomic;
use super::error::Error;
use super::layout::{self, PROXY_APP, REDIS_APP};
use super::live::{apply_live, set_maxmemory, NamedUser, Provision};
use super::purge;
use super::registry;
use super::responders::{self, ResponderLane};
use super::settings::Backend;
use super::system_apps::{ensure_app, find_app, is_running};
use crate::supervise::{lock, spawn, Shared};
use oxidepm_lanes::acl::{self, AclUser};
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::{AgentName, Secret};
use oxidepm_proto::{AppKind, AppSpec};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use super::handle::{AgentLane, Lanes};
pub(crate) use super::programs::{find_program, sibling};

/// ACL users with their passwords.
type Users = Vec<(AclUser, Secret)>;

/// What one reconcile pass found, for provisioning Redis.
struct Pass<'a> {
    agents: &'a [AgentLane],
    responders: &'a [ResponderLane],
    users: &'a Users,
    /// Agents whose lane is new (their password too).
    fresh: Vec<AgentName>,
    gone: &'a [purge::Gone],
    gone_responders: &'a [String],
    families: Vec<String>,
}

impl Lanes {
    /// Checks agent specs before they are defined: names, and that lanes
    /// can be had at all.
    pub fn check_agents(&self, specs: &[AppSpec]) -> Result<(), Error> {
        for s in specs.iter().filter(|s| s.kind == AppKind::Agent) {
            AgentName::with_families(&s.name, &self.settings.families())?;
            if self.settings.backend == Backend::Redis {
                self.proxy_program()?;
                if !self.is_shared() {
                    self.programs()?;
                }
            }
        }
        Ok(())
    }

    fn proxy_program(&self) -> Result<PathBuf, Error> {
        sibling("oxidepm-lane-proxy").ok_or(Error::NoProxyProgram)
    }

    fn programs(&self) -> Result<(PathBuf, PathBuf), Error> {
        let redis = find_program("redis-server").ok_or(Error::NoRedisServer)?;
        let proxy = sibling("oxidepm-lane-proxy").ok_or(Error::NoProxyProgram)?;
        Ok((redis, proxy))
    }

    /// The agents now defined. An agent whose name is not one (only a
    /// state from before names were checked can hold it) gets no lane.
    pub fn agents(&self, shared: &Shared) -> Vec<AgentLane> {
        let s = lock(shared);
        let own = nix::unistd::getuid().as_raw();
        s.apps()
            .filter(|a| a.spec.kind == AppKind::Agent)
            .filter_map(|a| match a.spec.name.parse::<AgentName>() {
                Ok(name) => Some((a, name)),
                Err(e) => {
                    log::warn!("lanes: {e}; agent {} gets no lane", a.spec.name);
                    None
                }
            })
            .map(|(a, name)| AgentLane {
                name,
                uid: a
                    .spec
                    .user
                    .as_deref()
                    .and_then(|u| spawn::resolve_user(u).ok())
                    .map(|c| c.uid.as_raw())
                    .filter(|u| *u != own),
            })
            .collect()
    }

    /// Makes Redis, its users, the proxy and the agents' files match the
    /// defined agents plus `extra` (agents about to be defined).
    pub async fn reconcile(&self, shared: &Shared, extra: &[AgentLane]) -> Result<(), Error> {
        self.reconcile_with(shared, extra, &[]).await
    }

    /// [`Lanes::reconcile`], with the responder apps about to be defined.
    pub async fn reconcile_with(
        &self,
        shared: &Shared,
        extra: &[AgentLane],
        extra_responders: &[ResponderLane],
    ) -> Result<(), Error> {
        if self.settings.backend == Backend::Off {
            return Ok(());
        }
        let _one_at_a_time = self.state.reconciling.lock().await;
        let (mut agents, mut responders) = self.wanted(shared, extra, extra_responders);
        let redis_id = find_app(shared, REDIS_APP);
        let set_up = redis_id.is_some() || find_app(shared, PROXY_APP).is_some();
        if agents.is_empty() && responders.is_empty() && !set_up {
            return Ok(());
        }
        let on_shared = self.is_shared();
        let proxy_exe = self.proxy_program()?;
        if on_shared {
            // Before anything is made: a name another host holds gets
            // nothing here.
            let lost = self
                .claim_names(extra, extra_responders, &agents, &responders)
                .await?;
            agents.retain(|a| !lost.contains(&a.name.to_string()));
            responders.retain(|r| !lost.contains(&r.name.to_string()));
        }
        // Responders' sockets are reached like agents' (see prepare_dirs).
        let lanes: Vec<AgentLane> = agents
            .iter()
            .cloned()
            .chain(responders.iter().map(|r| AgentLane {
                name: r.name.clone(),
                uid: r.uid,
            }))
            .collect();
        self.prepare_dirs(&lanes).map_err(Error::Dirs)?;
        let families = self.families_with(&responders);
        *self
            .state
            .families
            .write()
            .unwrap_or_else(|p| p.into_inner()) = families.clone();
        let (users, fresh) = self.users(&agents, &responders).map_err(Error::Passwords)?;
        let gone = purge::gone(&self.layout.secrets_dir(), &users);
        let gone_responders = responders::gone(&self.layout.secrets_dir(), &users);
        let admin = self
            .bring_up_redis(shared, redis_id, &users, &families)
            .await?;
        let pass = Pass {
            agents: &agents,
            responders: &responders,
            users: &users,
            fresh,
            gone: &gone,
            gone_responders: &gone_responders,
            families,
        };
        self.provision(pass, admin).await?;
        purge::forget(&self.layout.secrets_dir(), &gone);
        responders::forget(&self.layout.secrets_dir(), &gone_responders);
        self.write_proxy_conf(&agents, &responders)
            .map_err(Error::ProxyConf)?;
        self.bring_up_proxy(shared, &proxy_exe).await?;
        self.wait_for_sockets(&lanes).await;
        responders::wait_removed(&self.layout, &gone_responders).await;
        self.write_descriptions(&agents);
        let names: Vec<AgentName> = agents.iter().map(|a| a.name.clone()).collect();
        self.write_responder_descriptions(&responders, &names);
        self.ensure_bridge(shared, &agents).await
    }

    /// The agents and responders to serve: those defined, plus those about
    /// to be.
    fn wanted(
        &self,
        shared: &Shared,
        extra: &[AgentLane],
        extra_responders: &[ResponderLane],
    ) -> (Vec<AgentLane>, Vec<ResponderLane>) {
        let mut agents = self.agents(shared);
        for e in extra {
            if !agents.iter().any(|a| a.name == e.name) {
                agents.push(e.clone());
            }
        }
        let mut responders = self.responders(shared);
        for e in extra_responders {
            // As about to be defined: an update may change its uid.
            responders.retain(|r| r.name != e.name);
            responders.push(e.clone());
        }
        (agents, responders)
    }

    /// The admin user and its password; on the private Redis, with its
    /// files written and the server started when it does not run.
    async fn bring_up_redis(
        &self,
        shared: &Shared,
        redis_id: Option<u64>,
        users: &Users,
        families: &[String],
    ) -> Result<(String, Secret), Error> {
        if self.is_shared() {
            return self.admin();
        }
        let (redis_exe, _) = self.programs()?;
        let running = redis_id.is_some_and(|id| is_running(shared, id));
        // Written even when Redis runs: what it reads at its next start
        // (after a crash, too) must be today's settings.
        self.write_redis_conf().map_err(Error::RedisConf)?;
        if !running {
            write_atomic(
                &self.layout.acl_file(),
                acl::acl_file(users, families).as_bytes(),
            )
            .map_err(Error::RedisConf)?;
            let spec = self.redis_spec(&redis_exe);
            ensure_app(shared, spec, redis_id).await?;
        }
        Ok((AclUser::Admin.to_string(), users[0].1.clone()))
    }

    /// Applies one pass to the running Redis as `admin`: the users, the
    /// keys of gone lanes, the groups, the responders' keys and groups,
    /// and then the names given back (shared) or `maxmemory` (private).
    async fn provision(&self, pass: Pass<'_>, admin: (String, Secret)) -> Result<(), Error> {
        let on_shared = self.is_shared();
        // On a shared server, only what this host still holds is deleted.
        let (own, not_ours) = if on_shared {
            let (own, not_ours) = self.own_scope(pass.gone, pass.gone_responders).await?;
            (Some(own), not_ours)
        } else {
            (None, Vec::new())
        };
        let named: Vec<NamedUser> = pass
            .users
            .iter()
            .map(|(u, pw)| (self.user_name(u), u.clone(), pw.clone()))
            .collect();
        let names: Vec<AgentName> = pass.agents.iter().map(|a| a.name.clone()).collect();
        let responder_names: Vec<AgentName> =
            pass.responders.iter().map(|r| r.name.clone()).collect();
        let gone_r: Vec<String> = pass
            .gone_responders
            .iter()
            .filter(|u| !not_ours.contains(u))
            .cloned()
            .collect();
        // Gone agents' keys, and whatever lies under the name of an agent
        // whose lane is new.
        let purged: Vec<AgentName> = pass
            .gone
            .iter()
            .filter(|g| !not_ours.contains(&g.secret))
            .filter_map(|g| g.agent.clone())
            .chain(pass.fresh)
            .collect();
        // The names to give back once their users and keys are gone.
        let released: Vec<String> = purged_names(pass.gone, &gone_r)
            .into_iter()
            .filter(|n| !names.iter().any(|a| a.as_str() == n))
            .collect();
        let server = self.server();
        let p = Provision {
            server: &server,
            admin_user: &admin.0,
            admin_pw: &admin.1,
            users: &named,
            agents: &names,
            families: &pass.families,
            purged: &purged,
            own,
        };
        let mut con = apply_live(&p).await?;
        let scope = on_shared.then_some(names.as_slice());
        responders::apply(&mut con, &gone_r, &responder_names, &names, scope).await?;
        if on_shared {
            registry::release(&mut con, &self.host_id, &released)
                .await
                .map_err(|source| Error::Redis {
                    command: format!("EVAL (release {released:?} in {})", registry::REGISTRY_KEY),
                    source,
                })
        } else {
            // A shared server's memory is its operator's to bound.
            set_maxmemory(&mut con, budgets::maxmemory(&self.settings)).await
        }
    }

    /// Has the proxy read its new configuration: SIGHUP when it runs,
    /// else started (or defined).
    async fn bring_up_proxy(&self, shared: &Shared, proxy_exe: &Path) -> Result<(), Error> {
        let proxy_id = find_app(shared, PROXY_APP);
        match proxy_id {
            Some(id) if is_running(shared, id) => {
                if let Some(pid) = lock(shared).app(id).and_then(|a| a.rt.pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGHUP,
                    );
                }
                Ok(())
            }
            _ => ensure_app(shared, self.proxy_spec(proxy_exe), proxy_id).await,
        }
    }

    fn prepare_dirs(&self, agents: &[AgentLane]) -> std::io::Result<()> {
        let l = &self.layout;
        for d in [l.redis_dir(), l.secrets_dir()] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)?;
            let mode = std::fs::metadata(&d)?.permissions().mode() & 0o7777;
            // redis/ may be the bridge user's to pass through (see
            // bridge_user); anything else is tightened.
            if mode != 0o700 && !(d == l.redis_dir() && mode == bridge_user::REDIS_DIR_MODE) {
                std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(l.lanes_dir())?;
        std::fs::set_permissions(l.lanes_dir(), std::fs::Permissions::from_mode(0o711))?;
        if agents.iter().any(|a| a.uid.is_some()) {
            // Agents running as their own users must be able to reach their
            // socket by name; the home stays unlistable (0711) and every
            // file in it keeps its own private mode.
            std::fs::set_permissions(l.home.root(), std::fs::Permissions::from_mode(0o711))?;
        }
        Ok(())
    }

    /// Every user with its password: the admin user first, then the bridge,
    /// the responders and the agents; and the agents whose password was
    /// made now (their lane is new).
    fn users(
        &self,
        agents: &[AgentLane],
        apps: &[ResponderLane],
    ) -> std::io::Result<(Users, Vec<AgentName>)> {
        let dir = self.layout.secrets_dir();
        secrets::ensure_dir(&dir)?;
        let mut users = vec![AclUser::Admin, AclUser::Bridge];
        users.extend(
            self.settings
                .responders
                .iter()
                .map(|r| AclUser::Responder(r.clone())),
        );
        users.extend(apps.iter().map(|r| AclUser::Responder(r.name.to_string())));
        users.extend(agents.iter().map(|a| AclUser::Agent(a.name.clone())));
        let mut out = Vec::with_capacity(users.len());
        let mut fresh = Vec::new();
        for u in users {
            if let AclUser::Agent(a) = &u {
                if !secrets::path(&dir, &u).exists() {
                    fresh.push(a.clone());
                }
            }
            let pw = secrets::ensure(&dir, &u)?;
            out.push((u, pw));
        }
        // Passwords of agents that are gone are forgotten once their keys
        // are (see purge).
        Ok((out, fresh))
    }

    fn write_redis_conf(&self) -> std::io::Result<()> {
        let l = &self.layout;
        // A root daemon runs the bridge as a user of its own, which reaches
        // the socket through its group (see bridge_user).
        let perm = if nix::unistd::geteuid().is_root() {
            770
        } else {
            700
        };
        // maxmemory-clients: Redis keeps the replies a lane client leaves
        // unread (the proxy reads them only as the client does), and a few
        // bytes of COMMAND DOCS ask for 170 KiB; past a quarter of
        // maxmemory, Redis closes the connections holding the most, not
        // the other agents' writes.
        let conf = format!(
            "# Written by oxidepmd; changes are overwritten.\n\
             port 0\n\
             unixsocket {sock}\n\
             unixsocketperm {perm}\n\
             dir {dir}\n\
             daemonize no\n\
             logfile \"\"\n\
             save \"\"\n\
             appendonly yes\n\
             appendfsync {fsync}\n\
             maxmemory {maxmemory}\n\
             maxmemory-policy noeviction\n\
             maxmemory-clients 25%\n\
             enable-debug-command no\n\
             enable-module-command no\n\
             enable-protected-configs no\n\
             aclfile {acl}\n",
            sock = l.redis_socket().display(),
            dir = l.redis_dir().display(),
            fsync = self.settings.appendfsync,
            acl = l.acl_file().display(),
            maxmemory = budgets::maxmemory(&self.settings),
        );
        write_atomic(&l.redis_conf(), conf.as_bytes())
    }

    fn redis_spec(&self, exe: &Path) -> AppSpec {
        let mut s = AppSpec::new(
            REDIS_APP,
            exe.display().to_string(),
            vec![self.layout.redis_conf().display().to_string()],
        );
        s.kind = AppKind::System;
        s.protected = true;
        s.cwd = Some(self.layout.redis_dir().display().to_string());
        s.kill_timeout_ms = 10_000;
        s
    }

    async fn wait_for_sockets(&self, agents: &[AgentLane]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if agents.iter().all(|a| {
                std::os::unix::net::UnixStream::connect(self.layout.agent_socket(&a.name)).is_ok()
            }) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        log::warn!("lanes: not every agent socket answers after 5 s");
    }

    fn write_descriptions(&self, agents: &[AgentLane]) {
        let families = self.families_now();
        for a in agents {
            let path = self.layout.agent_json(&a.name);
            let text = layout::agent_description(
                &self.layout,
                &a.name,
                &families,
                self.settings.lane_url_scheme,
            )
            .to_string();
            if let Err(e) = write_atomic(&path, text.as_bytes()) {
                log::error!("cannot write {}: {e}", path.display());
                continue;
            }
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
            if let Some(uid) = a.uid {
                let _ = nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(uid)), None);
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.layout.lanes_dir()) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(agent) = name.strip_suffix(".json") {
                    let responder = self.families_now().iter().any(|f| f == agent);
                    if !responder && !agents.iter().any(|a| a.name == agent) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}

/// The agent and responder names of gone lanes' password files.
fn purged_names(gone: &[purge::Gone], gone_responders: &[String]) -> Vec<String> {
    gone.iter()
        .filter_map(|g| g.agent.as_ref().map(|a| a.to_string()))
        .chain(
            gone_responders
                .iter()
                .filter_map(|u| u.strip_prefix(acl::RESPONDER_PREFIX).map(str::to_owned)),
        )
        .collect()
}
