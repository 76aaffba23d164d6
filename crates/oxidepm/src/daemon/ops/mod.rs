//! The operations, one file per group. Each turns a request that
//! [`super::handler`] has already authorized into its typed answer; the
//! handler audits the outcome and writes it.

mod about;
mod apps;
mod lanes;
mod log_search;
mod log_window;
mod logs;
mod read_rate;
mod records;
mod snapshots;
mod subscribe;
mod verbs;

use super::errors::OpError;
use super::Daemon;
use crate::access::{Caller, Scope};
use crate::supervise::{lock, sampler};
use oxidepm_proto::{Op, Reply};

pub(super) use logs::LogsAsk;
pub use read_rate::ReadRate;
pub(super) use subscribe::SubscribeAsk;

impl Daemon {
    /// Runs an authorized request. `only`: the apps the gate narrowed a
    /// request without a selector to (the caller's grant).
    pub(super) async fn execute(
        &self,
        caller: &Caller,
        op: Op,
        only: Option<Vec<String>>,
    ) -> Result<Reply, OpError> {
        let only = only.as_deref();
        let actor = &caller.actor;
        match op {
            Op::Ping => Ok(self.ping().into()),
            Op::Whoami => {
                let containment = {
                    let s = crate::supervise::lock(&self.sup);
                    match s.orphans_report() {
                        Some(o) => format!("{}; {o}", s.containment_report()),
                        None => s.containment_report(),
                    }
                };
                Ok(about::whoami(caller, containment).into())
            }
            Op::Status => {
                sampler::refresh(&self.sup).await;
                Ok(self.status(caller).into())
            }
            Op::Show { target } => {
                sampler::refresh(&self.sup).await;
                self.show(caller, &target).map(Into::into)
            }
            Op::Define { mut apps, update } => {
                apps::run_as_definer(caller, &mut apps, lock(&self.sup).own_uid());
                self.define(apps, update, actor).await.map(Into::into)
            }
            Op::Start { target } => self.start(&target, actor).await.map(Into::into),
            Op::Stop { target } => self.stop(&target, actor).await.map(Into::into),
            Op::Restart { target } => self.restart(&target, actor).await.map(Into::into),
            Op::Delete { target } => self.delete(&target, actor).await.map(Into::into),
            op @ Op::Logs { .. } => {
                let only = only.map(<[String]>::to_vec);
                let ask = LogsAsk::of(op, actor.to_string(), only)?;
                self.logs_answer(ask).await
            }
            Op::Events {
                target,
                limit,
                since,
            } => self.events(target, limit, since, only).map(Into::into),
            Op::Flush { target } => self.flush(target, only).map(Into::into),
            Op::Save { name } => self.save(name, only, actor).map(Into::into),
            Op::Resurrect { name } => self.resurrect(name, only, actor).await.map(Into::into),
            Op::Audit {
                app,
                actor: who,
                since,
                limit,
                until,
            } => {
                // A caller held to a grant (an adapter, an agent) reads the
                // trail of its own requests only: others' would tell it what
                // other agents and people do.
                let who = match caller.scope {
                    Scope::Only(_) => Some(actor.to_string()),
                    Scope::All => who,
                };
                self.audit_trail(app, who, since, until, limit)
                    .map(Into::into)
            }
            Op::Lanes => self.lanes_report().await.map(Into::into),
            Op::Routes => Ok(self.lanes.routes_report(&self.sup).await?.into()),
            Op::RouteAdd { route } => self.route_add(route).await.map(Into::into),
            Op::LanesRelease { name } => self.lanes_release(name).await.map(Into::into),
            Op::LanesMigrateKeys => self.lanes_migrate_keys().await.map(Into::into),
            Op::RouteRm { route } => self.route_rm(route).await.map(Into::into),
            Op::Kill => Err(OpError::KillOffSocket),
            Op::Subscribe { .. } => Err(OpError::SubscribeOffSocket),
            Op::Signal { target, signal } => self.signal(&target, &signal, actor).map(Into::into),
            Op::Reset { target } => self.reset(&target, actor).map(Into::into),
            Op::Reload { target } => self.reload(&target, actor).await.map(Into::into),
            Op::Scale { target, instances } => {
                self.scale(&target, instances, actor).await.map(Into::into)
            }
            Op::ReloadDaemonConfig => self
                .reload_config()
                .map(Into::into)
                .map_err(OpError::Config),
        }
    }
}
