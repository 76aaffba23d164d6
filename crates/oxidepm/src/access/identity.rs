//! The actor of a request: the claim table, overruled by where the peer's
//! process sits. Pure, so every rule is tested without processes.

use super::claim::actor_for_claim;
use super::peer::Origin;
use super::SocketKind;
use oxidepm_proto::{Actor, AppKind, Class};

/// Decides who is asking.
///
/// 1. a peer that cannot be looked at is `ai:unverified`;
/// 2. in an adapter's tree: `adapter:<name>`, whatever it claims;
/// 3. in an agent's tree: `ai:<agent>`, whatever it claims;
/// 4. in the tree of an app an AI or an adapter defined: that definer,
///    whatever it claims (an app is never more trusted than whoever
///    defined it, and a claimed label would take it out of the definer's
///    grant); an app the daemon defined: at most the daemon's class;
/// 5. a descendant of the daemon that belongs to no app: `ai:unattributed`;
/// 6. otherwise the claim table. On agent.sock the class is always `ai`.
pub fn decide(socket: SocketKind, origin: &Origin, claim: Option<&str>) -> Actor {
    let claimed = actor_for_claim(socket, claim);
    let actor = match origin {
        Origin::Unknown => Actor::new(Class::Ai, "unverified"),
        Origin::Unattributed => Actor::new(Class::Ai, "unattributed"),
        Origin::App {
            name,
            kind: AppKind::Adapter | AppKind::Responder,
            ..
        } => Actor::new(Class::Adapter, name.clone()),
        Origin::App {
            name,
            kind: AppKind::Agent,
            ..
        } => Actor::new(Class::Ai, name.clone()),
        Origin::App { defined_by, .. }
            if matches!(defined_by.class, Class::Ai | Class::Adapter) =>
        {
            defined_by.clone()
        }
        Origin::App { defined_by, .. }
            if defined_by.class != Class::Human
                && defined_by.class.trust() < claimed.class.trust() =>
        {
            defined_by.clone()
        }
        Origin::App { .. } | Origin::Outside => claimed,
    };
    if socket == SocketKind::Agent && actor.class != Class::Ai {
        // agent.sock never yields more than class ai.
        return match actor.class {
            Class::Adapter => Actor::new(Class::Ai, actor.label),
            _ => actor_for_claim(socket, claim),
        };
    }
    actor
}

/// The label of a defined agent belongs to that agent. `actor` (as
/// [`decide`] made it) with `agent_label` (its label names a defined agent
/// app) stands only when the peer is in that agent's tree, or in the tree
/// of an app that agent defined; anyone else using the label is recorded
/// as `ai:unverified`. Returns the actor and whether it is a verified agent.
pub fn owned_label(origin: &Origin, actor: Actor, agent_label: bool) -> (Actor, bool) {
    if actor.class != Class::Ai || !agent_label {
        return (actor, false);
    }
    let own = match origin {
        Origin::App {
            name,
            kind: AppKind::Agent,
            ..
        } => *name == actor.label,
        Origin::App { defined_by, .. } => *defined_by == actor,
        _ => false,
    };
    if own {
        (actor, true)
    } else {
        (Actor::new(Class::Ai, "unverified"), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(kind: AppKind, by: &str) -> Origin {
        Origin::App {
            name: "x".into(),
            kind,
            defined_by: Actor::parse(by).unwrap(),
        }
    }

    fn d(origin: &Origin, claim: Option<&str>) -> String {
        decide(SocketKind::Daemon, origin, claim).to_string()
    }

    #[test]
    fn rules() {
        assert_eq!(d(&Origin::Outside, None), "human:cli");
        assert_eq!(d(&Origin::Outside, Some("ai:bot")), "ai:bot");
        assert_eq!(d(&Origin::Unknown, None), "ai:unverified");
        assert_eq!(
            d(&Origin::Unattributed, Some("human:root")),
            "ai:unattributed"
        );
        assert_eq!(
            d(&app(AppKind::Adapter, "human:cli"), Some("human:root")),
            "adapter:x"
        );
        assert_eq!(d(&app(AppKind::Agent, "human:cli"), None), "ai:x");
        assert_eq!(d(&app(AppKind::App, "human:cli"), None), "human:cli");
        assert_eq!(d(&app(AppKind::App, "ai:assistant"), None), "ai:assistant");
        // A claim does not take an app out of its definer's grant.
        assert_eq!(
            d(&app(AppKind::App, "ai:assistant"), Some("ai:other")),
            "ai:assistant"
        );
        assert_eq!(d(&app(AppKind::App, "adapter:chat"), None), "adapter:chat");
        assert_eq!(
            d(&app(AppKind::App, "adapter:chat"), Some("ai:x")),
            "adapter:chat"
        );
        let a = |o: &Origin, c| decide(SocketKind::Agent, o, c).to_string();
        assert_eq!(a(&Origin::Outside, Some("human:root")), "ai:agent");
        assert_eq!(a(&app(AppKind::Adapter, "human:cli"), None), "ai:x");
        assert_eq!(a(&app(AppKind::Agent, "human:cli"), Some("ai:y")), "ai:x");
    }

    #[test]
    fn a_defined_agents_label_is_its_own() {
        let alice = || Actor::new(Class::Ai, "alice");
        let own = |origin: &Origin| {
            let (a, verified) = owned_label(origin, alice(), true);
            format!("{a} {verified}")
        };
        let in_alice = Origin::App {
            name: "alice".into(),
            kind: AppKind::Agent,
            defined_by: Actor::new(Class::Human, "cli"),
        };
        assert_eq!(own(&in_alice), "ai:alice true");
        // An app alice defined acts as alice.
        assert_eq!(own(&app(AppKind::App, "ai:alice")), "ai:alice true");
        // Claimed from outside, from another agent's helper, from an app
        // with the same name that is not the agent: not alice.
        assert_eq!(own(&Origin::Outside), "ai:unverified false");
        assert_eq!(own(&app(AppKind::App, "ai:bob")), "ai:unverified false");
        assert_eq!(own(&Origin::Unknown), "ai:unverified false");
        let not_agent = Origin::App {
            name: "alice".into(),
            kind: AppKind::App,
            defined_by: Actor::new(Class::Human, "cli"),
        };
        assert_eq!(own(&not_agent), "ai:unverified false");
        // Labels no agent owns stay as they are, unverified.
        let (a, v) = owned_label(&Origin::Outside, Actor::new(Class::Ai, "helper"), false);
        assert_eq!(format!("{a} {v}"), "ai:helper false");
        let (a, v) = owned_label(&Origin::Outside, Actor::new(Class::Human, "alice"), true);
        assert_eq!(format!("{a} {v}"), "human:alice false");
    }
}
