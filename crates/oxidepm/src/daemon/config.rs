//! `daemon.toml`: the daemon's own settings.

use crate::access::gate::{Grant, Tiers};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why daemon.toml cannot be used; the daemon does not start with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or has a field of the wrong type or an
    /// unknown one.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and what, as the TOML parser says.
        source: toml::de::Error,
    },
    /// The `[lanes]` settings are inconsistent.
    #[error("{}: {source}", path.display())]
    Lanes {
        /// The file.
        path: PathBuf,
        /// What the lanes' check says.
        source: crate::lanes::settings::SettingsError,
    },
}

/// The daemon's settings; every field has a default, so an absent file is
/// the default configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Serve `agent.sock`.
    #[serde(default = "yes")]
    pub agent_socket: bool,
    /// Start the apps that were running at the last stop.
    #[serde(default)]
    pub resurrect: bool,
    /// Log level of the daemon (`error`, `warn`, `info`, `debug`, `trace`).
    #[serde(default = "info")]
    pub log_level: String,
    /// Idle timeout of agent.sock connections, seconds (default 60).
    #[serde(default = "sixty")]
    pub agent_idle_timeout_secs: u64,
    /// Permission tiers.
    #[serde(default)]
    pub tiers: Tiers,
    /// Grants of adapters, by adapter app name.
    #[serde(default)]
    pub adapters: BTreeMap<String, Grant>,
    /// Agent lanes.
    #[serde(default)]
    pub lanes: crate::lanes::settings::LanesSettings,
    /// Let a root daemon run agents as root (sharing a uid, so not isolated
    /// from each other or from the daemon).
    #[serde(default)]
    pub agents_share_uid: bool,
}

fn yes() -> bool {
    true
}
fn info() -> String {
    "info".into()
}
fn sixty() -> u64 {
    60
}

impl Default for Config {
    fn default() -> Config {
        toml::from_str("").expect("defaults parse")
    }
}

impl Config {
    /// Reads `path`; an absent file is the default configuration.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let path_buf = || path.to_path_buf();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path_buf(),
                    source,
                })
            }
        };
        let c: Config = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path_buf(),
            source,
        })?;
        c.lanes.check().map_err(|source| ConfigError::Lanes {
            path: path_buf(),
            source,
        })?;
        Ok(c)
    }
}
