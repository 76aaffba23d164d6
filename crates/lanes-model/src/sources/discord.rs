//! The discord source: `[lanes.discord]` of daemon.toml
//! ([`DiscordSettings`]) and the bridge's `discord` section
//! ([`DiscordConfig`]), which is those settings as they are plus the bot
//! token's file and the bridge's own knobs.
//!
//! ```json
//! "discord": {
//!   "gateway_url": null,
//!   "api_url": null,
//!   "token_file": "/home/u/.oxidepm/bridge/discord_token"
//! }
//! ```
//!
//! Settings (daemon.toml and the file): `enabled` (daemon.toml's switch;
//! the file has the section exactly when it is on, and does not write it),
//! `gateway_url` (a `ws://` or `wss://` URL) and `api_url` (an `http://` or
//! `https://` base, the part before `/api/v10/…`), for a gateway proxy or a
//! local stand-in; unset, the bot talks to Discord itself. The bounds:
//! `max_text_bytes` (an inbound message's text is cut at this many bytes,
//! on a character boundary; default 16 KiB), `max_attachments` (attachment
//! URLs kept per message, default 10), `dedupe_ids` (message ids remembered
//! to drop a message the gateway sends twice, default 4,096),
//! `ignore_bots` (messages of other bots are dropped, default true, so that
//! two bots cannot answer each other forever).
//!
//! The file only: `token_file` holds the bot token (a copy the daemon
//! makes of `secrets/discord_token`; the token itself is never in the
//! file), `publish_attempts` (tries to put an inbound message into Redis
//! before it is counted lost, default 8), `post_timeout_ms` (one REST
//! request, default 10,000).

use super::registry::{SecretOrigin, SecretSpec, SourceSettings};
use super::section::{Presence, Section};
use serde::{Deserialize, Serialize};
use std::error::Error;
use std::path::{Path, PathBuf};

/// The discord source's settings: `[lanes.discord]`, and the same keys of
/// the bridge's `discord` section.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DiscordSettings {
    /// Whether the bridge runs the discord source (daemon.toml's switch).
    #[serde(skip_serializing)]
    pub enabled: bool,
    /// Gateway URL instead of Discord's (`ws://` or `wss://`).
    pub gateway_url: Option<String>,
    /// REST base instead of `https://discord.com` (`http://` or `https://`).
    pub api_url: Option<String>,
    /// Bytes of an inbound message's text kept.
    pub max_text_bytes: usize,
    /// Attachment URLs kept per inbound message.
    pub max_attachments: usize,
    /// Message ids remembered for de-duplication.
    pub dedupe_ids: usize,
    /// Drop messages written by other bots.
    pub ignore_bots: bool,
}

impl Default for DiscordSettings {
    fn default() -> DiscordSettings {
        DiscordSettings {
            enabled: false,
            gateway_url: None,
            api_url: None,
            max_text_bytes: 16 << 10,
            max_attachments: 10,
            dedupe_ids: 4096,
            ignore_bots: true,
        }
    }
}

/// The bridge's `discord` section: the settings, the bot token's file and
/// the keys only the file has.
// Flattened as the webhook's settings are (see `super::webhook`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiscordConfig {
    /// What daemon.toml sets.
    #[serde(flatten)]
    pub settings: DiscordSettings,
    /// File holding the bot token.
    pub token_file: PathBuf,
    /// Tries to publish one inbound message.
    #[serde(default = "default_publish_attempts")]
    pub publish_attempts: u32,
    /// Timeout of one REST request, in milliseconds.
    #[serde(default = "default_post_timeout_ms")]
    pub post_timeout_ms: u64,
}

fn default_publish_attempts() -> u32 {
    8
}
fn default_post_timeout_ms() -> u64 {
    10_000
}

impl DiscordSettings {
    /// Checks the URLs and bounds, as the bridge will.
    pub fn check(&self) -> Result<(), DiscordConfigError> {
        if let Some(u) = &self.gateway_url {
            if !(u.starts_with("ws://") || u.starts_with("wss://")) || u.len() <= "wss://".len() {
                return Err(DiscordConfigError::GatewayUrl { url: u.clone() });
            }
        }
        if let Some(u) = &self.api_url {
            api_host(u)?;
        }
        zero(&[
            ("max_text_bytes", self.max_text_bytes as u64),
            ("dedupe_ids", self.dedupe_ids as u64),
        ])
    }
}

impl DiscordConfig {
    /// The section of `settings`, with the bot token in `token_file` and
    /// the defaults of every key only the file has.
    pub fn of(settings: DiscordSettings, token_file: PathBuf) -> DiscordConfig {
        DiscordConfig {
            settings,
            token_file,
            publish_attempts: default_publish_attempts(),
            post_timeout_ms: default_post_timeout_ms(),
        }
    }

    /// A section with the defaults of every optional key.
    pub fn new(token_file: PathBuf) -> DiscordConfig {
        DiscordConfig::of(DiscordSettings::default(), token_file)
    }

    /// Checks the URLs and bounds.
    pub fn check(&self) -> Result<(), DiscordConfigError> {
        self.settings.check()?;
        zero(&[
            ("publish_attempts", u64::from(self.publish_attempts)),
            ("post_timeout_ms", self.post_timeout_ms),
        ])
    }
}

