//! The two messages a source handles: [`Inbound`], what came in from the
//! outside world before it is routed, and [`Outbound`], one outbox entry
//! to deliver. Plain data, shared by the sources, the publisher and the
//! outbox's workers.

/// One message from the outside world, before routing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inbound {
    /// The source name (the `<source>` of `<agent>:<source>:inbox`).
    pub source: String,
    /// Channel id (may be empty when the source has none).
    pub channel: String,
    /// Guild (server, workspace) id, when the source has one.
    pub guild: Option<String>,
    /// The address it was sent to (mail), when the source has one.
    pub address: Option<String>,
    /// Who sent it, as the source names them.
    pub sender: String,
    /// The text.
    pub text: String,
    /// The source's own id of the message (for de-duplication), if any.
    pub external_id: Option<String>,
    /// More fields for the inbox entry (a mail's subject, …); a name the
    /// bridge writes itself is ignored here.
    pub extra: Vec<(String, String)>,
}

/// One outbox entry to deliver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outbound {
    /// The agent that wrote it: taken from the outbox key, never from the
    /// entry's fields.
    pub agent: String,
    /// The source (family) of the outbox.
    pub source: String,
    /// The outbox key, `<agent>:<source>:outbox`.
    pub stream: String,
    /// The entry id: stable across redeliveries, for de-duplication.
    pub id: String,
    /// The entry's `channel` field ("" when it has none).
    pub channel: String,
    /// The entry's `text` field ("" when it has none).
    pub text: String,
    /// Every field of the entry as written by the agent, in order.
    pub fields: Vec<(String, String)>,
}

impl Outbound {
    /// The first value of a field.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}
