//! Routes of the bridge: which agent gets a message from outside.

use serde::{Deserialize, Serialize};

/// One route: messages of `source` from a channel, a guild or an address go
/// to `agent`. Exactly one of `channel`, `guild`, `address` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Source family (`webhook`, `email`, `discord`, ...).
    pub source: String,
    /// A channel of the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// A guild (a group of channels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild: Option<String>,
    /// An address (an email recipient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The agent that gets the messages.
    pub agent: String,
}

impl Route {
    /// Checks that exactly one matcher is set and that it is not empty.
    pub fn check(&self) -> Result<(), RouteError> {
        let set = [&self.channel, &self.guild, &self.address]
            .iter()
            .filter(|m| m.is_some())
            .count();
        if set != 1 {
            return Err(RouteError::Matchers {
                source: self.source.clone(),
            });
        }
        if [&self.channel, &self.guild, &self.address]
            .iter()
            .any(|m| m.as_ref().is_some_and(|v| v.is_empty()))
        {
            return Err(RouteError::EmptyMatcher);
        }
        Ok(())
    }

    /// `source channel=x -> agent`, for messages.
    pub fn describe(&self) -> String {
        let (k, v) = if let Some(c) = &self.channel {
            ("channel", c)
        } else if let Some(g) = &self.guild {
            ("guild", g)
        } else {
            ("address", self.address.as_ref().expect("checked"))
        };
        format!("{} {k}={v} -> {}", self.source, self.agent)
    }
}

/// Why a route is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// None or more than one of channel, guild and address is set.
    Matchers {
        /// The route's source family.
        source: String,
    },
    /// The matcher is set but empty.
    EmptyMatcher,
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteError::Matchers { source } => write!(
                f,
                "a route of {source:?} needs exactly one of channel, guild or address"
            ),
            RouteError::EmptyMatcher => {
                f.write_str("a route's channel, guild or address cannot be empty")
            }
        }
    }
}

impl std::error::Error for RouteError {}
