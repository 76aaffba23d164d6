//! `[[lanes.consult]]` on the daemon's side: the rules in force
//! (daemon.toml's when the daemon started, replaced by a reload) and
//! whether the bridge routes consulting at all.
//!
//! `consult` is a stream family of every agent (its ACL, its outbox, its
//! environment) exactly when daemon.toml had a rule when the daemon
//! started; the family cannot come or go while agents run, but the rules
//! and bounds can, and a reload hands them to the bridge.

use super::handle::Lanes;
use super::settings::{Backend, LanesSettings};
use oxidepm_lanes::consult::{ConsultConfig, CONSULT};
use oxidepm_proto::ConsultRuleReport;

impl Lanes {
    /// Whether agents have the `consult` family and the bridge routes it.
    pub fn consults(&self) -> bool {
        self.settings.backend == Backend::Redis
            && self.settings.families().iter().any(|f| f == CONSULT)
    }

    /// The rules and bounds in force.
    pub fn consult_config(&self) -> ConsultConfig {
        let live = self
            .state
            .consult
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        live.unwrap_or_else(|| ConsultConfig {
            rules: self.settings.consult.clone(),
            limits: self.settings.consult_limits,
        })
    }

    /// Whether a reload can put `new`'s consult rules in force, or why
    /// they wait for the next start.
    pub fn consult_reloadable(&self, new: &LanesSettings) -> Result<(), &'static str> {
        if self.settings.backend != Backend::Redis || new.backend != Backend::Redis {
            return Err("the lanes are off, or being turned on or off, which takes a daemon start");
        }
        if !self.consults() {
            return Err(
                "consult becomes a stream family of every agent (its ACL, its environment) only \
                 when the daemon starts with a rule; once it is, rules change live",
            );
        }
        Ok(())
    }

    /// Puts `new`'s consult rules and bounds in force; the bridge takes
    /// them up when its configuration is next written (`ensure_bridge`).
    pub fn set_consult(&self, new: &LanesSettings) {
        *self.state.consult.lock().unwrap_or_else(|p| p.into_inner()) = Some(ConsultConfig {
            rules: new.consult.clone(),
            limits: new.consult_limits,
        });
    }

    /// The rules in force, for `route list` and `lanes` (none when agents
    /// have no consult family).
    pub fn consult_report(&self) -> Vec<ConsultRuleReport> {
        if !self.consults() {
            return Vec::new();
        }
        self.consult_config()
            .rules
            .into_iter()
            .map(|r| ConsultRuleReport {
                from: r.from.to_string(),
                to: r.to.to_string(),
            })
            .collect()
    }
}
