//! Answering requests: policy, audit, then the operation.

use super::{Daemon, Peer};
use crate::access::conn::Sink;
use crate::access::{policy, Caller};
use crate::lanes::admin::AgentLane;
use crate::store::{AuditFilter, NewAudit, SnapshotApp};
use crate::supervise::{control, lock, logfile};
use oxidepm_lanes::NameError;
use oxidepm_proto::{
    Actor, AppKind, Class, ErrorBody, ErrorCode, LogLine, LogStream, Op, Request, Response,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

type Answer = Result<Value, ErrorBody>;

fn bad(msg: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::BadRequest, msg)
}

impl Daemon {
    /// Handles one request and writes its answer; an I/O error means the
    /// connection is to be closed.
    pub async fn handle(
        self: &Arc<Self>,
        peer: &Peer,
        req: Request,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let caller = self.caller(peer, req.claim.as_deref());
        let id = req.id;
        match req.op {
            Op::Logs {
                ref target,
                lines,
                follow,
                stream,
            } => {
                let mut apps = Vec::new();
                if let Err(e) = self.authorize(&caller, &req.op, &mut apps) {
                    self.audit(&caller, "logs", &apps, &Err(e.clone()));
                    return sink.send(&Response::err(id, e)).await;
                }
                log::debug!("logs by {} via {}", caller.actor, caller.socket.as_str());
                self.logs(id, target, lines, follow, stream, sink).await
            }
            Op::Kill => {
                let mut apps = Vec::new();
                if let Err(e) = self.authorize(&caller, &req.op, &mut apps) {
                    self.audit(&caller, "kill", &apps, &Err(e.clone()));
                    return sink.send(&Response::err(id, e)).await;
                }
                log::info!("kill by {} via {}", caller.actor, caller.socket.as_str());
                control::shutdown(&self.sup, &caller.actor).await;
                self.audit(&caller, "kill", &apps, &Ok(Value::Null));
                sink.send(&Response::ok(id, json!({"stopped": true})))
                    .await?;
                self.exit.notify_one();
                Ok(())
            }
            _ => {
                let resp = self.answer(&caller, req).await;
                sink.send(&resp).await
            }
        }
    }

    /// Answers one request of `caller`: logs it, checks it, runs it and
    /// audits it. Used by both sockets and by the `ops` responder (where
    /// `logs` answers with the lines at once and `kill` is not offered).
    pub async fn answer(&self, caller: &Caller, req: Request) -> Response {
        let id = req.id;
        let op_name = req.op.name();
        let read = policy::is_read(&req.op);
        if read {
            log::debug!(
                "{op_name} by {} via {}",
                caller.actor,
                caller.socket.as_str()
            );
        } else {
            log::info!(
                "{op_name} by {} via {}",
                caller.actor,
                caller.socket.as_str()
            );
        }
        // Names of the apps the request touches, for the audit and messages.
        let mut apps: Vec<String> = Vec::new();
        let answer = match self.authorize(caller, &req.op, &mut apps) {
            Err(e) => Err(e),
            Ok(()) => self.execute(caller, req.op).await,
        };
        if !read || answer.is_err() {
            self.audit(caller, op_name, &apps, &answer);
        }
        if let Err(e) = &answer {
            if matches!(e.code, ErrorCode::PolicyDenied | ErrorCode::Protected) {
                log::warn!("refused: {}", e.message);
            }
        }
        match answer {
            Ok(v) => Response::ok(id, v),
            Err(e) => Response::err(id, e),
        }
    }

