//! pm2's habits in an app file that have no field of their own in an
//! [`AppSpec`]: `env_<name>` sections chosen with `--env <name>`, log and
//! pid file paths (accepted, with a note saying where oxidepm keeps them),
//! and pm2-logrotate's `max_size` / `retain` given once for the whole file.

use super::fields::{DISABLE_LOGS, ERROR_FILE, LOG_FILE, OUT_FILE, PID_FILE};
use super::{AppFileError, Note};
use oxidepm_proto::AppSpec;
use std::collections::BTreeSet;
use std::path::Path;

/// What one file said that is applied after its apps are read.
#[derive(Debug, Default)]
pub(super) struct FileExtras {
    /// The `<name>` of every `env_<name>` section of the file.
    pub env_sections: BTreeSet<String>,
    /// Fields taken with no exact equivalent.
    pub notes: Vec<Note>,
    /// Top-level `max_size`, in bytes.
    pub max_size: Option<u64>,
    /// Top-level `retain`.
    pub retain: Option<u32>,
    /// Apps that set their own `max_size` / `log_max_size`.
    pub own_max_size: BTreeSet<String>,
    /// Apps that set their own `retain` / `log_files_kept`.
    pub own_retain: BTreeSet<String>,
}

impl FileExtras {
    /// Gives the top-level rotation settings to the apps without their own.
    pub fn apply_rotation(&self, apps: &mut [AppSpec]) {
        for app in apps {
            if let Some(max) = self
                .max_size
                .filter(|_| !self.own_max_size.contains(&app.name))
            {
                app.log_max_bytes = max;
            }
            if let Some(keep) = self.retain.filter(|_| !self.own_retain.contains(&app.name)) {
                app.log_keep = keep;
            }
        }
    }
}

/// The note for a log or pid file path (or `disable_logs`) given to app
/// `app`: what oxidepm does instead, so that a pm2 user knows where to look.
pub(super) fn path_note(slot: &str, field: &str, app: &str, path: &str) -> Note {
    let message = match slot {
        OUT_FILE => format!(
            "{path:?} is not written: the app's standard output goes to \
             $OXIDEPM_HOME/logs/{app}-out.log (read it with `oxidepm logs {app}`)"
        ),
        ERROR_FILE => format!(
            "{path:?} is not written: the app's standard error goes to \
             $OXIDEPM_HOME/logs/{app}-err.log (read it with `oxidepm logs {app} --err`)"
        ),
        LOG_FILE => format!(
            "{path:?} is not written: oxidepm keeps the two streams apart under \
             $OXIDEPM_HOME/logs; `oxidepm logs {app}` shows them merged"
        ),
        PID_FILE => format!("{path:?} is not written: the pid is in `oxidepm status {app} --json`"),
        DISABLE_LOGS => format!(
            "output is still kept, under $OXIDEPM_HOME/logs/{app}-*.log (rotated by \
             log_max_size and log_files_kept)"
        ),
        _ => format!("{path:?} is not used"),
    };
    Note {
        app: Some(app.to_string()),
        field: field.to_string(),
        message,
    }
}

/// `--env <name>` for a file that has no `env_<name>` section in any app:
/// an error, since pm2 users rely on it (a production deploy run with
/// development settings is worse than no start).
pub(super) fn check_env_section(
    path: &Path,
    name: &str,
    sections: &BTreeSet<String>,
) -> Result<(), AppFileError> {
    if sections.contains(name) {
        return Ok(());
    }
    let have = if sections.is_empty() {
        "it has no env_<name> section".to_string()
    } else {
        let list: Vec<String> = sections.iter().map(|s| format!("env_{s}")).collect();
        format!("its sections are {}", list.join(", "))
    };
    Err(AppFileError::new(
        path,
        format!(
            "--env {name}: no app of this file has an \"env_{name}\" section; {have} \
             (use --env KEY=VALUE to set one variable)"
        ),
    ))
}
