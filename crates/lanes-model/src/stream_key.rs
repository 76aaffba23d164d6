//! Stream keys: `<agent>:<family>:inbox` and `<agent>:<family>:outbox`,
//! where the family is a source (`webhook`, `email`, …) or a responder
//! (`ops`, …). The agent part is what Redis's ACL scopes, and the bridge
//! and responders take the sender from it, so keys are built and read only
//! here, as are the globs the ACL grants on them.
//!
//! Keys have one of two forms, a property of the deployment fixed when a
//! lanes process starts ([`set_key_form`]): `plain`, `alice:webhook:inbox`
//! (a private Redis, and every key written before several hosts), or
//! `tagged`, `{alice}:webhook:inbox`, whose hash tag puts every key of one
//! agent in one Redis Cluster slot, so that one XREADGROUP over all its
//! inboxes, and a MULTI over its streams, work on a cluster.

use crate::name::AgentName;
use std::fmt;
use std::str::FromStr;

/// The bridge's dead letters: inbound messages no route and no default
/// agent took.
pub const UNROUTED_KEY: &str = "bridge:unrouted";
/// The bridge's counters (a hash).
pub const STATS_KEY: &str = "bridge:stats";
/// Every key of the bridge's own (its ACL grant).
pub const BRIDGE_KEYS: &str = "bridge:*";
/// The consumer group the bridge drains outboxes with (the daemon reports
/// its pending entries).
pub const BRIDGE_GROUP: &str = "bridge";
/// What follows an outbox key in the name of its dead-letter stream.
const DEAD_SUFFIX: &str = ":dead";

/// How an agent's part of a key is written.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KeyForm {
    /// `alice:webhook:inbox`.
    #[default]
    Plain,
    /// `{alice}:webhook:inbox`: one cluster slot per agent.
    Tagged,
}

impl KeyForm {
    /// The agent part of a key (or `*` for every agent, in a glob).
    pub fn agent_part(self, agent: &str) -> String {
        match self {
            KeyForm::Plain => agent.to_string(),
            KeyForm::Tagged if agent == "*" => "{*}".to_string(),
            KeyForm::Tagged => format!("{{{agent}}}"),
        }
    }

    /// The agent named by the agent part `part`, if it has this form.
    pub fn agent_of(self, part: &str) -> Option<&str> {
        match self {
            KeyForm::Plain => Some(part),
            KeyForm::Tagged => part.strip_prefix('{')?.strip_suffix('}'),
        }
    }
}

static KEY_FORM: std::sync::OnceLock<KeyForm> = std::sync::OnceLock::new();

/// Fixes this process's key form; called once at start, before any key is
/// built. Setting the form already in force again is fine; another one is
/// refused (two forms in one process would address two keyspaces).
pub fn set_key_form(form: KeyForm) -> Result<(), KeyError> {
    let now = *KEY_FORM.get_or_init(|| form);
    if now == form {
        Ok(())
    } else {
        Err(KeyError(format!(
            "the key form is already {now:?} in this process; it cannot become {form:?}"
        )))
    }
}

/// This process's key form (`plain` until [`set_key_form`]).
pub fn key_form() -> KeyForm {
    KEY_FORM.get().copied().unwrap_or_default()
}

/// Which way a stream carries messages, seen from the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// Written by the bridge or a responder, read by the agent.
    Inbox,
    /// Written by the agent (XADD only), read by the bridge or a responder.
    Outbox,
}

impl Dir {
    /// `inbox` or `outbox`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Inbox => "inbox",
            Dir::Outbox => "outbox",
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `s` can be a family (source or responder) name: 1 to 32 of
/// `a-z 0-9 _ -`, so that it cannot widen a key pattern either.
pub fn is_family_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// One agent's stream of one family.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// The agent whose lane it is (and, in an outbox, the sender).
    pub agent: AgentName,
    /// The source or responder.
    pub family: String,
    /// Inbox or outbox.
    pub dir: Dir,
}

impl StreamKey {
    /// `<agent>:<family>:inbox`.
    pub fn inbox(agent: &AgentName, family: &str) -> StreamKey {
        StreamKey {
            agent: agent.clone(),
            family: family.to_string(),
            dir: Dir::Inbox,
        }
    }

    /// `<agent>:<family>:outbox`.
    pub fn outbox(agent: &AgentName, family: &str) -> StreamKey {
        StreamKey {
            agent: agent.clone(),
            family: family.to_string(),
            dir: Dir::Outbox,
        }
    }

