//! The responder contract, in one place for the daemon, the lane proxy
//! and the tests; `docs/responders.md` (below) is its one description,
//! for `ops` and responder apps alike.
#![doc = ""]
#![doc = include_str!("../../../docs/responders.md")]

use crate::name::AgentName;
use std::path::{Path, PathBuf};

// A responder's lane and its bounds are the proxy's configuration; they
// are named here too, with the rest of the contract.
pub use crate::proxy_config::{ResponderConfig, DEFAULT_INBOX_MAXLEN, DEFAULT_REPLY_MAX_BYTES};

/// Defines [`BUILTIN_FAMILIES`] from the sources of
/// [`crate::with_sources`].
macro_rules! builtin_families {
    (
        early { $($early:ident : $early_ty:ty,)* }
        late { $($late:ident : $late_ty:ty,)* }
    ) => {
        /// Names no responder app may take: the built-in sources, agents'
        /// consultations and the built-in `ops` responder.
        pub const BUILTIN_FAMILIES: &[&str] = &[
            $(stringify!($early),)*
            $(stringify!($late),)*
            crate::consult::CONSULT,
            "ops",
        ];
    };
}

crate::with_sources!(builtin_families);

/// The fields of a reply that name the request it answers (the first is
/// what `ops` writes; the second a shorter alias).
pub const REQUEST_ID_FIELDS: &[&str] = &["request_id", "re"];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_families_are_the_sources_consult_and_ops() {
        assert_eq!(
            BUILTIN_FAMILIES,
            ["webhook", "email", "discord", "consult", "ops"]
        );
    }

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
}
