//! The gate: who is asking and what they may do. It holds the tiers and the
//! grants of daemon.toml (adapters' and agents'), decides the caller of each
//! request, and checks the request against every app it reaches before
//! anything changes.

use super::peer::Origin;
use super::policy::{self, Refusal, RunAs};
use super::reach::{self, Plan};
use super::{identity, Caller, Peer, Scope, SocketKind};
use crate::store::DEFAULT_SNAPSHOT;
use crate::supervise::SelectError;
use oxidepm_proto::{Actor, AppKind, Class, Op, Tier};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::reach::{AppFacts, AppIndex};

/// Tier settings.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    /// Tier of class `ai` (default `control`; it can only be lowered).
    #[serde(default)]
    pub ai: Option<Tier>,
    /// Tier of a defined agent, by its name (can only be lowered below
    /// `control`). A label nobody owns gets the lowest of these and `ai`.
    #[serde(default)]
    pub labels: BTreeMap<String, Tier>,
}

/// What an adapter may do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Its tier (at most `manage`: only a human administers the daemon).
    pub tier: Tier,
    /// App names and `@tags` it may touch.
    #[serde(default)]
    pub apps: Vec<String>,
}

/// What an agent may do beyond itself (`[agents.<name>]`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AgentGrant {
    /// Its tier (at most `manage`); the `ai` tier when absent.
    #[serde(default)]
    pub tier: Option<Tier>,
    /// App names and `@tags` it may touch besides itself.
    #[serde(default)]
    pub apps: Vec<String>,
}

/// Why a request may not go on.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizeError {
    /// Its selector names no app.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The rules refuse it.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

/// Decides who is asking and whether they may.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    tiers: Tiers,
    adapters: BTreeMap<String, Grant>,
    agents: BTreeMap<String, AgentGrant>,
    /// Set when a reloaded daemon.toml replaces this gate: what was decided
    /// under it and lasts (a subscription) ends.
    retired: Arc<AtomicBool>,
}

impl Gate {
    /// A gate with the tiers and the adapters' and agents' grants of
    /// daemon.toml.
    pub fn new(
        tiers: Tiers,
        adapters: BTreeMap<String, Grant>,
        agents: BTreeMap<String, AgentGrant>,
    ) -> Gate {
        Gate {
            tiers,
            adapters,
            agents,
            retired: Arc::default(),
        }
    }

    /// Marks this gate as replaced by a reloaded daemon.toml.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    /// The flag [`Self::retire`] sets, for what outlives one request.
    pub fn retired(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.retired)
    }

    /// The caller of one request: the peer's origin plus its claim. The
    /// label of a defined agent is that agent's own: anyone else using it
    /// is `ai:unverified`.
    pub fn caller<A: AppIndex + ?Sized>(
        &self,
        apps: &A,
        peer: &Peer,
        claim: Option<&str>,
    ) -> Caller {
        let decided = identity::decide(peer.socket, &peer.info.origin, claim);
        let is_agent = decided.class == Class::Ai
            && apps
                .named(&decided.label)
                .is_some_and(|a| a.kind == AppKind::Agent);
        let (actor, verified) = identity::owned_label(&peer.info.origin, decided, is_agent);
        // A defined agent or adapter is the uid its own app runs as (what
        // the kernel says of the peer could be a set-uid program of its
        // tree); anyone else is the peer's uid.
        let own_app = match actor.class {
            Class::Ai if verified => apps.named(&actor.label),
            Class::Adapter => apps
                .named(&actor.label)
                .filter(|a| a.kind == AppKind::Adapter),
            _ => None,
        };
        let uid = match own_app {
            Some(a) => apps.uid_of(a.user.as_deref()),
            None => peer.info.uid,
        };
        let mut caller = self.caller_for(actor, peer.socket, verified, uid);
        // On agent.sock an adapter's tree is class ai, but still held to
        // the adapter's grant: the socket never widens what it may reach.
        if let Some(adapter) = adapter_of(&peer.info.origin) {
            let (tier, apps) = self.adapter_grant(adapter);
            caller.tier = caller.tier.min(tier);
            caller.scope = Scope::Only(apps);
        }
        caller
    }

    /// The caller of a request that came through an agent's lane: the
    /// agent named by the stream key, never by the payload.
    pub fn lane_caller<A: AppIndex + ?Sized>(&self, apps: &A, agent: &str) -> Caller {
        let uid = apps
            .named(agent)
            .and_then(|a| apps.uid_of(a.user.as_deref()));
        self.caller_for(Actor::new(Class::Ai, agent), SocketKind::Lane, true, uid)
    }

    /// The tier and scope of `actor`; `agent` when it is a defined agent
    /// speaking for itself; `uid` its own uid.
    fn caller_for(
        &self,
        actor: Actor,
        socket: SocketKind,
        agent: bool,
        uid: Option<u32>,
    ) -> Caller {
        let (tier, scope) = match actor.class {
            Class::Human => (Tier::Admin, Scope::All),
            Class::Ai if agent => self.agent_grant(&actor.label),
            Class::Ai => (self.lowest_ai_tier(), Scope::All),
            Class::Adapter => {
                let (t, apps) = self.adapter_grant(&actor.label);
                (t, Scope::Only(apps))
            }
            Class::System => (Tier::Read, Scope::Only(Vec::new())),
        };
        let uid = if actor.class == Class::Human {
            None
        } else {
            uid
        };
        Caller {
            actor,
            socket,
            tier,
            scope,
            uid,
            via: None,
        }
    }

    /// Checks the request against every app it reaches (see
    /// [`reach::plan`]) as they are; fills `touched` with their names.
    /// Nothing changes before this passes. `Ok(Some(names))`: the request
    /// named no app and the caller's grant narrows it to these.
    pub fn authorize<A: AppIndex + ?Sized>(
        &self,
        apps: &A,
        caller: &Caller,
        op: &Op,
        touched: &mut Vec<String>,
    ) -> Result<Option<Vec<String>>, AuthorizeError> {
        let plan = reach::plan(apps, &caller.scope, op)?;
        *touched = plan.names();
        policy::check_tier(caller, op, touched)?;
        policy::check_scope(caller, op.name(), &plan.scoped())?;
        check_op(apps, caller, op, &plan, touched)?;
        policy::check_start(caller, op.name(), touched, &plan.started)?;
        Ok(plan.only)
    }

    /// The tier and scope of an adapter (read and nothing without a grant).
    fn adapter_grant(&self, name: &str) -> (Tier, Vec<String>) {
        match self.adapters.get(name) {
            Some(g) => (g.tier.min(Tier::Manage), g.apps.clone()),
            None => (Tier::Read, Vec::new()),
        }
    }

    /// The tier and scope of a defined agent: itself and what its
    /// `[agents.<name>]` grants; `[tiers] labels` can lower its tier.
    fn agent_grant(&self, name: &str) -> (Tier, Scope) {
        let grant = self.agents.get(name);
        let mut tier = match grant.and_then(|g| g.tier) {
            Some(t) => t.min(Tier::Manage),
            None => self.ai_tier(),
        };
        if let Some(t) = self.tiers.labels.get(name) {
            tier = tier.min(*t);
        }
        let mut scope = vec![name.to_string()];
        scope.extend(grant.into_iter().flat_map(|g| g.apps.iter().cloned()));
        (tier, Scope::Only(scope))
    }

    /// The tier of class `ai` (`control` at most).
    fn ai_tier(&self) -> Tier {
        self.tiers.ai.unwrap_or(Tier::Control).min(Tier::Control)
    }

    /// The tier of an `ai` actor whose label no one vouches for: the lowest
    /// configured, so that choosing a new label never raises it.
    fn lowest_ai_tier(&self) -> Tier {
        self.tiers
            .labels
            .values()
            .fold(self.ai_tier(), |low, t| low.min(*t))
    }
}

