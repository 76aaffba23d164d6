//! What the filter decides for one command ([`Verdict`]), and the facts of
//! a lane it decides with ([`Policy`]): the vocabulary the agent's and the
//! responder's filters share, and the command pump acts on.

use oxidepm_lanes::AgentName;
use std::borrow::Cow;

/// What the proxy does with one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Re-encode the command as parsed and send it upstream.
    Forward,
    /// An XADD to the agent's outbox of `families[family]`: forward it if
    /// the lane's bounds admit it.
    Append {
        /// Index in [`Policy::families`].
        family: usize,
        /// The key to send instead of the one given (the shared form
        /// mapped to the agent's own outbox).
        key: Option<Vec<u8>>,
    },
    /// A command that may create a consumer named by argument `arg`:
    /// forward it if the lane admits the name.
    Consume {
        /// The index of the consumer name among the command's arguments.
        arg: usize,
    },
    /// XGROUP DELCONSUMER: forward it; Redis may hold a consumer fewer.
    DelConsumer,
    /// MULTI: forward it; the connection is in a transaction from now.
    Multi,
    /// EXEC: forward it (or DISCARD, if the transaction was refused).
    Exec,
    /// DISCARD: forward it; the transaction ends.
    Discard,
    /// `CLIENT SETNAME`, with the (valid) name at argument `arg`: kept by
    /// the proxy, answered `+OK`.
    SetName {
        /// The index of the name among the command's arguments.
        arg: usize,
    },
    /// `CLIENT GETNAME`: answered by the proxy.
    GetName,
    /// `INFO`: answered by the proxy (see `crate::filter::handshake`).
    Info,
    /// `HELLO`: forwarded as `HELLO [protover]`; a SETNAME in it is kept
    /// by the proxy.
    Hello {
        /// The index of the protocol version, if given.
        protover: Option<usize>,
        /// The index of the (valid) client name, if given.
        name: Option<usize>,
    },
    /// Answer the client with this reply; nothing goes upstream.
    Reply(Cow<'static, [u8]>),
    /// Answer, then close the connection once earlier replies are out.
    ReplyAndClose(Cow<'static, [u8]>),
    /// On a responder's lane, an XADD to the inbox of the agent whose
    /// outbox is `outbox`, answering `request`: sent as the script of
    /// `crate::conn::answer`, which appends it only if `request` is pending in
    /// the responder's group, and acknowledges it.
    Answer {
        /// The asking agent's outbox of this responder.
        outbox: String,
        /// The entry id the reply names.
        request: Vec<u8>,
    },
}

/// The per-agent facts the filter needs.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// The agent's name (the lane's identity; already validated).
    pub agent: &'a AgentName,
    /// The families whose outboxes the agent may append to.
    pub families: &'a [String],
    /// The longest consumer name accepted, in bytes.
    pub max_consumer_name: usize,
    /// A responder's lane (`agent` is the responder): see
    /// `crate::filter::responder`.
    pub responder: bool,
    /// On a responder's lane, the largest `MAXLEN` a reply may give.
    pub reply_maxlen: u64,
    /// On a responder's lane, the largest reply, in bytes of field names
    /// and values.
    pub reply_max_bytes: usize,
}
