//! `Environment=` and `EnvironmentFile=` of a unit: the values copied into
//! the app, the files read now (systemd reads them at each start).

use super::syntax;
use super::Reader;
use crate::cli::appfile::ini::{Entry, Section};
use crate::cli::appfile::{at_line, text, AppFileError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most files one `EnvironmentFile=` pattern may match.
const MAX_ENV_FILES: usize = 64;

impl Reader<'_> {
    /// The app's environment: `Environment=`, then the files, which
    /// override it (later files earlier ones), as in systemd.
    pub(super) fn environment(
        &mut self,
        s: &Section,
    ) -> Result<BTreeMap<String, String>, AppFileError> {
        let mut env = BTreeMap::new();
        for entry in self.list(s, "Environment") {
            let value = self.value(entry)?;
            for word in syntax::words(&value).map_err(|e| self.error(entry, e))? {
                let Some((key, val)) = word.split_once('=') else {
                    return Err(self.error(entry, format!("{word:?} is not KEY=value")));
                };
                text::check_env_key(key).map_err(|e| self.error(entry, e))?;
                env.insert(key.to_string(), val.to_string());
            }
        }
        for entry in self.list(s, "EnvironmentFile") {
            self.environment_file(entry, &mut env)?;
        }
        Ok(env)
    }

    /// One `EnvironmentFile=`: a path or a pattern, `-` for optional.
    fn environment_file(
        &mut self,
        entry: &Entry,
        env: &mut BTreeMap<String, String>,
    ) -> Result<(), AppFileError> {
        let value = self.value(entry)?;
        let (optional, file) = match value.strip_prefix('-') {
            Some(rest) => (true, rest.trim()),
            None => (false, value.as_str()),
        };
        if !file.starts_with('/') {
            return Err(self.error(
                entry,
                format!("{file:?} is not an absolute path; systemd requires one"),
            ));
        }
        let mut files: Vec<PathBuf> = if file.contains(['*', '?', '[']) {
            let pattern = crate::cli::appfile::text::one_level_glob(file);
            let paths = glob::glob(&pattern)
                .map_err(|e| self.error(entry, format!("{file:?} is not a valid pattern: {e}")))?;
            let found: Vec<PathBuf> = paths
                .filter_map(Result::ok)
                .take(MAX_ENV_FILES + 1)
                .collect();
            if found.len() > MAX_ENV_FILES {
                return Err(self.error(
                    entry,
                    format!("{file:?} matches more than {MAX_ENV_FILES} files; name fewer"),
                ));
            }
            found
        } else {
            vec![PathBuf::from(file)]
        };
        files.sort();
        let present: Vec<PathBuf> = files.iter().filter(|f| f.is_file()).cloned().collect();
        if present.len() < files.len() || files.is_empty() {
            if !optional {
                return Err(self.error(
                    entry,
                    format!(
                        "{file} does not exist; create it, or write -{file} to make it optional"
                    ),
                ));
            }
            self.note(
                "EnvironmentFile",
                format!("-{file} does not exist: skipped, as systemd does"),
            );
        }
        for f in present {
            env.extend(env_file(&f)?);
            self.note(
                "EnvironmentFile",
                format!(
                    "{}: its values are copied into the app now (systemd reads it at each \
                     start); start the unit again after changing it",
                    f.display()
                ),
            );
        }
        Ok(())
    }
}

/// Reads an `EnvironmentFile=`: oxidepm's env file format, with systemd's
/// `;` comment lines as well.
fn env_file(path: &Path) -> Result<BTreeMap<String, String>, AppFileError> {
    let content = crate::cli::appfile::read::config_text(path)?;
    // Blanked rather than removed, so that line numbers stay right.
    let content: String = content
        .lines()
        .map(|l| {
            if l.trim_start().starts_with(';') {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    text::parse_env(&content).map_err(|(line, message)| at_line(path, line, message))
}
