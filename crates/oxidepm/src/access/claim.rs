//! The claim table of `spec/agent-connections.txt`: what a client says about
//! itself can make a request stricter, never looser.

use super::SocketKind;
use oxidepm_proto::actor::valid_label;
use oxidepm_proto::{Actor, Class};

/// The actor for a claim on a socket, before any process-tree rule.
///
/// | socket | claim | actor |
/// |---|---|---|
/// | daemon | none | `human:cli` |
/// | daemon | `human:<label>` | `human:<label>` |
/// | daemon | `ai:<label>` | `ai:<label>` |
/// | daemon | anything else | `ai:invalid-claim` |
/// | agent | `ai:<label>` | `ai:<label>` |
/// | agent | anything else | `ai:agent` |
pub fn actor_for_claim(socket: SocketKind, claim: Option<&str>) -> Actor {
    let parsed = claim.and_then(|c| {
        let (class, label) = c.split_once(':')?;
        valid_label(label).then_some((class, label))
    });
    match socket {
        SocketKind::Daemon => match (claim, parsed) {
            (None, _) => Actor::new(Class::Human, "cli"),
            (Some(_), Some(("human", l))) => Actor::new(Class::Human, l),
            (Some(_), Some(("ai", l))) => Actor::new(Class::Ai, l),
            _ => Actor::new(Class::Ai, "invalid-claim"),
        },
        SocketKind::Agent | SocketKind::Lane => match parsed {
            Some(("ai", l)) => Actor::new(Class::Ai, l),
            _ => Actor::new(Class::Ai, "agent"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: Option<&str>) -> String {
        actor_for_claim(SocketKind::Daemon, c).to_string()
    }

    fn a(c: Option<&str>) -> String {
        actor_for_claim(SocketKind::Agent, c).to_string()
    }

    #[test]
    fn daemon_socket_table() {
        assert_eq!(d(None), "human:cli");
        assert_eq!(d(Some("human:root")), "human:root");
        assert_eq!(d(Some("ai:assistant")), "ai:assistant");
        assert_eq!(d(Some("adapter:chat")), "ai:invalid-claim");
        assert_eq!(d(Some("system:crash")), "ai:invalid-claim");
        assert_eq!(d(Some("human:")), "ai:invalid-claim");
        assert_eq!(
            d(Some(&format!("human:{}", "x".repeat(33)))),
            "ai:invalid-claim"
        );
        assert_eq!(
            d(Some(&format!("human:{}", "x".repeat(32)))),
            format!("human:{}", "x".repeat(32))
        );
        assert_eq!(d(Some("human:a b")), "ai:invalid-claim");
        assert_eq!(d(Some("human")), "ai:invalid-claim");
        assert_eq!(d(Some("")), "ai:invalid-claim");
    }

    #[test]
    fn agent_socket_table() {
        assert_eq!(a(None), "ai:agent");
        assert_eq!(a(Some("human:root")), "ai:agent");
        assert_eq!(a(Some("ai:helper")), "ai:helper");
        assert_eq!(a(Some("adapter:x")), "ai:agent");
        assert_eq!(a(Some("ai:bad label")), "ai:agent");
    }
}
