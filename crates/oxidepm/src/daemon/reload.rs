//! `reload-daemon-config` and SIGHUP: daemon.toml read again while every
//! app runs on. What the running daemon can take on is applied at once;
//! every other changed key is named with why it waits for the next start.
//! A file that does not load changes nothing.

use super::config::{Config, ConfigError};
use super::retention::RetentionSettings;
use super::Daemon;
use crate::access::Gate;
use crate::store::NewAudit;
use oxidepm_proto::{Actor, ConfigReloaded, NotApplied};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// daemon.toml's keys, flattened to dotted paths (`lanes.enabled`).
pub type Keys = BTreeMap<String, toml::Value>;

/// The part of daemon.toml in force.
pub struct Live {
    /// The keys as last applied; a key that waits for the next start keeps
    /// the value the daemon started with, so it is named at every reload.
    keys: Keys,
    /// `[retention]`, read by the housekeeping timer at each pass.
    pub retention: RetentionSettings,
}

impl Live {
    /// What the daemon started with.
    pub fn new(keys: Keys, config: &Config) -> Live {
        Live {
            keys,
            retention: config.retention.clone(),
        }
    }
}

/// The top-level keys the running daemon applies when they change.
const LIVE: &[&str] = &[
    "tiers",
    "adapters",
    "agents",
    "retention",
    "logs_read_mib_per_sec",
    "restart_rate",
    "restart_burst",
];

/// Why a top-level key waits for the next start.
fn why_not(top: &str) -> &'static str {
    match top {
        "agent_socket"
        | "agent_idle_timeout_secs"
        | "daemon_max_connections"
        | "daemon_max_connections_per_peer"
        | "daemon_reserved_connections"
        | "agent_max_connections"
        | "agent_max_connections_per_peer" => {
            "the sockets are bound and capped when the daemon starts"
        }
        "lanes" => "the lanes (Redis, the proxies, the bridge) are set up when the daemon starts",
        "metrics" => "the metrics server is bound when the daemon starts",
        "log_level" | "daemon_log_max_bytes" | "daemon_log_keep" => {
            "the daemon's own log is set up when it starts"
        }
        "ops_timeout_secs" | "ops_max_reply_bytes" => "the ops lane workers are started with it",
        "allow_read_only_state" => "state.db is opened when the daemon starts",
        "log_target" | "agents_share_uid" => {
            "the supervisor is set up with it when the daemon starts"
        }
        _ => "it is read only when the daemon starts",
    }
}

/// Reads daemon.toml: the configuration and its keys as written (an
/// absent file is the default configuration, with no keys).
pub fn read(path: &Path) -> Result<(Config, Keys), ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Config::default(), Keys::new()))
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let config = Config::parse(path, &text)?;
    let table: toml::Table = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let mut keys = Keys::new();
    flatten("", table, &mut keys);
    Ok((config, keys))
}

fn flatten(prefix: &str, table: toml::Table, out: &mut Keys) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) if !t.is_empty() => flatten(&key, t, out),
            v => {
                out.insert(key, v);
            }
        }
    }
}