    /// Checks the tier and protection rules; fills `apps` with the names
    /// the request touches. Nothing changes before this passes.
    fn authorize(&self, caller: &Caller, op: &Op, apps: &mut Vec<String>) -> Result<(), ErrorBody> {
        let s = lock(&self.sup);
        let targets = match op {
            Op::Show { target }
            | Op::Start { target }
            | Op::Stop { target }
            | Op::Restart { target }
            | Op::Delete { target }
            | Op::Logs { target, .. } => Some(target.as_str()),
            Op::Flush { target } | Op::Events { target, .. } => target.as_deref(),
            _ => None,
        };
        let ids = match targets {
            Some(t) => s.resolve(t)?,
            None => Vec::new(),
        };
        *apps = s.names(&ids);
        if let Op::Define { apps: specs } = op {
            *apps = specs.iter().map(|a| a.name.clone()).collect();
        }
        policy::check_tier(caller, op, apps)?;
        let existing: Vec<(String, Vec<String>, bool)> = ids
            .iter()
            .filter_map(|id| s.app(*id))
            .map(|a| {
                (
                    a.spec.name.clone(),
                    a.spec.tags.clone(),
                    a.spec.is_protected(),
                )
            })
            .collect();
        if targets.is_some() {
            let scoped: Vec<(String, Vec<String>)> = existing
                .iter()
                .map(|(n, t, _)| (n.clone(), t.clone()))
                .collect();
            policy::check_scope(caller, op.name(), &scoped)?;
        }
        match op {
            Op::Stop { .. } | Op::Restart { .. } | Op::Delete { .. } => {
                let touched: Vec<(String, bool)> =
                    existing.iter().map(|(n, _, p)| (n.clone(), *p)).collect();
                policy::check_protected(caller, op.name(), &touched)?;
            }
            Op::Define { apps: specs } => {
                policy::check_definition(caller, specs)?;
                let scoped: Vec<(String, Vec<String>)> = specs
                    .iter()
                    .map(|sp| (sp.name.clone(), sp.tags.clone()))
                    .collect();
                policy::check_scope(caller, "define", &scoped)?;
                let touched: Vec<(String, bool)> = specs
                    .iter()
                    .filter_map(|spec| s.apps().find(|a| a.spec.name == spec.name))
                    .map(|a| (a.spec.name.clone(), a.spec.is_protected()))
                    .collect();
                policy::check_protected(caller, "change", &touched)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn audit(&self, caller: &Caller, op: &str, apps: &[String], answer: &Answer) {
        let (outcome, message) = match answer {
            Ok(_) => ("ok".to_string(), String::new()),
            Err(e) => (e.code.as_str().to_string(), e.message.clone()),
        };
        let s = lock(&self.sup);
        if let Err(e) = s.store.record_audit(&NewAudit {
            actor: &caller.actor,
            socket: caller.socket.as_str(),
            op,
            apps,
            outcome: &outcome,
            message: &message,
        }) {
            log::error!(
                "cannot write the audit row of {op} by {}: {e}",
                caller.actor
            );
        }
    }

    async fn execute(&self, caller: &Caller, op: Op) -> Answer {
        let actor = &caller.actor;
        let reveal = caller.actor.class == Class::Human;
        match op {
            Op::Ping => Ok(json!({
                "pong": true,
                "version": env!("CARGO_PKG_VERSION"),
                "protocol": oxidepm_proto::PROTOCOL_VERSION,
                "pid": std::process::id(),
                "uptime_ms": self.uptime_ms(),
                "home": self.home.root(),
            })),
            Op::Whoami => Ok(json!({
                "class": caller.actor.class,
                "label": caller.actor.label,
                "actor": caller.actor,
                "socket": caller.socket.as_str(),
                "tier": caller.tier,
            })),
            Op::Status => {
                let s = lock(&self.sup);
                let list: Vec<_> = s.apps().map(|a| a.info(false, reveal, None)).collect();
                Ok(serde_json::to_value(list).unwrap_or_default())
            }
            Op::Show { target } => {
                let s = lock(&self.sup);
                let ids = s.resolve(&target)?;
                let list: Vec<_> = ids
                    .iter()
                    .filter_map(|id| s.app(*id))
                    .map(|a| {
                        let [o, e] = s.log_paths(&a.spec.name);
                        let files = [o.display().to_string(), e.display().to_string()];
                        a.info(true, reveal, Some(files))
                    })
                    .collect();
                Ok(serde_json::to_value(list).unwrap_or_default())
            }
            Op::Define { apps } => {
                if apps.is_empty() {
                    return Err(bad("no apps to define"));
                }
                if apps.iter().any(|a| a.kind == AppKind::Agent) {
                    // The lane exists before the agent's first process.
                    self.lanes.check_agents(&apps)?;
                    let agents = apps
                        .iter()
                        .filter(|a| a.kind == AppKind::Agent)
                        .map(|a| {
                            Ok(AgentLane {
                                name: a.name.parse().map_err(|e: NameError| bad(e.to_string()))?,
                                uid: a
                                    .user
                                    .as_deref()
                                    .and_then(|u| crate::supervise::spawn::resolve_user(u).ok())
                                    .map(|c| c.uid.as_raw())
                                    .filter(|u| *u != nix::unistd::getuid().as_raw()),
                            })
                        })
                        .collect::<Result<Vec<AgentLane>, ErrorBody>>()?;
                    self.lanes.reconcile(&self.sup, &agents).await?;
                }
                control::define(&self.sup, apps, actor).await
            }
            Op::Lanes => Ok(json!({
                "agents": self.lanes.report(&self.sup).await?,
                "bridge": self.lanes.routes_report(&self.sup).await?,
            })),
            Op::Routes => self.lanes.routes_report(&self.sup).await,
            Op::RouteAdd { route } => {
                self.lanes.check_route(&self.sup, &route)?;
                let added = lock(&self.sup)
                    .store
                    .add_route(&route)
                    .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
                if !added {
                    return Err(ErrorBody::new(
                        ErrorCode::Conflict,
                        format!("route {} is already there", route.describe()),
                    ));
                }
                let agents = self.lanes.agents(&self.sup);
                self.lanes.ensure_bridge(&self.sup, &agents).await?;
                Ok(json!({"added": route}))
            }
            Op::RouteRm { route } => {
                if self.lanes.settings.routes.contains(&route) {
                    return Err(ErrorBody::new(
                        ErrorCode::Conflict,
                        format!(
                            "route {} is defined in daemon.toml; remove it there and restart the daemon",
                            route.describe()
                        ),
                    ));
                }
                let removed = lock(&self.sup)
                    .store
                    .remove_route(&route)
                    .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
                if !removed {
                    return Err(ErrorBody::new(
                        ErrorCode::NotFound,
                        format!(
                            "no runtime route {}; see `oxidepm route list`",
                            route.describe()
                        ),
                    ));
                }
                let agents = self.lanes.agents(&self.sup);
                self.lanes.ensure_bridge(&self.sup, &agents).await?;
                Ok(json!({"removed": route}))
            }
            Op::Start { target } => {
                let ids = lock(&self.sup).resolve(&target)?;
                control::start(&self.sup, &ids, actor).await
            }
            Op::Stop { target } => {
                let ids = lock(&self.sup).resolve(&target)?;
                control::stop(&self.sup, &ids, actor, false).await;
                let s = lock(&self.sup);
                Ok(Value::Array(
                    ids.iter()
                        .filter_map(|id| s.app(*id))
                        .map(|a| json!({"id": a.id, "name": a.spec.name, "status": a.rt.status}))
                        .collect(),
                ))
            }
            Op::Restart { target } => {
                let ids = lock(&self.sup).resolve(&target)?;
                control::restart(&self.sup, &ids, actor).await
            }
            Op::Delete { target } => {
                let (ids, agents) = {
                    let s = lock(&self.sup);
                    let ids = s.resolve(&target)?;
                    let agents = ids
                        .iter()
                        .any(|id| s.app(*id).is_some_and(|a| a.spec.kind == AppKind::Agent));
                    (ids, agents)
                };
                let out = control::delete(&self.sup, &ids, actor).await?;
                if agents {
                    self.lanes.reconcile(&self.sup, &[]).await?;
                }
                Ok(out)
            }
            Op::Events { target, limit } => {
                let s = lock(&self.sup);
                let ids = match target {
                    Some(t) => Some(s.resolve(&t)?),
                    None => None,
                };
                let ev = s
                    .store
                    .events(ids.as_deref(), limit.clamp(1, 100_000))
                    .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
                Ok(serde_json::to_value(ev).unwrap_or_default())
            }
            Op::Flush { target } => {
                let s = lock(&self.sup);
                let ids = match target {
                    Some(t) => s.resolve(&t)?,
                    None => s.apps().map(|a| a.id).collect(),
                };
                let mut flushed = Vec::new();
                for id in ids {
                    let Some(a) = s.app(id) else { continue };
                    for p in s.log_paths(&a.spec.name) {
                        logfile::flush(&p, a.spec.log_keep).map_err(|e| {
                            ErrorBody::new(
                                ErrorCode::Internal,
                                format!("cannot flush {}: {e}", p.display()),
                            )
                        })?;
                    }
                    flushed.push(a.spec.name.clone());
                }
                Ok(json!({ "flushed": flushed }))
            }
            Op::Save { name } => {
                let name = name.unwrap_or_else(|| "default".into());
                check_snapshot_name(&name)?;
                let s = lock(&self.sup);
                let apps: Vec<SnapshotApp> = s
                    .apps()
                    .filter(|a| a.rt.desired_running)
                    .map(|a| SnapshotApp {
                        spec: a.spec.clone(),
                        defined_by: a.defined_by.clone(),
                    })
                    .collect();
                s.store
                    .save_snapshot(&name, &apps)
                    .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
                let names: Vec<&str> = apps.iter().map(|a| a.spec.name.as_str()).collect();
                Ok(json!({ "snapshot": name, "apps": names }))
            }
            Op::Resurrect { name } => {
                let name = name.unwrap_or_else(|| "default".into());
                check_snapshot_name(&name)?;
                self.resurrect(&name, actor).await
            }
            Op::Audit {
                app,
                actor: who,
                since,
                limit,
            } => {
                let since_ms = match since {
                    Some(t) => Some(crate::timefmt::parse_rfc3339_ms(&t).ok_or_else(|| {
                        bad(format!(
                            "--since {t:?} is not an RFC 3339 time such as 2026-01-31T12:00:00Z"
                        ))
                    })?),
                    None => None,
                };
                let f = AuditFilter {
                    app,
                    actor: who,
                    since_ms,
                    limit: limit.clamp(1, 100_000),
                };
                let rows = lock(&self.sup)
                    .store
                    .audit(&f)
                    .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
                Ok(serde_json::to_value(rows).unwrap_or_default())
            }
            Op::Logs {
                target,
                lines,
                stream,
                ..
            } => {
                let plan = self.log_plan(&target, stream)?;
                let lines = lines.min(10_000);
                let mut out = Vec::new();
                for (app, st, path, keep) in &plan {
                    for line in logfile::tail(path, *keep, lines).unwrap_or_default() {
                        out.push(LogLine {
                            app: app.clone(),
                            stream: *st,
                            line,
                        });
                    }
                }
                Ok(serde_json::to_value(out).unwrap_or_default())
            }
            Op::Kill => Err(bad("kill is only available on the daemon's sockets")),
        }
    }

    async fn resurrect(&self, name: &str, actor: &Actor) -> Answer {
        let snap = lock(&self.sup)
            .store
            .load_snapshot(name)
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?
            .ok_or_else(|| {
                ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("no snapshot named {name:?}; make one with `oxidepm save`"),
                )
            })?;
        if snap.is_empty() {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("snapshot {name:?} holds no apps; nothing was changed"),
            ));
        }
        let mut ids = Vec::new();
        {
            let mut s = lock(&self.sup);
            for app in snap {
                let existing = s
                    .apps()
                    .find(|a| a.spec.name == app.spec.name)
                    .map(|a| a.id);
                let id = match existing {
                    Some(id) => id,
                    None => s.insert(app.spec, &app.defined_by)?,
                };
                ids.push(id);
            }
        }
        control::start(&self.sup, &ids, actor).await
    }

