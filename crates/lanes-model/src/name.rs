//! Agent names. A name becomes part of key patterns (`<name>:*:inbox`), an
//! ACL user and a socket file, so only a narrow alphabet is allowed: a glob
//! character or a colon would widen a pattern (an agent named `a*` would
//! own `alice:*`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Names no agent may take: Redis's own user, the host-side identities and
/// words the lanes use themselves.
pub const RESERVED: &[&str] = &[
    "default",
    "bridge",
    "sys",
    "resp",
    "agent",
    "lanes",
    "redis",
    // Labels the daemon gives to peers it cannot attribute: an agent of
    // that name would be confused with them in events and audit.
    "unverified",
    "unattributed",
    "invalid-claim",
    "deleted",
    // The family of agents consulting each other (`<agent>:consult:inbox`).
    "consult",
    // A source built into the bridge, reserved whether or not a host
    // enables it, so that enabling it later never clashes with an agent.
    "discord",
];

/// A valid agent name: `[a-z][a-z0-9_-]{0,30}` and not in [`RESERVED`].
/// Whether it also differs from every source and responder is checked by
/// [`AgentName::check_families`] where those are known.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentName(String);

/// Why a string is not an agent name; the message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not of the allowed shape.
    #[error(
        "agent name {name:?} is not allowed: it must start with a lowercase letter and have at most 31 of a-z, 0-9, '_' and '-' (no capitals, colons or glob characters, which would widen the agent's key patterns)"
    )]
    Shape {
        /// The name as given.
        name: String,
    },
    /// A built-in identity's, a source's or a responder's name.
    #[error(
        "agent name {name:?} is reserved (it names a built-in identity, a source or a responder); choose another"
    )]
    Reserved {
        /// The name as given.
        name: String,
    },
}

fn reserved(name: &str) -> NameError {
    NameError::Reserved {
        name: name.to_string(),
    }
}

impl AgentName {
    /// Parses `name` and checks it against the stream families (sources
    /// and responders) too: an agent named like one would be confused with
    /// it in key patterns and ACL users.
    pub fn with_families(name: &str, families: &[String]) -> Result<AgentName, NameError> {
        let n: AgentName = name.parse()?;
        n.check_families(families)?;
        Ok(n)
    }

    /// Refuses a name that is also one of `families`.
    pub fn check_families(&self, families: &[String]) -> Result<(), NameError> {
        if families.contains(&self.0) {
            return Err(reserved(&self.0));
        }
        Ok(())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AgentName {
    type Err = NameError;

    fn from_str(name: &str) -> Result<AgentName, NameError> {
        let b = name.as_bytes();
        let shape = !b.is_empty()
            && b.len() <= 31
            && b[0].is_ascii_lowercase()
            && b[1..]
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
        if !shape {
            return Err(NameError::Shape {
                name: name.to_string(),
            });
        }
        if RESERVED.contains(&name) {
            return Err(reserved(name));
        }
        Ok(AgentName(name.to_string()))
    }
}

impl TryFrom<String> for AgentName {
    type Error = NameError;

    fn try_from(name: String) -> Result<AgentName, NameError> {
        name.parse()
    }
}

impl From<AgentName> for String {
    fn from(n: AgentName) -> String {
        n.0
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As the string it is, so that messages quote a name as they always have.
impl fmt::Debug for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for AgentName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for AgentName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AgentName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let src = vec!["discord".to_string(), "ops".to_string()];
        let check = |name: &str, families: &[String]| AgentName::with_families(name, families);
        assert!(check("alice", &src).is_ok());
        assert!(check("a", &src).is_ok());
        assert!(check("bot-2_x", &src).is_ok());
        assert!(check(&format!("a{}", "b".repeat(30)), &src).is_ok());
        for good in ["bob-2", "x_y"] {
            assert!(check(good, &[]).is_ok(), "{good} refused");
        }
        for bad in [
            "a*",
            "x:y",
            "Alice",
            "bridge",
            "default",
            "unverified",
            "unattributed",
            "invalid-claim",
            "discord",
            "ops",
            "",
            "1abc",
            "-a",
            "A",
            "a.b",
            &"a".repeat(32),
        ] {
            assert!(check(bad, &src).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn deserialising_validates() {
        let n: AgentName = serde_json::from_str(r#""alice""#).unwrap();
        assert_eq!(n.as_str(), "alice");
        assert_eq!(serde_json::to_string(&n).unwrap(), r#""alice""#);
        let e = serde_json::from_str::<AgentName>(r#""a*""#).unwrap_err();
        assert!(e.to_string().contains("is not allowed"), "{e}");
        assert!(serde_json::from_str::<AgentName>(r#""sys""#).is_err());
        assert_eq!(AgentName::try_from("bob".to_string()).unwrap(), "bob");
    }
}
