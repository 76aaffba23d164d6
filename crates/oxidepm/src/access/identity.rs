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
/// 4. in the tree of an app a non-human defined: at most the definer
///    (an app is never more trusted than whoever defined it);
/// 5. a descendant of the daemon that belongs to no app: `ai:unattributed`;
/// 6. otherwise the claim table. On agent.sock the class is always `ai`.
pub fn decide(socket: SocketKind, origin: &Origin, claim: Option<&str>) -> Actor {
    let claimed = actor_for_claim(socket, claim);
    let actor = match origin {
        Origin::Unknown => Actor::new(Class::Ai, "unverified"),
        Origin::Unattributed => Actor::new(Class::Ai, "unattributed"),
        Origin::App {
            name,
            kind: AppKind::Adapter,
            ..
        } => Actor::new(Class::Adapter, name.clone()),
        Origin::App {
            name,
            kind: AppKind::Agent,
            ..
        } => Actor::new(Class::Ai, name.clone()),
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
        assert_eq!(
            d(&app(AppKind::App, "ai:assistant"), Some("ai:other")),
            "ai:other"
        );
        assert_eq!(d(&app(AppKind::App, "adapter:chat"), None), "adapter:chat");
        assert_eq!(d(&app(AppKind::App, "adapter:chat"), Some("ai:x")), "ai:x");
        let a = |o: &Origin, c| decide(SocketKind::Agent, o, c).to_string();
        assert_eq!(a(&Origin::Outside, Some("human:root")), "ai:agent");
        assert_eq!(a(&app(AppKind::Adapter, "human:cli"), None), "ai:x");
        assert_eq!(a(&app(AppKind::Agent, "human:cli"), Some("ai:y")), "ai:x");
    }
}