    /// The stream entries of this one go to when they cannot be delivered.
    pub fn dead_letter(&self) -> String {
        dead_letter(&self.to_string())
    }

    /// The agent's own outbox for the spec's shared form `<family>:outbox`
    /// (exactly one colon, a non-empty family), which agents written for a
    /// shared outbox send to; `None` for any other key, which is left as
    /// it is for Redis's ACL to judge.
    pub fn own_outbox(agent: &AgentName, shared: &[u8]) -> Option<Vec<u8>> {
        let family = shared
            .strip_suffix(Dir::Outbox.as_str().as_bytes())?
            .strip_suffix(b":")?;
        if family.is_empty() || family.contains(&b':') {
            return None;
        }
        let part = key_form().agent_part(agent.as_str());
        let mut k = Vec::with_capacity(part.len() + 1 + shared.len());
        k.extend_from_slice(part.as_bytes());
        k.push(b':');
        k.extend_from_slice(shared);
        Some(k)
    }
}

/// The dead-letter stream of an outbox key, or the glob of those of an
/// outbox glob.
pub fn dead_letter(key: &str) -> String {
    format!("{key}{DEAD_SUFFIX}")
}

/// A record the bridge keeps about one agent, named with the agent's hash
/// tag in the tagged form so that it shares the agent's slot (a MULTI with
/// the agent's streams stays within one slot on a cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentRecord<'a> {
    /// The questions the agent has open with `answerer` (consult).
    ConsultOpen {
        /// The agent asked.
        answerer: &'a AgentName,
    },
    /// The Discord channels the agent was written from (where it may post).
    DiscordChannels,
}

/// The key of the bridge's record `what` about `agent`. Plain form:
/// today's names, `bridge:consult:open:<asker>:<answerer>` and
/// `bridge:discord:channels:<agent>`. Tagged form: `{<agent>}:bridge:…`,
/// ending in neither `:inbox` nor `:outbox` (an answerer's name is never
/// last), so no agent's grant on its own streams matches it.
pub fn agent_record(agent: &AgentName, what: AgentRecord<'_>) -> String {
    match (key_form(), what) {
        (KeyForm::Plain, AgentRecord::ConsultOpen { answerer }) => {
            format!("bridge:consult:open:{agent}:{answerer}")
        }
        (KeyForm::Plain, AgentRecord::DiscordChannels) => {
            format!("bridge:discord:channels:{agent}")
        }
        (KeyForm::Tagged, AgentRecord::ConsultOpen { answerer }) => {
            format!("{{{agent}}}:bridge:consult:{answerer}:open")
        }
        (KeyForm::Tagged, AgentRecord::DiscordChannels) => {
            format!("{{{agent}}}:bridge:discord:channels")
        }
    }
}

/// The globs of every record of the bridge that goes with `agent`'s lane
/// when it is deleted: those about it, and the open questions others put
/// to it (an agent name holds no colon or glob character, so they match
/// no one else's).
pub fn agent_record_globs(agent: &AgentName) -> Vec<String> {
    match key_form() {
        KeyForm::Plain => vec![
            format!("bridge:consult:open:{agent}:*"),
            format!("bridge:consult:open:*:{agent}"),
            format!("bridge:discord:channels:{agent}"),
        ],
        KeyForm::Tagged => vec![
            format!("{{{agent}}}:bridge:*"),
            format!("{{*}}:bridge:consult:{agent}:open"),
        ],
    }
}

/// The globs (ACL rules) of every agent's records of the bridge in the
/// tagged form; none in the plain form, whose records are under
/// [`BRIDGE_KEYS`].
pub fn agent_record_grants() -> Vec<String> {
    match key_form() {
        KeyForm::Plain => Vec::new(),
        KeyForm::Tagged => vec![
            "{*}:bridge:consult:*:open".to_string(),
            "{*}:bridge:discord:channels".to_string(),
        ],
    }
}

/// The glob (for ACL rules) of the streams of `agent` (every agent if
/// `None`) of `family` (every family if `None`) in direction `dir`.
pub fn glob(agent: Option<&AgentName>, family: Option<&str>, dir: Dir) -> String {
    format!(
        "{}:{}:{dir}",
        key_form().agent_part(agent.map_or("*", AgentName::as_str)),
        family.unwrap_or("*")
    )
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agent = key_form().agent_part(self.agent.as_str());
        write!(f, "{agent}:{}:{}", self.family, self.dir)
    }
}

/// Why a string is not a stream key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError(String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

impl FromStr for StreamKey {
    type Err = KeyError;

