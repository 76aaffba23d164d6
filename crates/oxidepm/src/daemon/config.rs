//! `daemon.toml`: the daemon's own settings.

use crate::access::gate::{AgentGrant, Grant, Tiers};
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
    /// A connection cap that no client could live with.
    #[error("{}: {key} {reason}", path.display())]
    Connections {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong and what to write instead.
        reason: &'static str,
    },
    /// A `[retention]` or daemon.log setting that would keep things forever
    /// or makes no sense.
    #[error("{}: {key} {reason}", path.display())]
    Retention {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong and what to write instead.
        reason: &'static str,
    },
    /// A restart rate limit that would never restart anything.
    #[error("{}: {key} {reason}", path.display())]
    Restarts {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong and what to write instead.
        reason: &'static str,
    },
    /// `metrics` is neither an address nor an absolute path.
    #[error("{}: metrics {reason}", path.display())]
    Metrics {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to write instead.
        reason: &'static str,
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
    /// Connections open at once on daemon.sock (default 256).
    #[serde(default = "daemon_max_connections")]
    pub daemon_max_connections: usize,
    /// Connections open at once on daemon.sock by one peer (default 32).
    #[serde(default = "thirty_two")]
    pub daemon_max_connections_per_peer: usize,
    /// Of daemon.sock's connections, slots only a person may take (default 4).
    #[serde(default = "four")]
    pub daemon_reserved_connections: usize,
    /// Connections open at once on agent.sock (default 32).
    #[serde(default = "thirty_two")]
    pub agent_max_connections: usize,
    /// Connections open at once on agent.sock by one peer (default 8).
    #[serde(default = "eight")]
    pub agent_max_connections_per_peer: usize,
    /// Permission tiers.
    #[serde(default)]
    pub tiers: Tiers,
    /// Grants of adapters, by adapter app name.
    #[serde(default)]
    pub adapters: BTreeMap<String, Grant>,
    /// Grants of agents beyond themselves, by agent app name.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentGrant>,
    /// Agent lanes.
    #[serde(default)]
    pub lanes: crate::lanes::settings::LanesSettings,
    /// Let a root daemon run agents as root (sharing a uid, so not isolated
    /// from each other or from the daemon).
    #[serde(default)]
    pub agents_share_uid: bool,
    /// daemon.log is rotated before it would grow past this many bytes
    /// (default 10 MiB; 0: never).
    #[serde(default = "ten_mib")]
    pub daemon_log_max_bytes: u64,
    /// Rotated daemon.log files kept (default 3, at most 100).
    #[serde(default = "three")]
    pub daemon_log_keep: u32,
    /// Where the output of apps without their own `log_target` goes:
    /// `"files"` (default), `"journald"` or `"both"`.
    #[serde(default)]
    pub log_target: oxidepm_proto::LogTarget,
    /// How long events and audit rows are kept; how many refusals are written.
    #[serde(default)]
    pub retention: super::retention::RetentionSettings,
    /// Seconds an `ops` request may take before its agent gets an
    /// `E_TIMEOUT` reply (default 30).
    #[serde(default = "thirty")]
    pub ops_timeout_secs: u64,
    /// Largest `ops` reply, in bytes (default 262144); longer lists are
    /// cut, oldest first, and marked `truncated`.
    #[serde(default = "ops_max_reply_bytes")]
    pub ops_max_reply_bytes: usize,
    /// Log bytes each actor may read a second, in MiB (default 64; 0: no
    /// limit). Sockets are slowed down to it; `ops` gets `E_RATE_LIMITED`.
    #[serde(default = "sixty_four")]
    pub logs_read_mib_per_sec: u64,
    /// Start even when state.db cannot be written (every change then
    /// fails with `E_STORAGE` until it can); refused by default.
    #[serde(default)]
    pub allow_read_only_state: bool,
    /// Automatic restarts a second, daemon-wide, in the long run (default
    /// 100): a crash storm cannot take the host's CPU in forks.
    #[serde(default = "hundred")]
    pub restart_rate: u32,
    /// Automatic restarts allowed at once after a quiet spell (default 200).
    #[serde(default = "two_hundred")]
    pub restart_burst: u32,
    /// Serve Prometheus metrics at `/metrics` on this TCP address
    /// (`127.0.0.1:9464`) or unix socket path; off when absent.
    #[serde(default)]
    pub metrics: Option<String>,
}

fn hundred() -> u32 {
    100
}
fn two_hundred() -> u32 {
    200
}

fn ten_mib() -> u64 {
    10 << 20
}
fn three() -> u32 {
    3
}

