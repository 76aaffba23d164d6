//! The responder contract, in one place for the daemon, the lane proxy
//! and the tests; `docs/responders.md` (below) is its one description,
//! for `ops` and responder apps alike.
#![doc = ""]
#![doc = include_str!("../../../docs/responders.md")]

use crate::name::AgentName;
use crate::proxy_config::{AgentConfig, ProxyConfigError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Names no responder app may take: the built-in sources, agents'
/// consultations and the built-in `ops` responder.
pub const BUILTIN_FAMILIES: &[&str] = &["webhook", "email", "discord", "consult", "ops"];

/// The fields of a reply that name the request it answers (the first is
/// what `ops` writes; the second a shorter alias).
pub const REQUEST_ID_FIELDS: &[&str] = &["request_id", "re"];

/// The largest `MAXLEN` a reply may give by default (`[lanes]
/// responder_inbox_maxlen`): every reply caps the inbox it goes to, so a
/// responder cannot fill Redis through one agent's inbox.
pub const DEFAULT_INBOX_MAXLEN: u64 = 1000;

/// The largest reply by default (`[lanes] responder_reply_max_bytes`), in
/// bytes of field names and values: with the inbox's `MAXLEN`, it bounds
/// the memory a responder can fill in one agent's inbox (1000 replies of a
/// whole command each would be a gigabyte).
pub const DEFAULT_REPLY_MAX_BYTES: usize = 64 << 10;

/// The consumer group responder `name` reads its outboxes with: its name.
pub fn group(name: &str) -> &str {
    name
}

/// The socket of responder `name` in `lanes_dir`: `<name>.sock`, beside
/// the agents' (a responder's name is never an agent's).
pub fn responder_socket(lanes_dir: &Path, name: &AgentName) -> PathBuf {
    crate::proxy_config::agent_socket(lanes_dir, name)
}

/// Whether `id` has the shape of a stream entry id (`<ms>-<seq>`, or
/// `<ms>`), so that it can be asked about without surprise.
pub fn is_entry_id(id: &[u8]) -> bool {
    let mut parts = id.splitn(2, |b| *b == b'-');
    let digits = |p: &[u8]| !p.is_empty() && p.len() <= 20 && p.iter().all(u8::is_ascii_digit);
    let ms = parts.next().unwrap_or(b"");
    digits(ms) && parts.next().is_none_or(digits)
}

/// One responder's lane in the proxy's configuration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResponderConfig {
    /// The responder (its family, group and socket name).
    pub name: AgentName,
    /// File holding the clear password of ACL user `resp_<name>`.
    pub password_file: PathBuf,
    /// Owner of the socket and the uid allowed to connect (default: the
    /// proxy's own).
    #[serde(default)]
    pub uid: Option<u32>,
    /// Client connections at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// The largest `MAXLEN` a reply may give (every reply gives one).
    #[serde(default = "default_inbox_maxlen")]
    pub inbox_maxlen: u64,
    /// The largest reply, in bytes of field names and values.
    #[serde(default = "default_reply_max_bytes")]
    pub reply_max_bytes: usize,
}

fn default_max_connections() -> usize {
    crate::proxy_config::DEFAULT_MAX_CONNECTIONS
}

fn default_inbox_maxlen() -> u64 {
    DEFAULT_INBOX_MAXLEN
}

fn default_reply_max_bytes() -> usize {
    DEFAULT_REPLY_MAX_BYTES
}

impl ResponderConfig {
    /// The lane of responder `name` with the defaults of every optional key.
    pub fn new(name: AgentName, password_file: PathBuf) -> ResponderConfig {
        ResponderConfig {
            name,
            password_file,
            uid: None,
            max_connections: default_max_connections(),
            inbox_maxlen: DEFAULT_INBOX_MAXLEN,
            reply_max_bytes: DEFAULT_REPLY_MAX_BYTES,
        }
    }
}

/// Checks the responders against each other and the agents: a name is
/// one lane's only.
pub fn validate(
    responders: &[ResponderConfig],
    agents: &[AgentConfig],
) -> Result<(), ProxyConfigError> {
    for (i, r) in responders.iter().enumerate() {
        let twice = responders[..i].iter().any(|o| o.name == r.name)
            || agents.iter().any(|a| a.name == r.name);
        if twice {
            return Err(ProxyConfigError::Twice {
                agent: r.name.clone(),
            });
        }
        if r.max_connections == 0 {
            return Err(ProxyConfigError::MaxConnections {
                agent: r.name.clone(),
            });
        }
        if r.inbox_maxlen == 0 {
            return Err(ProxyConfigError::Maxlen {
                agent: r.name.clone(),
            });
        }
        if r.reply_max_bytes == 0 {
            return Err(ProxyConfigError::ReplyMaxBytes {
                agent: r.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids() {
        for ok in ["1-0", "1700000000000-12", "5"] {
            assert!(is_entry_id(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "a-1",
            "1-2-3",
            "*",
            "$",
            "1 -0",
            &"9".repeat(21),
        ] {
            assert!(!is_entry_id(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn a_name_is_one_lanes() {
        let r = ResponderConfig::new("echo".parse().unwrap(), "/s/resp_echo".into());
        validate(std::slice::from_ref(&r), &[]).unwrap();
        assert!(validate(&[r.clone(), r.clone()], &[]).is_err());
        let a = AgentConfig::new("echo".parse().unwrap(), "/s/agent_echo".into());
        assert!(validate(std::slice::from_ref(&r), &[a]).is_err());
        assert_eq!(group("echo"), "echo");
    }
}
