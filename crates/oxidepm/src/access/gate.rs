//! The gate: who is asking and what they may do. It holds the tiers and the
//! grants of daemon.toml (adapters' and agents'), decides the caller of each
//! request, and checks the request against every app it reaches before
//! anything changes.

use super::policy::{self, Refusal};
use super::reach::{self, Plan};
use super::{identity, Caller, Peer, Scope, SocketKind};
use crate::store::DEFAULT_SNAPSHOT;
use crate::supervise::SelectError;
use oxidepm_proto::{Actor, AppKind, Class, Op, Tier};
use serde::Deserialize;
use std::collections::BTreeMap;

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
        }
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
        self.caller_for(actor, peer.socket, verified)
    }

    /// The caller of a request that came through an agent's lane: the
    /// agent named by the stream key, never by the payload.
    pub fn lane_caller(&self, agent: &str) -> Caller {
        self.caller_for(Actor::new(Class::Ai, agent), SocketKind::Lane, true)
    }

    /// The tier and scope of `actor`; `agent` when it is a defined agent
    /// speaking for itself.
    fn caller_for(&self, actor: Actor, socket: SocketKind, agent: bool) -> Caller {
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
        Caller {
            actor,
            socket,
            tier,
            scope,
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
        check_op(caller, op, &plan, touched)?;
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

/// The checks particular to one operation.
fn check_op(caller: &Caller, op: &Op, plan: &Plan, touched: &[String]) -> Result<(), Refusal> {
    let protected = |apps: &[AppFacts]| -> Vec<(String, bool)> {
        apps.iter().map(|a| (a.name.clone(), a.protected)).collect()
    };
    match op {
        Op::Stop { .. } | Op::Restart { .. } | Op::Delete { .. } => {
            policy::check_protected(caller, op.name(), &protected(&plan.before))
        }
        Op::Define { apps: specs } => {
            policy::check_definition(caller, specs)?;
            policy::check_protected(caller, "change", &protected(&plan.before))?;
            let changes: Vec<(&AppFacts, &oxidepm_proto::AppSpec)> = plan
                .before
                .iter()
                .filter_map(|a| specs.iter().find(|s| s.name == a.name).map(|s| (a, s)))
                .collect();
            policy::check_kind_and_user(caller, &changes)
        }
        Op::Save { name } => policy::check_snapshot_owner(
            caller,
            name.as_deref().unwrap_or(DEFAULT_SNAPSHOT),
            plan.replaces.as_ref().map(|s| s.saved_by.as_ref()),
            touched,
        ),
        Op::Resurrect { .. } => policy::check_recreate(caller, &plan.recreated),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::peer::{Origin, PeerInfo};
    use crate::access::policy::RefusalKind;
    use crate::access::reach::tests::{app, Apps};
    use crate::access::reach::SnapshotFacts;
    use oxidepm_proto::AppSpec;

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

    fn in_app(name: &str, kind: AppKind) -> Origin {
        Origin::App {
            name: name.into(),
            kind,
            defined_by: Actor::new(Class::Human, "cli"),
        }
    }

    fn agent(name: &str) -> AppFacts {
        let mut a = app(name, &[]);
        a.kind = AppKind::Agent;
        a
    }

    fn none() -> Apps {
        Apps(vec![], None)
    }

    fn refusal(e: AuthorizeError) -> RefusalKind {
        match e {
            AuthorizeError::Refused(r) => r.kind(),
            AuthorizeError::Select(s) => panic!("not a refusal: {s}"),
        }
    }

    #[test]
    fn tiers_can_only_be_lowered_and_unowned_labels_get_the_lowest() {
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
        let gate = Gate::new(tiers, adapters, BTreeMap::new());
        let apps = Apps(vec![agent("reader"), agent("writer")], None);
        let outside = peer(SocketKind::Daemon, Origin::Outside);
        assert_eq!(gate.caller(&apps, &outside, None).tier, Tier::Admin);
        // A label no agent owns: the lowest configured tier.
        for claim in ["ai:x", "ai:reader-2", "ai:invalid"] {
            assert_eq!(gate.caller(&apps, &outside, Some(claim)).tier, Tier::Read);
        }
        // A defined agent's label from outside its tree is not that agent.
        let c = gate.caller(&apps, &outside, Some("ai:writer"));
        assert_eq!(
            (c.actor.to_string(), c.tier),
            ("ai:unverified".into(), Tier::Read)
        );
        let c = gate.caller(
            &apps,
            &peer(SocketKind::Agent, Origin::Outside),
            Some("ai:writer"),
        );
        assert_eq!(c.actor.to_string(), "ai:unverified");
        // From inside its tree it is, with its own tier and scope.
        let writer = peer(SocketKind::Agent, in_app("writer", AppKind::Agent));
        let c = gate.caller(&apps, &writer, None);
        assert_eq!(
            (c.actor.to_string(), c.tier, c.scope),
            (
                "ai:writer".into(),
                Tier::Control,
                Scope::Only(vec!["writer".into()])
            )
        );
        assert_eq!(gate.lane_caller("reader").tier, Tier::Read);
        assert_eq!(gate.lane_caller("bot").socket, SocketKind::Lane);
        let adapter = peer(SocketKind::Daemon, in_app("chat", AppKind::Adapter));
        let c = gate.caller(&apps, &adapter, Some("human:root"));
        assert_eq!(
            (c.tier, c.scope),
            (Tier::Manage, Scope::Only(vec!["@chat".into()]))
        );
    }

    #[test]
    fn an_agent_grant_names_its_apps_and_tier() {
        let mut agents = BTreeMap::new();
        agents.insert(
            "alice".to_string(),
            AgentGrant {
                tier: Some(Tier::Admin),
                apps: vec!["@shop".into()],
            },
        );
        let gate = Gate::new(Tiers::default(), BTreeMap::new(), agents);
        let c = gate.lane_caller("alice");
        assert_eq!(
            (c.tier, c.scope),
            (
                Tier::Manage,
                Scope::Only(vec!["alice".into(), "@shop".into()])
            )
        );
        let c = gate.lane_caller("bob");
        assert_eq!(
            (c.tier, c.scope),
            (Tier::Control, Scope::Only(vec!["bob".into()]))
        );
        let apps = Apps(
            vec![agent("alice"), agent("bob"), app("cart", &["shop"])],
            None,
        );
        let alice = gate.lane_caller("alice");
        let bob = gate.lane_caller("bob");
        let mut touched = Vec::new();
        let logs = |t: &str| Op::Logs {
            target: t.into(),
            lines: 10,
            follow: false,
            stream: None,
        };
        let stop = |t: &str| Op::Stop { target: t.into() };
        assert!(gate
            .authorize(&apps, &alice, &logs("alice"), &mut touched)
            .is_ok());
        assert!(gate
            .authorize(&apps, &alice, &logs("cart"), &mut touched)
            .is_ok());
        assert!(gate
            .authorize(&apps, &alice, &stop("@shop"), &mut touched)
            .is_ok());
        let e = gate
            .authorize(&apps, &alice, &logs("bob"), &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        let e = gate
            .authorize(&apps, &bob, &stop("alice"), &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        let e = gate
            .authorize(&apps, &bob, &stop("all"), &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
    }

    #[test]
    fn a_request_over_several_apps_is_refused_whole() {
        let gate = Gate::default();
        let mut db = app("db", &[]);
        db.protected = true;
        let apps = Apps(vec![app("web", &[]), db], None);
        let ai = gate.caller(&none(), &peer(SocketKind::Agent, Origin::Outside), None);
        let mut touched = Vec::new();
        let stop = Op::Stop {
            target: "all".into(),
        };
        let e = gate.authorize(&apps, &ai, &stop, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Protected);
        assert_eq!(touched, ["web", "db"]);
        let web = Op::Stop {
            target: "web".into(),
        };
        assert!(gate.authorize(&apps, &ai, &web, &mut touched).is_ok());
    }

    fn bots_adapter() -> (Gate, Caller) {
        let mut adapters = BTreeMap::new();
        adapters.insert(
            "chat".to_string(),
            Grant {
                tier: Tier::Manage,
                apps: vec!["@bots".into()],
            },
        );
        let gate = Gate::new(Tiers::default(), adapters, BTreeMap::new());
        let chat = peer(SocketKind::Daemon, in_app("chat", AppKind::Adapter));
        let c = gate.caller(&none(), &chat, None);
        (gate, c)
    }

    #[test]
    fn an_adapter_is_held_to_its_grant_before_and_after() {
        let (gate, chat) = bots_adapter();
        let apps = Apps(vec![app("web", &[]), app("bot", &["bots"])], None);
        let mut touched = Vec::new();
        // Redefining a person's app with the granted tag.
        let mut evil = AppSpec::new("web", "sh", vec![]);
        evil.tags = vec!["bots".into()];
        let op = Op::Define { apps: vec![evil] };
        let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        // Its own app: it may change the command, not the kind or the user.
        let mut mine = AppSpec::new("bot", "sh", vec![]);
        mine.tags = vec!["bots".into()];
        let op = Op::Define {
            apps: vec![mine.clone()],
        };
        assert!(gate.authorize(&apps, &chat, &op, &mut touched).is_ok());
        mine.user = Some("root".into());
        let op = Op::Define {
            apps: vec![mine.clone()],
        };
        let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        // Moving its app out of the grant is refused too.
        let moved = AppSpec::new("bot", "sh", vec![]);
        let op = Op::Define { apps: vec![moved] };
        assert!(gate.authorize(&apps, &chat, &op, &mut touched).is_err());
        // No selector: the apps in its grant.
        let only = gate
            .authorize(&apps, &chat, &Op::Flush { target: None }, &mut touched)
            .unwrap();
        assert_eq!(only, Some(vec!["bot".to_string()]));
        // A human is not narrowed.
        let human = gate.caller(&none(), &peer(SocketKind::Daemon, Origin::Outside), None);
        let only = gate
            .authorize(&apps, &human, &Op::Flush { target: None }, &mut touched)
            .unwrap();
        assert_eq!(only, None);
    }

    #[test]
    fn a_start_through_a_dependency_is_held_to_the_grant() {
        let (gate, chat) = bots_adapter();
        let mut bot = app("bot", &["bots"]);
        bot.running = false;
        bot.idle = true;
        bot.depends_on = vec!["db".into()];
        let mut db = app("db", &[]);
        db.running = false;
        db.idle = true;
        let apps = Apps(vec![bot, db], None);
        let mut touched = Vec::new();
        let op = Op::Start {
            target: "bot".into(),
        };
        let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        assert_eq!(touched, ["bot", "db"]);
    }

    #[test]
    fn a_protected_app_a_person_stopped_is_started_by_a_person_only() {
        let gate = Gate::default();
        let ai = gate.caller(&none(), &peer(SocketKind::Agent, Origin::Outside), None);
        let human = gate.caller(&none(), &peer(SocketKind::Daemon, Origin::Outside), None);
        let mut db = app("db", &[]);
        db.protected = true;
        db.running = false;
        db.idle = true;
        db.stopped_by = Some(Class::Human);
        let mut web = app("web", &[]);
        web.running = false;
        web.idle = true;
        web.depends_on = vec!["db".into()];
        let apps = Apps(vec![db.clone(), web], None);
        let mut touched = Vec::new();
        for target in ["db", "web", "all"] {
            let op = Op::Start {
                target: target.into(),
            };
            let e = gate.authorize(&apps, &ai, &op, &mut touched).unwrap_err();
            assert_eq!(refusal(e), RefusalKind::Protected, "{target}");
            assert!(gate.authorize(&apps, &human, &op, &mut touched).is_ok());
        }
        // Stopped by the daemon (it exited, or it crashed): any AI may.
        db.stopped_by = None;
        let apps = Apps(vec![db], None);
        let op = Op::Start {
            target: "db".into(),
        };
        assert!(gate.authorize(&apps, &ai, &op, &mut touched).is_ok());
    }

    #[test]
    fn a_resurrect_does_not_start_a_protected_app_a_person_stopped() {
        let (gate, chat) = bots_adapter();
        let mut db = app("db", &["bots"]);
        db.protected = true;
        db.running = false;
        db.idle = true;
        db.stopped_by = Some(Class::Human);
        let human = Actor::new(Class::Human, "cli");
        let snap = SnapshotFacts {
            saved_by: Some(human.clone()),
            apps: vec![(AppSpec::new("db", "x", vec![]), human)],
        };
        let apps = Apps(vec![db], Some(snap));
        let mut touched = Vec::new();
        let op = Op::Resurrect { name: None };
        let e = gate.authorize(&apps, &chat, &op, &mut touched).unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Protected);
        assert_eq!(touched, ["db"]);
    }

    #[test]
    fn save_and_resurrect_stay_with_what_is_ones_own() {
        let (gate, chat) = bots_adapter();
        let human = Actor::new(Class::Human, "cli");
        let mut touched = Vec::new();
        let snap =
            |by: Option<Actor>, apps: Vec<(AppSpec, Actor)>| SnapshotFacts { saved_by: by, apps };
        let bots = Apps(
            vec![app("bot", &["bots"])],
            Some(snap(Some(human.clone()), vec![])),
        );
        let save = Op::Save { name: None };
        let e = gate
            .authorize(&bots, &chat, &save, &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied, "a person's snapshot");
        let unknown = Apps(vec![], Some(snap(None, vec![])));
        assert!(gate
            .authorize(&unknown, &chat, &save, &mut touched)
            .is_err());
        let own = Apps(vec![], Some(snap(Some(chat.actor.clone()), vec![])));
        assert!(gate.authorize(&own, &chat, &save, &mut touched).is_ok());
        let fresh = Apps(vec![], None);
        assert!(gate.authorize(&fresh, &chat, &save, &mut touched).is_ok());
        // A person's app that is gone is not brought back by the adapter.
        let mut gone = AppSpec::new("gone", "x", vec![]);
        gone.tags = vec!["bots".into()];
        let deleted = Apps(
            vec![],
            Some(snap(Some(human.clone()), vec![(gone.clone(), human)])),
        );
        let res = Op::Resurrect { name: None };
        let e = gate
            .authorize(&deleted, &chat, &res, &mut touched)
            .unwrap_err();
        assert_eq!(refusal(e), RefusalKind::Denied);
        let mine = Apps(vec![], Some(snap(None, vec![(gone, chat.actor.clone())])));
        let only = gate.authorize(&mine, &chat, &res, &mut touched).unwrap();
        assert_eq!(only, Some(vec!["gone".to_string()]));
    }
}
