//! The bridge's sources as daemon.toml and the bridge's file both write
//! them: one settings type per source, read from `[lanes.<source>]` and
//! written into the bridge's file as is, inside a section that adds only
//! what the daemon fills in (a secret's path) and the bridge's own knobs.
//!
//! * [`section`] — what every section has: its source's name, how it goes
//!   with `sources`, its check, and the one error a check gives;
//! * [`webhook`] — HTTP in, HTTP out;
//! * [`email`] — Maildir in, SMTP out;
//! * [`discord`] — the bot's gateway in, REST out;
//! * [`consult`] — agents consulting each other (the rules and bounds of
//!   [`crate::consult`]).
//!
//! A new source is one module here (its settings and its section, with
//! [`section::Section`] implemented), its field in
//! [`crate::bridge_config::BridgeConfig`] and in daemon.toml's `[lanes]`.

pub mod consult;
pub mod discord;
pub mod email;
pub mod section;
pub mod webhook;

pub use discord::{DiscordConfig, DiscordConfigError, DiscordSettings};
pub use email::EmailSettings;
pub use section::{Presence, PresenceError, Section, SectionError};
pub use webhook::{WebhookConfig, WebhookConfigError, WebhookLimits, WebhookSettings};