fn thirty() -> u64 {
    30
}
fn ops_max_reply_bytes() -> usize {
    256 * 1024
}
fn sixty_four() -> u64 {
    64
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
fn daemon_max_connections() -> usize {
    256
}
fn thirty_two() -> usize {
    32
}
fn eight() -> usize {
    8
}
fn four() -> usize {
    4
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
        Config::parse(path, &text)
    }

    /// Parses and checks the text of daemon.toml (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let path_buf = || path.to_path_buf();
        let c: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path_buf(),
            source,
        })?;
        c.check_connections()
            .map_err(|(key, reason)| ConfigError::Connections {
                path: path_buf(),
                key,
                reason,
            })?;
        c.check_restarts()
            .map_err(|(key, reason)| ConfigError::Restarts {
                path: path_buf(),
                key,
                reason,
            })?;
        c.check_retention()
            .map_err(|(key, reason)| ConfigError::Retention {
                path: path_buf(),
                key,
                reason,
            })?;
        c.metrics_listen().map_err(|reason| ConfigError::Metrics {
            path: path_buf(),
            reason,
        })?;
        c.lanes.check().map_err(|source| ConfigError::Lanes {
            path: path_buf(),
            source,
        })?;
        Ok(c)
    }
}

impl Config {
    /// Where to serve `/metrics`, if anywhere.
    pub fn metrics_listen(&self) -> Result<Option<super::metrics::Listen>, &'static str> {
        self.metrics
            .as_deref()
            .map(super::metrics::Listen::parse)
            .transpose()
    }

    /// The daemon-wide restart rate limit.
    pub fn restart_rate(&self) -> crate::supervise::restarts::RateSettings {
        crate::supervise::restarts::RateSettings {
            per_sec: self.restart_rate,
            burst: self.restart_burst,
        }
    }

    /// Checks the restart rate limit: the key at fault and why.
    fn check_restarts(&self) -> Result<(), (&'static str, &'static str)> {
        if self.restart_rate == 0 {
            return Err(("restart_rate", "must be at least 1; 0 would never restart a crashed app (use restart = \"never\" in the app instead)"));
        }
        if self.restart_burst == 0 {
            return Err((
                "restart_burst",
                "must be at least 1; 0 would never restart a crashed app",
            ));
        }
        Ok(())
    }

    /// Checks `[retention]` and the daemon.log keys: the key at fault and why.
    fn check_retention(&self) -> Result<(), (&'static str, &'static str)> {
        if self.daemon_log_keep > 100 {
            return Err(("daemon_log_keep", "must be at most 100"));
        }
        self.retention.check()
    }

    /// Checks the connection caps: the key at fault and why.
    fn check_connections(&self) -> Result<(), (&'static str, &'static str)> {
        for (key, v) in [
            ("daemon_max_connections", self.daemon_max_connections),
            (
                "daemon_max_connections_per_peer",
                self.daemon_max_connections_per_peer,
            ),
            ("agent_max_connections", self.agent_max_connections),
            (
                "agent_max_connections_per_peer",
                self.agent_max_connections_per_peer,
            ),
        ] {
            if v == 0 {
                return Err((key, "must be at least 1; nobody could connect"));
            }
        }
        if self.daemon_reserved_connections >= self.daemon_max_connections {
            return Err((
                "daemon_reserved_connections",
                "must be less than daemon_max_connections, or no app could connect",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod connection_tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path)
    }

    #[test]
    fn connection_caps_have_defaults_and_refuse_what_no_client_could_use() {
        let c = Config::default();
        assert_eq!(
            (c.daemon_max_connections, c.daemon_max_connections_per_peer),
            (256, 32)
        );
        assert_eq!(c.daemon_reserved_connections, 4);
        assert_eq!(
            (c.agent_max_connections, c.agent_max_connections_per_peer),
            (32, 8)
        );
        let e = load("agent_max_connections_per_peer = 0\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("agent_max_connections_per_peer must be at least 1"),
            "{e}"
        );
        let e = load("daemon_max_connections = 4\ndaemon_reserved_connections = 4\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("daemon_reserved_connections must be less"),
            "{e}"
        );
        assert!(load("daemon_max_connections = 5\ndaemon_reserved_connections = 4\n").is_ok());
    }

    #[test]
    fn restart_rate_has_a_default_and_refuses_zero() {
        let c = Config::default();
        assert_eq!((c.restart_rate, c.restart_burst), (100, 200));
        let e = load("restart_rate = 0\n").unwrap_err();
        assert!(
            e.to_string().contains("restart_rate must be at least 1"),
            "{e}"
        );
        let e = load("restart_burst = 0\n").unwrap_err();
        assert!(
            e.to_string().contains("restart_burst must be at least 1"),
            "{e}"
        );
        let c = load("restart_rate = 20\nrestart_burst = 5\n").unwrap();
        assert_eq!((c.restart_rate().per_sec, c.restart_rate().burst), (20, 5));
    }
}
