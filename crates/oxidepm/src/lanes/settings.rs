//! The `[lanes]` section of daemon.toml.

use serde::Deserialize;

/// Where lanes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One private Redis run by the daemon (the default).
    #[default]
    Redis,
    /// No lanes: agents run without one.
    Off,
}

/// Settings of the lanes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanesSettings {
    /// `redis` or `off`.
    #[serde(default)]
    pub backend: Backend,
    /// Redis `appendfsync`: `everysec` (default), `always` or `no`.
    #[serde(default = "everysec")]
    pub appendfsync: String,
    /// Outside channels each agent has an inbox and an outbox for.
    #[serde(default = "default_sources")]
    pub sources: Vec<String>,
    /// Host services agents ask things of.
    #[serde(default = "default_responders")]
    pub responders: Vec<String>,
    /// Commands per second one agent may send through its socket.
    #[serde(default)]
    pub rate_limit: Option<f64>,
    /// Length cap (`MAXLEN ~`) applied to every XADD of an agent.
    #[serde(default)]
    pub maxlen: Option<u64>,
}

fn everysec() -> String {
    "everysec".into()
}

fn default_sources() -> Vec<String> {
    vec!["webhook".into(), "email".into()]
}

fn default_responders() -> Vec<String> {
    vec!["ops".into()]
}

impl Default for LanesSettings {
    fn default() -> LanesSettings {
        toml::from_str("").expect("defaults parse")
    }
}

impl LanesSettings {
    /// Sources and responders: every stream family an agent has.
    pub fn families(&self) -> Vec<String> {
        let mut v = self.sources.clone();
        v.extend(self.responders.iter().cloned());
        v
    }

    /// Checks the names and values.
    pub fn check(&self) -> Result<(), String> {
        if !matches!(self.appendfsync.as_str(), "everysec" | "always" | "no") {
            return Err(format!(
                "lanes.appendfsync = {:?}: use everysec, always or no",
                self.appendfsync
            ));
        }
        for s in self.families() {
            let ok = !s.is_empty()
                && s.len() <= 32
                && s.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !ok {
                return Err(format!(
                    "lanes source or responder {s:?}: use 1 to 32 of a-z, 0-9, '_' and '-'"
                ));
            }
        }
        Ok(())
    }
}
