//! The records of a `subscribe` stream.

use crate::record::{AuditRecord, EventRecord};
use serde::{Deserialize, Serialize};

/// The kind name a subscriber asks for to receive refusals.
pub const REFUSAL_KIND: &str = "refusal";

/// One streamed record of `subscribe`, as `{"<kind>": …}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Streamed {
    /// The subscription is in place: everything after this is streamed.
    Subscribed(Subscribed),
    /// A lifecycle event (also health failures and restarts, with the
    /// actor that caused them).
    Event(EventRecord),
    /// A refused request (admins only).
    Refusal(AuditRecord),
    /// This many records were dropped here because the subscriber did not
    /// read fast enough.
    Missed(u64),
}

/// What a subscription streams.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Subscribed {
    /// The apps it is narrowed to by name or `@tag`, or none when it sees
    /// every app.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps: Option<Vec<String>>,
    /// The kinds streamed (empty: all the caller may see).
    pub kinds: Vec<String>,
    /// Whether refusals are streamed.
    pub refusals: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_one_key_objects() {
        let v = serde_json::to_value(Streamed::Missed(3)).unwrap();
        assert_eq!(v, serde_json::json!({"missed": 3}));
        let head = Streamed::Subscribed(Subscribed {
            apps: None,
            kinds: vec!["started".into()],
            refusals: false,
        });
        let v = serde_json::to_value(&head).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"subscribed": {"kinds": ["started"], "refusals": false}})
        );
        let back: Streamed = serde_json::from_value(v).unwrap();
        assert!(matches!(back, Streamed::Subscribed(s) if s.kinds == ["started"]));
    }
}
