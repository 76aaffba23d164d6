//! `daemon.toml`: the daemon's own settings.

use oxidepm_proto::Tier;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Tier settings.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    /// Tier of class `ai` (default `control`; it can only be lowered).
    #[serde(default)]
    pub ai: Option<Tier>,
    /// Tier per `ai` label (can only be lowered below `control`).
    #[serde(default)]
    pub labels: BTreeMap<String, Tier>,
}

/// What an adapter may do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Its tier (at most `manage`: only a human administers the daemon).
    pub tier: Tier,
    /// App names and `@tags` it may touch.
    #[serde(default)]
    pub apps: Vec<String>,
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

    /// The tier and scope of an adapter (read and nothing without a grant).
    pub fn adapter_grant(&self, name: &str) -> (Tier, Vec<String>) {
        match self.adapters.get(name) {
            Some(g) => (g.tier.min(Tier::Manage), g.apps.clone()),
            None => (Tier::Read, Vec::new()),
        }
    }

    /// The tier of an `ai` actor with `label`.
    pub fn ai_tier(&self, label: &str) -> Tier {
        let base = self.tiers.ai.unwrap_or(Tier::Control).min(Tier::Control);
        match self.tiers.labels.get(label) {
            Some(t) => (*t).min(base),
            None => base,
        }
    }
}
