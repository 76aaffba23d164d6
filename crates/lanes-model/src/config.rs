//! Configuration files of the lanes processes: reading them and saying what
//! is wrong with one.

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
    /// The values do not fit together.
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            ConfigError::Parse(p, e) => {
                write!(f, "{} is not a valid configuration: {e}", p.display())
            }
            ConfigError::Invalid(m) => f.write_str(m),
        }
    }
}

/// Reads a JSON configuration file of type `T`.
pub fn load_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read(path).map_err(|e| ConfigError::Read(path.to_path_buf(), e))?;
    serde_json::from_slice(&text).map_err(|e| ConfigError::Parse(path.to_path_buf(), e))
}

impl std::error::Error for ConfigError {}
