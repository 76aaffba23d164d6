//! The `Source` trait: one family of outside channels (webhook, email,
//! discord, matrix, slack, …) as the bridge sees it.
//!
//! A source does two things and nothing else:
//!
//! * **inbound** — it runs a loop (an HTTP listener, a Maildir watcher, a
//!   chat gateway) that turns what arrives into [`Inbound`](crate::Inbound) messages and
//!   hands each to the [`Publisher`]. Routing, the stream keys and the
//!   counters are the publisher's business. When `publish` fails (the
//!   private Redis is unavailable) the source must tell its sender that the
//!   message was not taken (an HTTP 503, a mail left in `new/`, a gateway
//!   nack), never pretend it was;
//! * **outbound** — [`Source::deliver`] sends one outbox entry to the
//!   outside world. The bridge calls it with the agent taken from the
//!   outbox's key, acknowledges the entry only after `Ok`, retries on
//!   [`DeliveryError::Retry`] and dead-letters on
//!   [`DeliveryError::Permanent`]. Entries of one outbox are delivered one at
//!   a time, in order; delivery is at-least-once, so a sink that must not
//!   repeat itself de-duplicates on [`Outbound::id`].
//!
//! Its failures are a [`SourceError`]: the source's name and its own error,
//! boxed, so that this module knows no source in particular.
//!
//! To add a source: implement this trait in a folder of its own under
//! `sources/` (with `From` its error for [`SourceError`]) and give it its
//! line in `sources::KINDS`, which builds it from its section of the
//! configuration (one type in `oxidepm_lanes::sources`). Nothing in
//! routing or delivery changes.
//!
//! The trait is dyn-compatible (the bridge holds `Arc<dyn Source>`), so its
//! async methods return boxed futures.

use crate::message::Outbound;
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a delivery failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryError {
    /// Worth trying again later (a timeout, a 5xx, a refused connection).
    Retry(String),
    /// Will never work (a 4xx, no address to deliver to): dead-lettered now.
    Permanent(String),
    /// The far end asked to be left alone this long (a rate limit): sent
    /// again after it, not counted as a failed try.
    Wait(String, std::time::Duration),
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeliveryError::Retry(r) => write!(f, "temporary failure: {r}"),
            DeliveryError::Permanent(r) => write!(f, "permanent failure: {r}"),
            DeliveryError::Wait(r, _) => write!(f, "asked to wait: {r}"),
        }
    }
}

/// Why a source stopped taking messages in, or cannot take up a new
/// configuration: the source's name and its own error, which is what it
/// reads as (each source's error says what to do already).
#[derive(Debug)]
pub struct SourceError {
    /// The source's name.
    pub name: String,
    /// The source's own error.
    pub cause: Box<dyn std::error::Error + Send + Sync>,
}

impl SourceError {
    /// Source `name`'s error `cause`.
    pub fn new(
        name: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> SourceError {
        SourceError {
            name: name.into(),
            cause: cause.into(),
        }
    }
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.cause.fmt(f)
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.source()
    }
}

/// One family of outside channels.
pub trait Source: Send + Sync {
    /// The source's name, as in the configuration's `sources`.
    fn name(&self) -> &str;

    /// Runs the inbound side until `shutdown` is set, handing every message
    /// to `publisher`. Returns `Err` only for a failure that stops the
    /// source (a listener that died, a token refused for good), saying
    /// what to do: the bridge reports it and leaves the source stopped
    /// until its next reload, and everything else runs on.
    fn inbound(
        &self,
        publisher: Publisher,
        shutdown: Shutdown,
    ) -> BoxFuture<'_, Result<(), SourceError>>;

    /// Delivers one outbox entry, as coming from `msg.agent`.
    fn deliver<'a>(&'a self, msg: &'a Outbound) -> BoxFuture<'a, Result<(), DeliveryError>>;

    /// Whether what is dead-lettered from this source's outboxes is also
    /// told to the sender, in its inbox of this source (`kind refused`,
    /// `re` the entry's id, `error`). Sources whose inbox entries an agent
    /// dispatches on by `kind` tell; the others do not, since an agent
    /// that answers every entry of its inbox would answer the refusal too.
    fn tells_sender(&self) -> bool {
        false
    }

    /// The address it listens on for the outside world, if it listens
    /// (the webhook's, whose port may have been chosen by the kernel).
    fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }

    /// Takes up a new configuration (SIGHUP). Settings it cannot change
    /// while running are reported in the `Ok` list as needing a restart.
    fn reload(&self, _config: &crate::BridgeConfig) -> Result<Vec<String>, SourceError> {
        Ok(Vec::new())
    }
}