impl Section for DiscordConfig {
    const SOURCE: &'static str = "discord";
    const PRESENCE: Presence = Presence::Required {
        needs: "token_file",
    };
    type Error = DiscordConfigError;

    fn check(&self, _sources: &[String]) -> Result<(), DiscordConfigError> {
        DiscordConfig::check(self)
    }
}

impl SourceSettings for DiscordSettings {
    const NAME: &'static str = "discord";
    const SECRET: Option<SecretSpec> = Some(SecretSpec {
        name: "discord_token",
        origin: SecretOrigin::Given {
            what: "the bot token",
            how: "write the bot token there (from the developer portal: your application → Bot → Reset Token), then chmod 600 it",
        },
    });
    type Section = DiscordConfig;

    fn served(&self) -> bool {
        self.enabled
    }

    fn check_settings(&self, sources: &[String]) -> Result<(), Box<dyn Error + Send + Sync>> {
        if !self.enabled {
            return Ok(());
        }
        if !sources.iter().any(|s| s == Self::NAME) {
            return Err(Box::new(DiscordSettingsError::NotSource {
                sources: sources.to_vec(),
            }));
        }
        self.check()
            .map_err(|e| Box::new(DiscordSettingsError::Config(e)).into())
    }

    fn section(self, bridge_dir: &Path) -> DiscordConfig {
        let token = Self::SECRET.map(|s| s.file(bridge_dir)).unwrap_or_default();
        DiscordConfig::of(self, token)
    }
}

/// Why `[lanes.discord]` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DiscordSettingsError {
    /// `[lanes.discord]` is enabled but `discord` is not a source.
    #[error("[lanes.discord] is enabled but \"discord\" is not in lanes.sources {sources:?}; add it (sources = [\"webhook\", \"email\", \"discord\"])")]
    NotSource {
        /// The lanes' sources.
        sources: Vec<String>,
    },
    /// A value of `[lanes.discord]` cannot be used.
    #[error("lanes.{0}")]
    Config(#[source] DiscordConfigError),
}

/// The first of `bounds` that is 0.
fn zero(bounds: &[(&'static str, u64)]) -> Result<(), DiscordConfigError> {
    match bounds.iter().find(|(_, v)| *v == 0) {
        Some(&(key, _)) => Err(DiscordConfigError::Zero { key }),
        None => Ok(()),
    }
}

/// The bridge's record of the Discord channels `agent` was written a
/// message from (where it may answer); deleted with the agent's lane.
pub fn channels_key(agent: &str) -> String {
    match agent.parse::<crate::AgentName>() {
        Ok(a) => {
            crate::stream_key::agent_record(&a, crate::stream_key::AgentRecord::DiscordChannels)
        }
        // Not a name: no agent's record (the plain name, matching nothing).
        Err(_) => format!("bridge:discord:channels:{agent}"),
    }
}

/// The host (with port) of an `api_url` and whether it is plain HTTP.
pub fn api_host(url: &str) -> Result<(String, bool), DiscordConfigError> {
    let bad = || DiscordConfigError::ApiUrl {
        url: url.to_string(),
    };
    let (rest, http) = if let Some(r) = url.strip_prefix("http://") {
        (r, true)
    } else if let Some(r) = url.strip_prefix("https://") {
        (r, false)
    } else {
        return Err(bad());
    };
    let host = rest.trim_end_matches('/');
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b);
    if host.is_empty() || !host.bytes().all(plain) {
        return Err(bad());
    }
    Ok((host.to_string(), http))
}

/// Why the `discord` section cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscordConfigError {
    /// Not a websocket URL.
    #[error("discord.gateway_url {url:?}: use a ws:// or wss:// URL, or leave it out for Discord's gateway")]
    GatewayUrl {
        /// The URL as given.
        url: String,
    },
    /// Not a bare HTTP(S) base.
    #[error("discord.api_url {url:?}: use http://host[:port] or https://host[:port] with no path, or leave it out for https://discord.com")]
    ApiUrl {
        /// The URL as given.
        url: String,
    },
    /// A bound is 0.
    #[error("discord.{key} must be positive")]
    Zero {
        /// The key.
        key: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let mut c = DiscordConfig::new("/t".into());
        assert!(c.check().is_ok());
        c.settings.gateway_url = Some("http://x".into());
        assert!(matches!(
            c.check(),
            Err(DiscordConfigError::GatewayUrl { .. })
        ));
        c.settings.gateway_url = Some("ws://127.0.0.1:9".into());
        c.settings.api_url = Some("http://127.0.0.1:9/".into());
        assert!(c.check().is_ok());
        assert_eq!(
            api_host("http://127.0.0.1:9/").unwrap(),
            ("127.0.0.1:9".into(), true)
        );
        assert_eq!(
            api_host("https://proxy.example").unwrap(),
            ("proxy.example".into(), false)
        );
        for bad in ["ftp://x", "http://", "http://a/b", "https://a b"] {
            assert!(api_host(bad).is_err(), "{bad}");
        }
        c.settings.dedupe_ids = 0;
        assert_eq!(
            c.check(),
            Err(DiscordConfigError::Zero { key: "dedupe_ids" })
        );
    }
}
