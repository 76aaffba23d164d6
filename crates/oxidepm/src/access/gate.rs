//! The gate: who is asking and what they may do. It holds the tiers and the
//! adapters' grants of daemon.toml, decides the caller of each request, and
//! checks the request against the apps it touches before anything changes.

use super::policy::{self, Refusal};
use super::{identity, Caller, Peer, Scope, SocketKind};
use crate::supervise::SelectError;
use oxidepm_proto::{Actor, Class, Op, Tier};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Tier settings.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    /// Tier of class `ai` (default `control`; it can only be lowered).
    #[serde(default)]
    pub ai: Option<Tier>,
    /// Tier per `ai` label (can only be lowered below `control`).
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

/// What the gate weighs about one app a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFacts {
    /// The app's name.
    pub name: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Whether only a human may stop, restart, change or delete it.
    pub protected: bool,
}

/// What authorizing a request needs to know of the daemon's apps.
pub trait AppIndex {
    /// The apps a selector names, in id order, or why it names none.
    fn select(&self, target: &str) -> Result<Vec<AppFacts>, SelectError>;
    /// The app named `name`, if one is defined.
    fn named(&self, name: &str) -> Option<AppFacts>;
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
}

impl Gate {
    /// A gate with the tiers and adapter grants of daemon.toml.
    pub fn new(tiers: Tiers, adapters: BTreeMap<String, Grant>) -> Gate {
        Gate { tiers, adapters }
    }

    /// The caller of one request: the peer's origin plus its claim.
    pub fn caller(&self, peer: &Peer, claim: Option<&str>) -> Caller {
        let actor = identity::decide(peer.socket, &peer.info.origin, claim);
        let (tier, scope) = match actor.class {
            Class::Human => (Tier::Admin, Scope::All),
            Class::Ai => (self.ai_tier(&actor.label), Scope::All),
            Class::Adapter => {
                let (t, apps) = self.adapter_grant(&actor.label);
                (t, Scope::Only(apps))
            }
            Class::System => (Tier::Read, Scope::Only(Vec::new())),
        };
        Caller {
            actor,
            socket: peer.socket,
            tier,
            scope,
        }
    }

    /// The caller of a request that came through an agent's lane: the
    /// agent named by the stream key, never by the payload.
    pub fn lane_caller(&self, agent: &str) -> Caller {
        Caller {
            actor: Actor::new(Class::Ai, agent),
            socket: SocketKind::Lane,
            tier: self.ai_tier(agent),
            scope: Scope::All,
        }
    }

