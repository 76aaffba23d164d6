//! Agents consulting each other: the `[[lanes.consult]]` rules of
//! daemon.toml, the bridge's `consult` section, and the names the consult
//! router writes and keeps.
//!
//! A rule `from = "alice", to = "bob"` lets alice ask bob questions
//! (`XADD alice:consult:outbox * to bob text …`) and lets bob answer each
//! of them once (`XADD bob:consult:outbox * to alice re <request_id> …`).
//! It says nothing the other way: bob asking alice needs a rule of its own.
//! One name on each side, no globs and no lists: every pair that may talk
//! is written out, so reading daemon.toml tells who can reach whom.

use crate::name::{AgentName, NameError};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The family (`<agent>:consult:inbox|outbox`) of consulting; reserved as
/// an agent name.
pub const CONSULT: &str = "consult";

/// What the bridge's records of open questions start with: one sorted set
/// per pair, `bridge:consult:open:<asker>:<answerer>`, each member a
/// question's request id scored by the time (ms) it stops being open.
pub const OPEN_PREFIX: &str = "bridge:consult:open";

/// Field an asker or answerer names the other agent with.
pub const TO: &str = "to";
/// Field the bridge sets to the agent named by the outbox key.
pub const FROM: &str = "from";
/// Field of an answer: the request id of the question it answers.
pub const RE: &str = "re";
/// Field of a question as delivered: the id of the asker's outbox entry.
pub const REQUEST_ID: &str = "request_id";
/// Field the bridge sets to `question` or `answer`.
pub const KIND: &str = "kind";
/// The message.
pub const TEXT: &str = "text";
/// Field the bridge sets to the time it delivered the message.
pub const RECEIVED_AT: &str = "received_at";

/// Fields the bridge writes itself into a consult inbox: a field of the
/// same name that the sending agent wrote is dropped, never passed on, so
/// that no agent can speak for another.
pub const OWN_FIELDS: &[&str] = &[FROM, TO, RE, REQUEST_ID, KIND, TEXT, RECEIVED_AT, "source"];

/// The key of the open questions `asker` has put to `answerer`.
pub fn open_key(asker: &AgentName, answerer: &AgentName) -> String {
    crate::stream_key::agent_record(
        asker,
        crate::stream_key::AgentRecord::ConsultOpen { answerer },
    )
}

/// The globs of every record of open questions `agent` asked or was
/// asked, which go with its lane when it is deleted (an agent name holds
/// no colon or glob character, so they match no one else's).
pub fn open_globs(agent: &AgentName) -> [String; 2] {
    [
        format!("{OPEN_PREFIX}:{agent}:*"),
        format!("{OPEN_PREFIX}:*:{agent}"),
    ]
}

/// One rule: `from` may ask `to`, and `to` may answer what `from` asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawRule")]
pub struct ConsultRule {
    /// The agent that asks.
    pub from: AgentName,
    /// The agent asked.
    pub to: AgentName,
}

/// A rule as written, before its names are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    from: String,
    to: String,
}

/// Why a consult rule cannot be one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// A side is not an agent name.
    #[error("consult rule from {from:?} to {to:?}: {source}")]
    Name {
        /// `from` as written.
        from: String,
        /// `to` as written.
        to: String,
        /// Why the name is not one.
        source: NameError,
    },
    /// `from` and `to` are the same agent.
    #[error("consult rule from {agent:?} to {agent:?}: an agent does not consult itself; name two different agents")]
    Itself {
        /// The agent.
        agent: String,
    },
}

impl TryFrom<RawRule> for ConsultRule {
    type Error = RuleError;

    fn try_from(r: RawRule) -> Result<ConsultRule, RuleError> {
        let name = |n: &str| {
            n.parse::<AgentName>().map_err(|source| RuleError::Name {
                from: r.from.clone(),
                to: r.to.clone(),
                source,
            })
        };
        let (from, to) = (name(&r.from)?, name(&r.to)?);
        if from == to {
            return Err(RuleError::Itself { agent: r.from });
        }
        Ok(ConsultRule { from, to })
    }
}

impl fmt::Display for ConsultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "from {} to {}", self.from, self.to)
    }
}

/// The bounds of consulting: what one agent can make the bridge write and
/// keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsultLimits {
    /// Largest question or answer, in bytes: the names and values of every
    /// field the agent wrote (text and the others) together.
    pub max_bytes: usize,
    /// Questions one agent may have open with another at once; past it a
    /// new question is dead-lettered until answers come or questions
    /// expire.
    pub max_open: usize,
    /// How long a question stays open (answerable), in seconds.
    pub open_secs: u64,
}

impl Default for ConsultLimits {
    fn default() -> ConsultLimits {
        ConsultLimits {
            max_bytes: 64 << 10,
            max_open: 256,
            open_secs: 86_400,
        }
    }
}

