//! `oxidepm import <file>`: a file of any supported kind printed as the
//! equivalent oxidepm TOML. Nothing is sent to the daemon.

use super::appfile::{self, to_toml, LoadOptions};
use super::{Error, LocalError};
use oxidepm_proto::Imported;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The file: supervisord *.conf/*.ini, systemd *.service,
    /// ecosystem.config.js, *.toml, *.yaml or *.json.
    pub file: PathBuf,
    /// Apply the file's `env_<name>` sections (pm2's `--env production`).
    #[arg(long)]
    pub env: Option<String>,
    /// Only these apps of the file (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// Loads the file as `start` would and prints it as TOML on stdout (as
/// JSON with `--json`: what container mode reads).
pub fn run(a: &ImportArgs, json: bool) -> Result<(), Error> {
    let options = LoadOptions {
        env: a.env.clone(),
        only: a.only.clone(),
    };
    let loaded = appfile::load_with(&a.file, &options).map_err(LocalError::from)?;
    let text = if json {
        let imported = Imported {
            notes: loaded.notes.iter().map(ToString::to_string).collect(),
            apps: loaded.apps,
        };
        serde_json::to_string(&imported).unwrap_or_default() + "\n"
    } else {
        to_toml::render(&loaded, &a.file)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `import x | head` closes the pipe early; that is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(crate::client::ClientError::Io(e).into())
        }
        _ => Ok(()),
    }
}
