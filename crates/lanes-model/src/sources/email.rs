//! The email source: `[lanes.email]` of daemon.toml and the bridge's
//! `email` section, one type ([`EmailSettings`]) written as is.
//!
//! Keys: `maildir` (whose `new/` mail is routed into inboxes), `smtp` (the
//! relay, `host:port`, for outbox mail), `from` (agent → its sender
//! address) and `domain` (`<agent>@<domain>` for agents without one).
//! Nothing is secret: the relay takes mail from loopback without a login.

use super::registry::SourceSettings;
use super::section::{Presence, Section};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The email source's settings, and its section of the bridge's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// Maildir whose `new/` is read.
    pub maildir: String,
    /// SMTP relay, `host:port`.
    pub smtp: String,
    /// Address of each agent (`alice = "alice@example.org"`).
    #[serde(default)]
    pub from: BTreeMap<String, String>,
    /// Domain of agents without an address: `<agent>@<domain>`.
    #[serde(default)]
    pub domain: Option<String>,
}

impl Section for EmailSettings {
    const SOURCE: &'static str = "email";
    // The bridge runs the email source whenever it has the section.
    const PRESENCE: Presence = Presence::Free;
    type Error = std::convert::Infallible;

    fn check(&self, _sources: &[String]) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl SourceSettings for EmailSettings {
    const NAME: &'static str = "email";
    type Section = EmailSettings;

    fn section(self, _bridge_dir: &std::path::Path) -> EmailSettings {
        self
    }
}