/// The keys whose value differs (added, removed or changed), in order.
fn changed(old: &Keys, new: &Keys) -> Vec<String> {
    let mut keys: Vec<String> = old
        .iter()
        .filter(|(k, v)| new.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .chain(new.keys().filter(|k| !old.contains_key(*k)).cloned())
        .collect();
    keys.sort();
    keys
}

fn top(key: &str) -> &str {
    key.split('.').next().unwrap_or(key)
}

/// Whether a key is one of the consult rules and bounds, which the lanes
/// may take live (`Lanes::consult_reloadable`).
fn is_consult_key(key: &str) -> bool {
    key == "lanes.consult"
        || key == "lanes.consult_limits"
        || key.starts_with("lanes.consult_limits.")
}

impl Daemon {
    /// Reads daemon.toml again and applies what can change live. A file
    /// that does not load leaves everything as it was.
    pub fn reload_config(&self) -> Result<ConfigReloaded, ConfigError> {
        let path = self.home.config();
        let (config, keys) = read(&path)?;
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut applied = Vec::new();
        let mut not_applied = Vec::new();
        let consult = self.lanes.consult_reloadable(&config.lanes);
        let is_live = |k: &str| LIVE.contains(&top(k)) || (consult.is_ok() && is_consult_key(k));
        for key in changed(&live.keys, &keys) {
            if is_live(&key) {
                applied.push(key);
            } else if let (true, Err(why)) = (is_consult_key(&key), consult) {
                let reason =
                    format!("{key} changed: takes effect at the next daemon start ({why})");
                not_applied.push(NotApplied { key, reason });
            } else {
                let reason = format!(
                    "{key} changed: takes effect at the next daemon start ({})",
                    why_not(top(&key))
                );
                not_applied.push(NotApplied { key, reason });
            }
        }
        // The rest that can be applied is, changed or not: each step only
        // replaces a value. The gate is made of the grants alone: replaced when they changed,
        // and then open subscriptions, scoped by the old grants, end (a new
        // one is scoped by the grants in force).
        if applied
            .iter()
            .any(|k| matches!(top(k), "tiers" | "adapters" | "agents"))
        {
            let gate = Gate::new(
                config.tiers.clone(),
                config.adapters.clone(),
                config.agents.clone(),
            );
            let old = std::mem::replace(
                &mut *self.gate.write().unwrap_or_else(|p| p.into_inner()),
                Arc::new(gate),
            );
            old.retire();
        }
        live.retention = config.retention.clone();
        self.refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_limits(config.retention.refusal_limits());
        self.refusals_due.notify_one();
        self.log_reads.set_mib_per_sec(config.logs_read_mib_per_sec);
        self.restart_rate.send_replace(config.restart_rate());
        if applied.iter().any(|k| is_consult_key(k)) {
            self.lanes.set_consult(&config.lanes);
            self.rewrite_bridge();
        } else if crate::lanes::source_secret::given_served(&self.lanes.settings) {
            // A secret the person writes (the bot token) may be new (one
            // Discord refused, put right in secrets/): the bridge is handed
            // it, and its reload takes it up and starts the source again
            // if it had stopped.
            self.rewrite_bridge();
        }
        // Keys that wait keep their old value, so the next reload names
        // them again until the daemon restarts.
        let mut kept: Keys = keys.into_iter().filter(|(k, _)| is_live(k)).collect();
        kept.extend(
            live.keys
                .iter()
                .filter(|(k, _)| !is_live(k))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        live.keys = kept;
        let reloaded = ConfigReloaded {
            path: path.display().to_string(),
            applied,
            not_applied,
        };
        log::info!("daemon.toml reloaded: {}", summary(&reloaded));
        Ok(reloaded)
    }

    /// Writes the bridge's configuration (and its copy of the bot token)
    /// again and has it reload, on a task of its own (a reload answers
    /// without waiting for the bridge).
    fn rewrite_bridge(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            log::warn!(
                "lanes: the bridge takes up the new consult rules or token at its next start"
            );
            return;
        };
        let (lanes, sup) = (self.lanes.clone(), self.sup.clone());
        rt.spawn(async move {
            let agents = lanes.agents(&sup);
            if agents.is_empty() {
                // No lanes run yet: the first agent's brings the bridge up
                // with the rules in force.
                return;
            }
            match lanes.ensure_bridge(&sup, &agents).await {
                Ok(()) => log::info!(
                    "lanes: the bridge was given its configuration again (consult rules, bot token)"
                ),
                Err(e) => log::error!("lanes: cannot give the bridge its configuration again: {e}"),
            }
        });
    }

    /// SIGHUP: the same reload, audited as asked by the signal.
    pub fn reload_on_signal(&self) {
        let actor = Actor::system("SIGHUP");
        let (outcome, message) = match self.reload_config() {
            Ok(r) => ("ok".to_string(), summary(&r)),
            Err(e) => {
                log::error!("SIGHUP: {e}; the daemon keeps the configuration it had");
                ("E_BAD_REQUEST".to_string(), e.to_string())
            }
        };
        let s = crate::supervise::lock(&self.sup);
        let row = NewAudit {
            actor: &actor,
            socket: "signal",
            op: "reload-daemon-config",
            apps: &[],
            outcome: &outcome,
            message: &message,
            via: None,
        };
        if let Err(e) = s.store.record_audit(&row) {
            log::error!("cannot write the audit row of a SIGHUP reload: {e}");
        }
    }

    /// `[retention]` in force.
    pub fn retention_settings(&self) -> RetentionSettings {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retention
            .clone()
    }
}

/// One line: what was applied and what waits.
pub fn summary(r: &ConfigReloaded) -> String {
    let applied = if r.applied.is_empty() {
        "nothing changed that applies live".to_string()
    } else {
        format!("applied {}", r.applied.join(", "))
    };
    if r.not_applied.is_empty() {
        applied
    } else {
        let waits: Vec<&str> = r.not_applied.iter().map(|n| n.key.as_str()).collect();
        format!("{applied}; at the next start: {}", waits.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Keys {
        let mut k = Keys::new();
        flatten("", toml::from_str(text).unwrap(), &mut k);
        k
    }

    #[test]
    fn changed_keys_are_named_dotted_whether_added_removed_or_changed() {
        let old = keys("restart_rate = 5\n[lanes]\nenabled = true\n[tiers]\nai = \"read\"\n");
        let new = keys(
            "[lanes]\nenabled = false\n[tiers]\nai = \"read\"\n[retention]\naudit_max_rows = 9\n",
        );
        assert_eq!(
            changed(&old, &new),
            ["lanes.enabled", "restart_rate", "retention.audit_max_rows"]
        );
        assert!(changed(&new, &new).is_empty());
    }
}
