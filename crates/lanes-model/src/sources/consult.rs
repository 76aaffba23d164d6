//! The consult source's section of the bridge's file: the
//! [`ConsultConfig`] of [`crate::consult`] (daemon.toml's
//! `[[lanes.consult]]` rules and `[lanes.consult_limits]`), present
//! exactly when `consult` is a source.

use super::section::{Presence, Section};
use crate::consult::{ConsultConfig, LimitError, CONSULT};

impl Section for ConsultConfig {
    const SOURCE: &'static str = CONSULT;
    const PRESENCE: Presence = Presence::Together;
    type Error = ConsultConfigError;

    fn check(&self, _sources: &[String]) -> Result<(), ConsultConfigError> {
        self.limits.check().map_err(ConsultConfigError::Limits)
    }
}

/// Why the bridge's `consult` section cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConsultConfigError {
    /// A bound of `consult.limits` cannot be met.
    #[error("consult.limits.{0}")]
    Limits(#[source] LimitError),
}