    /// Checks the tier and protection rules against `apps` as they are;
    /// fills `touched` with the names the request touches. Nothing changes
    /// before this passes.
    pub fn authorize<A: AppIndex + ?Sized>(
        &self,
        apps: &A,
        caller: &Caller,
        op: &Op,
        touched: &mut Vec<String>,
    ) -> Result<(), AuthorizeError> {
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
        let existing = match targets {
            Some(t) => apps.select(t)?,
            None => Vec::new(),
        };
        *touched = existing.iter().map(|a| a.name.clone()).collect();
        if let Op::Define { apps: specs } = op {
            *touched = specs.iter().map(|a| a.name.clone()).collect();
        }
        policy::check_tier(caller, op, touched)?;
        if targets.is_some() {
            let scoped: Vec<(String, Vec<String>)> = existing
                .iter()
                .map(|a| (a.name.clone(), a.tags.clone()))
                .collect();
            policy::check_scope(caller, op.name(), &scoped)?;
        }
        match op {
            Op::Stop { .. } | Op::Restart { .. } | Op::Delete { .. } => {
                let protected: Vec<(String, bool)> = existing
                    .iter()
                    .map(|a| (a.name.clone(), a.protected))
                    .collect();
                policy::check_protected(caller, op.name(), &protected)?;
            }
            Op::Define { apps: specs } => {
                policy::check_definition(caller, specs)?;
                let scoped: Vec<(String, Vec<String>)> = specs
                    .iter()
                    .map(|sp| (sp.name.clone(), sp.tags.clone()))
                    .collect();
                policy::check_scope(caller, "define", &scoped)?;
                let protected: Vec<(String, bool)> = specs
                    .iter()
                    .filter_map(|spec| apps.named(&spec.name))
                    .map(|a| (a.name, a.protected))
                    .collect();
                policy::check_protected(caller, "change", &protected)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The tier and scope of an adapter (read and nothing without a grant).
    fn adapter_grant(&self, name: &str) -> (Tier, Vec<String>) {
        match self.adapters.get(name) {
            Some(g) => (g.tier.min(Tier::Manage), g.apps.clone()),
            None => (Tier::Read, Vec::new()),
        }
    }

    /// The tier of an `ai` actor with `label`.
    fn ai_tier(&self, label: &str) -> Tier {
        let base = self.tiers.ai.unwrap_or(Tier::Control).min(Tier::Control);
        match self.tiers.labels.get(label) {
            Some(t) => (*t).min(base),
            None => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::peer::{Origin, PeerInfo};
    use crate::access::policy::RefusalKind;

    fn peer(socket: SocketKind, origin: Origin) -> Peer {
        Peer {
            socket,
            info: PeerInfo {
                pid: None,
                uid: None,
                origin,
            },
        }
    }

    struct Apps(Vec<AppFacts>);

    impl AppIndex for Apps {
        fn select(&self, target: &str) -> Result<Vec<AppFacts>, SelectError> {
            Ok(self
                .0
                .iter()
                .filter(|a| target == "all" || a.name == target)
                .cloned()
                .collect())
        }
        fn named(&self, name: &str) -> Option<AppFacts> {
            self.0.iter().find(|a| a.name == name).cloned()
        }
    }

    fn app(name: &str, protected: bool) -> AppFacts {
        AppFacts {
            name: name.into(),
            tags: vec![],
            protected,
        }
    }

    #[test]
    fn tiers_can_only_be_lowered() {
        let mut tiers = Tiers {
            ai: Some(Tier::Admin),
            ..Tiers::default()
        };
        tiers.labels.insert("reader".into(), Tier::Read);
        let mut adapters = BTreeMap::new();
        adapters.insert(
            "chat".to_string(),
            Grant {
                tier: Tier::Admin,
                apps: vec!["@chat".into()],
            },
        );
        let gate = Gate::new(tiers, adapters);
        let outside = peer(SocketKind::Daemon, Origin::Outside);
        assert_eq!(gate.caller(&outside, None).tier, Tier::Admin);
        assert_eq!(gate.caller(&outside, Some("ai:x")).tier, Tier::Control);
        assert_eq!(gate.caller(&outside, Some("ai:reader")).tier, Tier::Read);
        assert_eq!(gate.lane_caller("reader").tier, Tier::Read);
        assert_eq!(gate.lane_caller("bot").socket, SocketKind::Lane);
        let adapter = peer(
            SocketKind::Daemon,
            Origin::App {
                name: "chat".into(),
                kind: oxidepm_proto::AppKind::Adapter,
                defined_by: Actor::new(Class::Human, "cli"),
            },
        );
        let c = gate.caller(&adapter, Some("human:root"));
        assert_eq!(
            (c.tier, c.scope),
            (Tier::Manage, Scope::Only(vec!["@chat".into()]))
        );
    }

    #[test]
    fn a_request_over_several_apps_is_refused_whole() {
        let gate = Gate::default();
        let apps = Apps(vec![app("web", false), app("db", true)]);
        let ai = gate.caller(&peer(SocketKind::Agent, Origin::Outside), None);
        let mut touched = Vec::new();
        let stop = Op::Stop {
            target: "all".into(),
        };
        let e = gate.authorize(&apps, &ai, &stop, &mut touched).unwrap_err();
        assert!(matches!(e, AuthorizeError::Refused(ref r) if r.kind() == RefusalKind::Protected));
        assert_eq!(touched, ["web", "db"]);
        let web = Op::Stop {
            target: "web".into(),
        };
        assert!(gate.authorize(&apps, &ai, &web, &mut touched).is_ok());
    }
}
