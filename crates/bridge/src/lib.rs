//! `oxidepm-bridge`: the outside world in and out of the lanes.
//!
//! A host-side process, run by the daemon as an `adapter` app, that talks to
//! the private Redis as the ACL user `bridge`. Inbound, each source (the
//! webhook listener, the mail reader, …) hands messages to one
//! [`publish`](publish::publish) function, which routes them by the table of
//! the configuration and writes `<agent>:<source>:inbox` — or
//! `bridge:unrouted` when no route and no default agent matches, or the
//! route is parked (its agent is gone): a bad name never stops the bridge.
//! Outbound, every `<agent>:<source>:outbox` is drained with the consumer
//! group `bridge`, read piece by piece within a byte budget per outbox,
//! each entry delivered by its source as coming from the agent named by
//! the key (never by the payload) and acknowledged only after delivery; an
//! entry that keeps failing, or is too large or malformed to deliver, goes
//! to `<agent>:<source>:outbox:dead`. What is done is trimmed from the
//! outbox; nothing undelivered is.
//!
//! * the JSON configuration file the daemon writes is
//!   [`oxidepm_lanes::bridge_config`];
//! * [`routing`] — the routing table (pure);
//! * [`conn`] — connections to the private Redis;
//! * [`stats`] — the counters in `bridge:stats`;
//! * [`publish`] — the only way into an inbox;
//! * [`message`] — the messages a source handles, in and out;
//! * [`source`] — the `Source` trait and its error;
//! * [`shutdown`] — telling every loop that the bridge stops;
//! * [`wire`] — the reader's connection, whose replies are read piece by
//!   piece under byte bounds;
//! * [`entries`] — outbox entries as the reader reads them: kept within
//!   budget, too large, or malformed;
//! * [`outbox`] — the reader of outboxes;
//! * [`readers`] — one reader, or one per agent on a cluster;
//! * [`delivery`] — one outbox's worker: deliver, retry, dead-letter, ack;
//! * [`trim`] — trimming what is delivered from an outbox, and only that;
//! * [`sources`] — the sources: `webhook` (HTTP in, HTTP out), `email`
//!   (Maildir in, SMTP out), `discord` (gateway in, REST out) and
//!   `consult` (agents consulting each other, one agent's outbox routed
//!   into another's inbox under the rules);
//! * [`shared_routes`] — the routes every host shares on a shared Redis;
//! * [`supervise`] — each source's inbound side under its own supervision:
//!   a failed one is stopped and reported, the rest goes on;
//! * [`service`] — the whole bridge: start, reload (SIGHUP), shutdown.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod conn;
mod delivery;
mod entries;
mod message;
mod outbox;
mod publish;
mod readers;
mod routing;
mod service;
mod shared_routes;
mod shutdown;
mod source;
mod sources;
mod stats;
mod supervise;
mod trim;
mod wire;

pub use message::{Inbound, Outbound};
pub use oxidepm_lanes::{BridgeConfig, ConfigError};
pub use publish::{PublishError, Published, Publisher};
pub use service::{run, Bridge, BridgeError, ReloadReport};
pub use shutdown::Shutdown;
pub use source::{BoxFuture, DeliveryError, Source, SourceError};

pub use oxidepm_sys::runtime::runtime;