    async fn logs(
        &self,
        id: u64,
        target: &str,
        lines: usize,
        follow: bool,
        stream: Option<LogStream>,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let plan = match self.log_plan(target, stream) {
            Ok(p) => p,
            Err(e) => return sink.send(&Response::err(id, e)).await,
        };
        // The lines are read into memory before they are sent: bound it.
        let lines = lines.min(100_000);
        let mut followers = Vec::new();
        for (app, st, path, keep) in &plan {
            if follow {
                followers.push((app.clone(), *st, logfile::Follower::open_at_end(path)));
            }
            let got = logfile::tail(path, *keep, lines).unwrap_or_default();
            for line in got {
                let item = LogLine {
                    app: app.clone(),
                    stream: *st,
                    line,
                };
                sink.send(&Response::item(
                    id,
                    serde_json::to_value(item).unwrap_or_default(),
                ))
                .await?;
            }
        }
        if follow {
            loop {
                if sink.client_gone() {
                    return Ok(());
                }
                for (app, st, f) in followers.iter_mut() {
                    for line in f.poll().unwrap_or_default() {
                        let item = LogLine {
                            app: app.clone(),
                            stream: *st,
                            line,
                        };
                        sink.send(&Response::item(
                            id,
                            serde_json::to_value(item).unwrap_or_default(),
                        ))
                        .await?;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        sink.send(&Response::ok(id, json!({"apps": plan.len() / 2})))
            .await
    }
}

/// The log files a `logs` request reads: app, stream, path, files kept.
type LogPlan = Vec<(String, LogStream, std::path::PathBuf, u32)>;

impl Daemon {
    fn log_plan(&self, target: &str, stream: Option<LogStream>) -> Result<LogPlan, ErrorBody> {
        let s = lock(&self.sup);
        let ids = s.resolve(target)?;
        Ok(ids
            .iter()
            .filter_map(|i| s.app(*i))
            .flat_map(|a| {
                let [o, e] = s.log_paths(&a.spec.name);
                let keep = a.spec.log_keep;
                let name = a.spec.name.clone();
                [
                    (name.clone(), LogStream::Out, o, keep),
                    (name, LogStream::Err, e, keep),
                ]
            })
            .filter(|(_, st, _, _)| stream.is_none_or(|want| want == *st))
            .collect())
    }
}

fn check_snapshot_name(name: &str) -> Result<(), ErrorBody> {
    if oxidepm_proto::actor::valid_label(name) {
        Ok(())
    } else {
        Err(bad(format!(
            "snapshot name {name:?} must be 1 to 32 of A-Z a-z 0-9 . _ -"
        )))
    }
}
