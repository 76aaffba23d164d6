//! Configuration files of the lanes processes: reading them and saying what
//! is wrong with one. Each file's type owns its checks and their error
//! (`BridgeConfigError`, `ProxyConfigError`); this reader knows none of
//! them.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration file of a lanes process (proxy, bridge) that cannot be
/// used, with what to fix.
#[derive(Debug)]
pub enum ConfigError {
    /// The file cannot be read.
    Read(PathBuf, std::io::Error),
    /// The file is not valid JSON of the expected shape.
    Parse(PathBuf, serde_json::Error),
    /// The values do not fit together: the file's own error, which reads
    /// as it does.
    Invalid(Box<dyn Error + Send + Sync>),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read(path, e) => write!(f, "cannot read {}: {e}", path.display()),
            ConfigError::Parse(path, e) => {
                write!(f, "{} is not a valid configuration: {e}", path.display())
            }
            ConfigError::Invalid(e) => e.fmt(f),
        }
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ConfigError::Read(_, e) => Some(e),
            ConfigError::Parse(_, e) => Some(e),
            // Transparent: the file's error stands for itself.
            ConfigError::Invalid(e) => e.source(),
        }
    }
}

/// Reads a JSON configuration file of type `T`.
pub fn load_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read(path).map_err(|e| ConfigError::Read(path.to_path_buf(), e))?;
    serde_json::from_slice(&text).map_err(|e| ConfigError::Parse(path.to_path_buf(), e))
}
