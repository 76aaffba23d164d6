//! The `Source` trait: one family of outside channels (webhook, email,
//! discord, matrix, slack, …) as the bridge sees it.
//!
//! A source does two things and nothing else:
//!
//! * **inbound** — it runs a loop (an HTTP listener, a Maildir watcher, a
//!   chat gateway) that turns what arrives into [`Inbound`] messages and
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
//! To add a source: implement this trait in a module of its own and
//! construct it in `service::build_sources` from its configuration section.
//! Nothing in routing or delivery changes.
//!
//! The trait is dyn-compatible (the bridge holds `Arc<dyn Source>`), so its
//! async methods return boxed futures.

use crate::publish::Publisher;
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

/// Tells long-running loops that the bridge is stopping.
#[derive(Clone, Debug)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

/// Sets off a [`Shutdown`].
#[derive(Debug)]
pub struct ShutdownTrigger(tokio::sync::watch::Sender<bool>);

impl Shutdown {
    /// A new pair.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (ShutdownTrigger(tx), Shutdown(rx))
    }

    /// Whether the bridge is stopping.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the bridge is stopping.
    pub async fn wait(&mut self) {
        // An error means the trigger is gone, which also means stopping.
        let _ = self.0.wait_for(|s| *s).await;
    }
}

impl ShutdownTrigger {
    /// Tells every [`Shutdown`] to stop.
    pub fn trigger(&self) {
        let _ = self.0.send(true);
    }
}

/// Why a source stopped taking messages in, or cannot take up a new
/// configuration: an error of the source that failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The webhook's.
    #[error(transparent)]
    Webhook(#[from] crate::sources::webhook::WebhookError),
    /// The discord source's.
    #[error(transparent)]
    Discord(#[from] crate::sources::discord::DiscordError),
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

    /// Takes up a new configuration (SIGHUP). Settings it cannot change
    /// while running are reported in the `Ok` list as needing a restart.
    fn reload(&self, _config: &crate::BridgeConfig) -> Result<Vec<String>, SourceError> {
        Ok(Vec::new())
    }
}
