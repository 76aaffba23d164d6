//! `start <file>` with pm2's options: `--env <name>` applies the apps'
//! `env_<name>` sections, `--env KEY=VALUE` sets a variable in every app of
//! the file (over the file's own), `--only a,b` keeps those apps.

use super::appfile::{self, LoadOptions};
use super::args::StartArgs;
use super::{Error, LocalError};
use oxidepm_proto::AppSpec;
use std::path::Path;

/// The apps of config file `path` as `start` defines them; the file's notes
/// are printed as warnings.
pub(super) fn apps(a: &StartArgs, path: &Path) -> Result<Vec<AppSpec>, Error> {
    let mut section: Option<String> = None;
    let mut vars = Vec::new();
    for arg in &a.env {
        match arg.split_once('=') {
            Some((key, value)) => vars.push((key.to_string(), value.to_string())),
            None => {
                if let Some(first) = section.replace(arg.clone()) {
                    return Err(LocalError::EnvNames {
                        first,
                        second: arg.clone(),
                    }
                    .into());
                }
            }
        }
    }
    let options = LoadOptions {
        env: section,
        only: a.only.clone(),
    };
    let loaded = appfile::load_with(path, &options).map_err(LocalError::from)?;
    // The home's own path, so that a pm2 user can `tail -f` what is named.
    let logs = crate::paths::Home::from_env().logs_dir();
    for note in &loaded.notes {
        let note = note
            .to_string()
            .replace("$OXIDEPM_HOME/logs", &logs.display().to_string());
        errln!("oxidepm: warning: {note}");
    }
    let mut apps = loaded.apps;
    for app in &mut apps {
        for (key, value) in &vars {
            app.env.insert(key.clone(), value.clone());
        }
    }
    Ok(apps)
}

/// `--only` names apps of a config file: without one it would be ignored.
pub(super) fn only_with_a_file(a: &StartArgs) -> Result<(), Error> {
    if a.only.is_empty() {
        return Ok(());
    }
    let is_file = a.command.is_empty()
        && a.target.as_deref().is_some_and(|t| {
            let path = Path::new(t);
            path.is_file() && appfile::Format::from_path(path).is_some()
        });
    if is_file {
        Ok(())
    } else {
        Err(LocalError::OnlyWithoutFile {
            only: a.only.join(","),
        }
        .into())
    }
}