impl ConsultLimits {
    /// Longest `open_secs`: a year. Longer would overflow the expiry
    /// times Redis keeps, and nobody waits a year for an answer.
    pub const MAX_OPEN_SECS: u64 = 365 * 86_400;

    /// Why the limits cannot be used: one is 0 (which would refuse every
    /// message), or `open_secs` is past [`Self::MAX_OPEN_SECS`].
    pub fn check(&self) -> Result<(), LimitError> {
        let zero = [
            ("max_bytes", self.max_bytes as u64),
            ("max_open", self.max_open as u64),
            ("open_secs", self.open_secs),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        if let Some((key, _)) = zero {
            return Err(LimitError::Zero { key });
        }
        if self.open_secs > Self::MAX_OPEN_SECS {
            return Err(LimitError::TooLong {
                value: self.open_secs,
            });
        }
        Ok(())
    }
}

/// A consult bound that cannot be met; the message starts with the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A bound is 0.
    #[error("{key} must be positive: 0 would refuse every message")]
    Zero {
        /// The key.
        key: &'static str,
    },
    /// `open_secs` is longer than a year.
    #[error(
        "open_secs = {value}: at most {} (a year)",
        ConsultLimits::MAX_OPEN_SECS
    )]
    TooLong {
        /// The value as given.
        value: u64,
    },
}

/// The bridge's `consult` section: the rules in force and the bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsultConfig {
    /// Who may ask whom.
    #[serde(default)]
    pub rules: Vec<ConsultRule>,
    /// The bounds.
    #[serde(default)]
    pub limits: ConsultLimits,
}

impl ConsultConfig {
    /// Whether a rule lets `from` ask `to`.
    pub fn allows(&self, from: &AgentName, to: &AgentName) -> bool {
        self.rules.iter().any(|r| &r.from == from && &r.to == to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> AgentName {
        s.parse().unwrap()
    }

    fn rule(json: &str) -> Result<ConsultRule, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_rule_allows_one_direction_between_two_named_agents() {
        let c = ConsultConfig {
            rules: vec![
                rule(r#"{"from": "alice", "to": "bob"}"#).unwrap(),
                rule(r#"{"from": "carol", "to": "bob"}"#).unwrap(),
            ],
            limits: ConsultLimits::default(),
        };
        assert!(c.allows(&n("alice"), &n("bob")));
        assert!(c.allows(&n("carol"), &n("bob")));
        assert!(!c.allows(&n("bob"), &n("alice")), "one direction only");
        assert!(!c.allows(&n("alice"), &n("carol")));
        assert!(!c.allows(&n("alice"), &n("alice")));
        assert!(!ConsultConfig::default().allows(&n("alice"), &n("bob")));
        assert_eq!(
            open_key(&n("alice"), &n("bob")),
            "bridge:consult:open:alice:bob"
        );
        assert_eq!(
            open_globs(&n("al")),
            ["bridge:consult:open:al:*", "bridge:consult:open:*:al"]
        );
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let e = rule(r#"{"from": "alice", "to": "alice"}"#).unwrap_err();
        assert!(e.contains("does not consult itself"), "{e}");
        let e = rule(r#"{"from": "alice", "to": "b*"}"#).unwrap_err();
        assert!(e.contains("\"b*\"") && e.contains("not allowed"), "{e}");
        let e = rule(r#"{"from": "bridge", "to": "bob"}"#).unwrap_err();
        assert!(e.contains("reserved"), "{e}");
        let e = rule(r#"{"from": "alice", "to": ["bob"]}"#).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        let e = rule(r#"{"from": "alice", "to": "bob", "both": true}"#).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        assert!(rule(r#"{"from": "alice"}"#).is_err());
        let r = rule(r#"{"from": "alice", "to": "bob"}"#).unwrap();
        assert_eq!(r.to_string(), "from alice to bob");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"from":"alice","to":"bob"}"#
        );
    }

    #[test]
    fn limits_default_and_none_may_be_zero() {
        let l: ConsultLimits = serde_json::from_str(r#"{"max_open": 3}"#).unwrap();
        assert_eq!(l.max_open, 3);
        assert_eq!(l.max_bytes, 64 << 10);
        assert_eq!(l.check(), Ok(()));
        let l: ConsultLimits = serde_json::from_str(r#"{"open_secs": 0}"#).unwrap();
        let e = l.check().unwrap_err().to_string();
        assert!(e.starts_with("open_secs must be positive"), "{e}");
        let l: ConsultLimits = serde_json::from_str(r#"{"open_secs": 99999999999}"#).unwrap();
        let e = l.check().unwrap_err().to_string();
        assert!(e.contains("at most 31536000 (a year)"), "{e}");
        assert!(serde_json::from_str::<ConsultLimits>(r#"{"max_opne": 3}"#).is_err());
    }
}