    fn from_str(key: &str) -> Result<StreamKey, KeyError> {
        let bad = |why: String| KeyError(format!("{key:?} is not a lane stream key: {why}"));
        let mut parts = key.split(':');
        let (Some(agent), Some(family), Some(dir), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("want <agent>:<family>:inbox|outbox".into()));
        };
        let form = key_form();
        let agent = form
            .agent_of(agent)
            .ok_or_else(|| bad(format!("the agent part is not in the {form:?} form")))?;
        let agent: AgentName = agent
            .parse()
            .map_err(|e: crate::NameError| bad(e.to_string()))?;
        if !is_family_name(family) {
            return Err(bad(format!("{family:?} is not a source or responder name")));
        }
        let dir = match dir {
            "inbox" => Dir::Inbox,
            "outbox" => Dir::Outbox,
            _ => return Err(bad("it ends in neither :inbox nor :outbox".into())),
        };
        Ok(StreamKey {
            agent,
            family: family.to_string(),
            dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> AgentName {
        "alice".parse().unwrap()
    }

    #[test]
    fn keys_round_trip() {
        let k = StreamKey::inbox(&alice(), "discord");
        assert_eq!(k.to_string(), "alice:discord:inbox");
        assert_eq!("alice:discord:inbox".parse::<StreamKey>().unwrap(), k);
        let o = StreamKey::outbox(&alice(), "ops");
        assert_eq!(o.to_string(), "alice:ops:outbox");
        assert_eq!(o.dead_letter(), "alice:ops:outbox:dead");
        assert_eq!("alice:ops:outbox".parse::<StreamKey>().unwrap(), o);
        for bad in [
            "alice:discord",
            "alice:discord:inbox:dead",
            "Alice:discord:inbox",
            "alice:a*:inbox",
            "alice::outbox",
            "alice:discord:sent",
            "bridge:unrouted",
        ] {
            assert!(bad.parse::<StreamKey>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_tagged_form_puts_the_agent_in_a_hash_tag() {
        let t = KeyForm::Tagged;
        assert_eq!(t.agent_part("alice"), "{alice}");
        assert_eq!(t.agent_part("*"), "{*}");
        assert_eq!(t.agent_of("{alice}"), Some("alice"));
        assert_eq!(t.agent_of("alice"), None);
        assert_eq!(KeyForm::Plain.agent_of("alice"), Some("alice"));
        // A test process keeps the plain form; only another form is refused.
        assert!(set_key_form(KeyForm::Plain).is_ok());
        assert!(set_key_form(KeyForm::Tagged).is_err());
        assert_eq!(key_form(), KeyForm::Plain);
    }

    #[test]
    fn globs() {
        assert_eq!(glob(Some(&alice()), None, Dir::Inbox), "alice:*:inbox");
        assert_eq!(glob(None, Some("ops"), Dir::Outbox), "*:ops:outbox");
        assert_eq!(
            dead_letter(&glob(None, None, Dir::Outbox)),
            "*:*:outbox:dead"
        );
        for k in [UNROUTED_KEY, STATS_KEY] {
            assert!(k.starts_with(BRIDGE_KEYS.trim_end_matches('*')), "{k}");
        }
    }

    #[test]
    fn agent_records_keep_their_plain_names() {
        let bob: AgentName = "bob".parse().unwrap();
        let open = agent_record(&alice(), AgentRecord::ConsultOpen { answerer: &bob });
        assert_eq!(open, "bridge:consult:open:alice:bob");
        assert_eq!(open, crate::consult::open_key(&alice(), &bob));
        assert_eq!(
            agent_record(&alice(), AgentRecord::DiscordChannels),
            crate::bridge_config::channels_key("alice")
        );
        assert!(agent_record_grants().is_empty());
        let globs = agent_record_globs(&alice());
        assert!(globs.contains(&"bridge:consult:open:*:alice".to_string()));
    }

    #[test]
    fn own_outbox_rules() {
        let bob: AgentName = "bob".parse().unwrap();
        assert_eq!(
            StreamKey::own_outbox(&bob, b"email:outbox").as_deref(),
            Some(&b"bob:email:outbox"[..])
        );
        assert_eq!(StreamKey::own_outbox(&bob, b"bob:email:outbox"), None);
        assert_eq!(StreamKey::own_outbox(&bob, b"email:outboxes"), None);
        assert_eq!(StreamKey::own_outbox(&bob, b":outbox"), None);
        assert_eq!(StreamKey::own_outbox(&bob, b"emailoutbox"), None);
    }
}
