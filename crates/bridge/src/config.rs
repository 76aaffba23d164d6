//! The bridge's configuration file (JSON), written by the daemon with the
//! same types: see [`oxidepm_lanes::bridge_config`] for its keys.

pub use oxidepm_lanes::bridge_config::*;
pub use oxidepm_lanes::ConfigError;