/// The adapter whose grant holds a peer by where it sits: in the adapter's
/// tree, or in the tree of an app the adapter defined.
fn adapter_of(origin: &Origin) -> Option<&str> {
    match origin {
        Origin::App {
            name,
            kind: AppKind::Adapter | AppKind::Responder,
            ..
        } => Some(name),
        Origin::App { defined_by, .. } if defined_by.class == Class::Adapter => {
            Some(&defined_by.label)
        }
        _ => None,
    }
}

/// The checks particular to one operation.
fn check_op<A: AppIndex + ?Sized>(
    apps: &A,
    caller: &Caller,
    op: &Op,
    plan: &Plan,
    touched: &[String],
) -> Result<(), Refusal> {
    // Each existing app as it runs now.
    let as_is = |facts: &[AppFacts]| -> Vec<RunAs> {
        facts
            .iter()
            .map(|a| RunAs {
                app: a.name.clone(),
                user: a.user.clone(),
                uid: apps.uid_of(a.user.as_deref()),
            })
            .collect()
    };
    let protected = |apps: &[AppFacts]| -> Vec<(String, bool)> {
        apps.iter().map(|a| (a.name.clone(), a.protected)).collect()
    };
    match op {
        Op::Stop { .. } | Op::Restart { .. } | Op::Delete { .. } => {
            policy::check_protected(caller, op.name(), &protected(&plan.before))
        }
        // A signal can stop an app, a reload restarts it, a reset starts its
        // crash count again, a scale changes and deletes instances: only a
        // human does these to a protected app.
        Op::Signal { .. } | Op::Reload { .. } | Op::Reset { .. } => {
            policy::check_protected(caller, op.name(), &protected(&plan.before))
        }
        // The instances a scale defines run as the app does.
        Op::Scale { .. } => {
            policy::check_protected(caller, op.name(), &protected(&plan.before))?;
            policy::check_run_as(caller, op.name(), &as_is(&plan.before))
        }
        Op::Define { apps: specs, .. } => {
            policy::check_definition(caller, specs)?;
            policy::check_protected(caller, "change", &protected(&plan.before))?;
            let changes: Vec<(&AppFacts, &oxidepm_proto::AppSpec)> = plan
                .before
                .iter()
                .filter_map(|a| specs.iter().find(|s| s.name == a.name).map(|s| (a, s)))
                .collect();
            policy::check_kind(caller, &changes)?;
            // A non-human changes only apps that run as itself, and what
            // it defines runs as itself (no `user`: its own uid, which
            // the define then writes down).
            let mut runs = as_is(&plan.before);
            runs.extend(specs.iter().map(|s| RunAs {
                app: s.name.clone(),
                user: s.user.clone(),
                uid: match &s.user {
                    None => caller.uid,
                    Some(u) => apps.uid_of(Some(u)),
                },
            }));
            policy::check_run_as(caller, "define", &runs)
        }
        Op::Save { name } => policy::check_snapshot_owner(
            caller,
            name.as_deref().unwrap_or(DEFAULT_SNAPSHOT),
            plan.replaces.as_ref().map(|s| s.saved_by.as_ref()),
            touched,
        ),
        // A snapshot's app without a `user` ran as the daemon, and would again.
        Op::Resurrect { .. } => {
            policy::check_recreate(caller, &plan.recreated)?;
            let runs: Vec<RunAs> = plan
                .recreated
                .iter()
                .map(|(s, _)| RunAs {
                    app: s.name.clone(),
                    user: s.user.clone(),
                    uid: apps.uid_of(s.user.as_deref()),
                })
                .collect();
            policy::check_run_as(caller, "resurrect", &runs)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
