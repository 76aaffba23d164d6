//! Configuration files of the lanes processes: reading them and saying what
//! is wrong with one.

use crate::bridge_config::BridgeConfigError;
use crate::proxy_config::ProxyConfigError;
use std::path::{Path, PathBuf};

/// A configuration file of a lanes process (proxy, bridge) that cannot be
/// used, with what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {}: {}", .0.display(), .1)]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is not valid JSON of the expected shape.
    #[error("{} is not a valid configuration: {}", .0.display(), .1)]
    Parse(PathBuf, #[source] serde_json::Error),
    /// The bridge's values do not fit together.
    #[error(transparent)]
    Bridge(#[from] BridgeConfigError),
    /// The proxy's values do not fit together.
    #[error(transparent)]
    Proxy(#[from] ProxyConfigError),
}

/// Reads a JSON configuration file of type `T`.
pub fn load_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read(path).map_err(|e| ConfigError::Read(path.to_path_buf(), e))?;
    serde_json::from_slice(&text).map_err(|e| ConfigError::Parse(path.to_path_buf(), e))
}
