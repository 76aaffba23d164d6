//! `daemon.toml`: the daemon's own settings.

use crate::access::gate::{Grant, Tiers};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

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
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let c: Config = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        c.lanes
            .check()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(c)
    }
}
