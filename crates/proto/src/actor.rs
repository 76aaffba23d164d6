//! Actors (who is asking) and permission tiers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The class of an actor: what kind of party is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// A person at a terminal.
    Human,
    /// An AI agent, or anything that could not be shown to be a person.
    Ai,
    /// A bridge to the outside world, acting under its grant.
    Adapter,
    /// The daemon itself.
    System,
}

impl Class {
    /// The lowercase name used on the wire and in `class:label`.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Human => "human",
            Class::Ai => "ai",
            Class::Adapter => "adapter",
            Class::System => "system",
        }
    }

    /// Parses a lowercase class name.
    pub fn parse(s: &str) -> Option<Class> {
        Some(match s {
            "human" => Class::Human,
            "ai" => Class::Ai,
            "adapter" => Class::Adapter,
            "system" => Class::System,
            _ => return None,
        })
    }

    /// Trust rank: a lower rank is trusted less. `min` of two classes by
    /// rank is the "at most that class" rule for apps defined by non-humans.
    pub fn trust(self) -> u8 {
        match self {
            Class::Ai => 0,
            Class::Adapter => 1,
            Class::Human => 2,
            Class::System => 3,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is asking: a class and a label, written `class:label`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Actor {
    /// The class of the actor.
    pub class: Class,
    /// The label: `cli`, `assistant`, an adapter's name, `crash`, ...
    pub label: String,
}

impl Actor {
    /// Builds an actor from a class and a label.
    pub fn new(class: Class, label: impl Into<String>) -> Actor {
        Actor {
            class,
            label: label.into(),
        }
    }

    /// The daemon acting on its own for `reason` (`crash`, `limit`, ...).
    pub fn system(reason: &str) -> Actor {
        Actor::new(Class::System, reason)
    }

    /// Parses `class:label`; the label must be valid (see [`valid_label`]).
    pub fn parse(s: &str) -> Option<Actor> {
        let (class, label) = s.split_once(':')?;
        let class = Class::parse(class)?;
        if !valid_label(label) {
            return None;
        }
        Some(Actor::new(class, label))
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.class, self.label)
    }
}

impl Serialize for Actor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Actor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Actor, D::Error> {
        let s = String::deserialize(d)?;
        // Stored actors may carry labels the daemon made itself; accept any
        // non-empty label when reading them back.
        let (class, label) = s
            .split_once(':')
            .ok_or_else(|| serde::de::Error::custom("actor must be class:label"))?;
        let class = Class::parse(class)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown actor class {class:?}")))?;
        Ok(Actor::new(class, label))
    }
}

/// A label is 1 to 32 characters of `A-Z a-z 0-9 . _ -`.
pub fn valid_label(label: &str) -> bool {
    (1..=32).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Permission tiers, ordered: `read` < `control` < `manage` < `admin`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// ping, whoami, status, show, logs, events, audit.
    #[default]
    Read,
    /// start/stop/restart/reload of existing apps.
    Control,
    /// define, change or delete apps; save, flush, resurrect.
    Manage,
    /// kill the daemon, reload its config, define adapters/agents/protected apps.
    Admin,
}

impl Tier {
    /// The lowercase name of the tier.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Control => "control",
            Tier::Manage => "manage",
            Tier::Admin => "admin",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(!valid_label(""));
        assert!(valid_label("a"));
        assert!(valid_label(&"x".repeat(32)));
        assert!(!valid_label(&"x".repeat(33)));
        assert!(!valid_label("a b"));
        assert!(!valid_label("a:b"));
        assert!(valid_label("A-z_0.9"));
    }

    #[test]
    fn actor_round_trip() {
        let a = Actor::parse("ai:assistant").unwrap();
        assert_eq!(a.to_string(), "ai:assistant");
        let j = serde_json::to_string(&a).unwrap();
        assert_eq!(j, "\"ai:assistant\"");
        let b: Actor = serde_json::from_str(&j).unwrap();
        assert_eq!(a, b);
        assert!(Actor::parse("robot:x").is_none());
        assert!(Tier::Read < Tier::Admin);
    }
}
