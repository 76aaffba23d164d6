//! The bridge's sources, each behind the [`Source`] trait,
//! and [`KINDS`]: the one list of them, which the bridge builds from its
//! configuration and checks a reload against. A new source is a folder
//! here and its line in `kinds!`.

use crate::source::{Source, SourceError};
use oxidepm_lanes::bridge_config::BridgeConfig;
use std::sync::Arc;

pub mod consult;
pub mod discord;
pub mod email;
pub mod webhook;

/// What building a source gives: the source, or `None` when the
/// configuration has no section for it.
pub type Built = Result<Option<Arc<dyn Source>>, SourceError>;

/// What the bridge needs to know of one kind of source.
pub struct Kind {
    /// The source's name, as in `sources` and the configuration's key.
    pub name: &'static str,
    /// Builds the source when the configuration has its section (`None`
    /// when it has none).
    pub build: fn(&BridgeConfig) -> Built,
    /// Whether adding or removing its section needs a restart (a reload
    /// says so); otherwise the running source takes the change up.
    pub restart_to_add: bool,
}

/// Lists the kinds, in the order they are built: `name => restart_to_add,
/// build;` where `build` makes an `Option` of the source from the
/// configuration, or an error the source's own.
macro_rules! kinds {
    ($($name:expr => $restart:expr, $build:expr;)*) => {
        /// Every kind of source, in the order they are built.
        pub const KINDS: &[Kind] = &[$(Kind {
            name: $name,
            build: |cfg| Ok(($build)(cfg)?.map(|s| Arc::new(s) as Arc<dyn Source>)),
            restart_to_add: $restart,
        },)*];
    };
}

kinds! {
    webhook::NAME => true, |c: &BridgeConfig| c.webhook.as_ref().map(webhook::WebhookSource::bind).transpose();
    "email" => false, email::EmailSource::new;
    oxidepm_lanes::consult::CONSULT => true, |c| Ok::<_, SourceError>(consult::ConsultSource::new(c));
    discord::NAME => true, discord::DiscordSource::new;
}
