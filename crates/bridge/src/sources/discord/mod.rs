//! The `discord` source: gateway in, REST out, as one bot.
//!
//! **Inbound** ([`gateway`]): messages of guild text channels, threads and
//! direct messages the bot can see, as inbox entries ([`message`]), routed
//! by `channel` and `guild`; the bot's own messages are ignored, and so
//! are other bots' unless `ignore_bots` is false. A message the gateway
//! sends twice (a RESUME's replay) is taken once ([`dedupe`]). A bridge
//! stopped cleanly leaves its session for the next one to resume
//! ([`resume`]), so what is sent during a restart is replayed. A close
//! Discord allows a resume after is resumed; a fatal one (a refused token,
//! an intent not allowed) ends the source with what to do ([`close`]), and
//! a reload takes up a new token from the token file and starts it again.
//! A gateway message over [`close::MAX_MESSAGE_BYTES`] is refused unread.
//!
//! **Outbound** ([`rest`]): an outbox entry's `text` is posted as the bot
//! to its `channel` — only a channel that is the agent's ([`reach`]) — (an optional `reply_to` makes it a reply), in parts of
//! at most 2,000 characters ([`split`]), in order; rate limits are waited
//! for; a channel the bot cannot post to is a permanent failure, which the
//! bridge dead-letters with the reason.
//!
//! With several hosts only one bridge runs the gateway at a time
//! ([`lease`]); every bridge posts.
//!
//! The token is read from `discord.token_file` and only handed to twilight's
//! gateway and put in the REST requests' `Authorization` header (marked
//! sensitive); it is in no log line, error or entry.

mod close;
mod dedupe;
pub mod gateway;
mod lease;
mod message;
mod reach;
pub mod rest;
mod resume;
mod split;

use crate::message::Outbound;
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use crate::source::{BoxFuture, DeliveryError, Source, SourceError};
use oxidepm_lanes::bridge_config::{BridgeConfig, DiscordConfig, DiscordConfigError};
use oxidepm_lanes::{Secret, SecretError};
use std::sync::Arc;

/// The source's name.
pub const NAME: &str = "discord";

/// Why the discord source cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    /// The token file cannot be read.
    #[error("discord.token_file: {0}")]
    Token(#[source] SecretError),
    /// The section cannot be used.
    #[error(transparent)]
    Config(#[from] DiscordConfigError),
    /// The gateway ended the session for good (a fatal close code).
    #[error("{0}")]
    Refused(close::Refusal),
}

impl From<DiscordError> for SourceError {
    fn from(e: DiscordError) -> SourceError {
        SourceError::new(NAME, e)
    }
}

/// The discord source.
pub struct DiscordSource {
    cfg: Arc<DiscordConfig>,
    /// Read again at a reload: a token put right after Discord refused it
    /// is taken up without a restart.
    token: std::sync::RwLock<Secret>,
    rest: rest::Rest,
    counts: Arc<gateway::Counts>,
    reach: Arc<reach::Reach>,
    /// With several hosts (the tagged key form), this host's id: the
    /// gateway runs only while it holds the lease ([`lease`]).
    lease_as: Option<String>,
}

impl DiscordSource {
    /// The source of a configuration with a `discord` section (reads the
    /// token); `None` without one.
    pub fn new(cfg: &BridgeConfig) -> Result<Option<DiscordSource>, DiscordError> {
        let Some(d) = &cfg.discord else {
            return Ok(None);
        };
        d.check()?;
        // One TLS provider for the gateway and REST; an error means one is
        // installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let token = Secret::read(&d.token_file).map_err(DiscordError::Token)?;
        let rest = rest::Rest::new(&token, d)?;
        let reach = Arc::new(reach::Reach::default());
        reach.set_routes(crate::routing::Routes::from_plan(&cfg.route_plan()));
        Ok(Some(DiscordSource {
            cfg: Arc::new(d.clone()),
            token: std::sync::RwLock::new(token),
            rest,
            counts: Arc::default(),
            reach,
            lease_as: (oxidepm_lanes::stream_key::key_form() == oxidepm_lanes::KeyForm::Tagged)
                .then(|| cfg.outbox.consumer.clone()),
        }))
    }
}

impl DiscordSource {
    /// Takes up the token file's current token (the daemon writes a new
    /// one before it has the bridge reload); one that cannot be read
    /// leaves the one in use.
    fn read_token_again(&self) {
        match Secret::read(&self.cfg.token_file) {
            Ok(t) => {
                let mut cur = self.token.write().unwrap_or_else(|p| p.into_inner());
                if *cur != t {
                    log::info!("discord: the token file has a new token; taken up");
                    self.rest.set_token(&t);
                    *cur = t;
                }
            }
            Err(e) => log::warn!("discord: discord.token_file: {e}; the token in use is kept"),
        }
    }
}

impl Source for DiscordSource {
    fn name(&self) -> &str {
        NAME
    }

    fn inbound(
        &self,
        publisher: Publisher,
        shutdown: Shutdown,
    ) -> BoxFuture<'_, Result<(), SourceError>> {
        self.reach.set_connection(publisher.connection());
        let token = self.token.read().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move {
            let session = |sd: Shutdown| {
                gateway::run(
                    self.cfg.clone(),
                    &token,
                    publisher.clone(),
                    sd,
                    self.counts.clone(),
                    self.reach.clone(),
                )
            };
            match &self.lease_as {
                Some(host) => {
                    lease::hold(publisher.connection(), host.clone(), shutdown, session).await
                }
                None => session(shutdown).await,
            }
            .map_err(SourceError::from)
        })
    }

    fn deliver<'a>(&'a self, msg: &'a Outbound) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let parts = rest::parts(
                &msg.stream,
                &msg.id,
                &msg.channel,
                &msg.text,
                msg.field("reply_to"),
            )?;
            self.reach.check(&msg.agent, &msg.channel).await?;
            for p in &parts {
                self.rest.post(p).await?;
            }
            Ok(())
        })
    }

    fn reload(&self, config: &BridgeConfig) -> Result<Vec<String>, SourceError> {
        self.reach
            .set_routes(crate::routing::Routes::from_plan(&config.route_plan()));
        match &config.discord {
            Some(d) if *d == *self.cfg => {
                self.read_token_again();
                Ok(Vec::new())
            }
            Some(_) => Ok(vec!["the discord settings".into()]),
            None => Ok(vec!["removing the discord source".into()]),
        }
    }
}
