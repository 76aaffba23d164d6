//! systemd service units as app files. The app is named after the unit
//! file's stem; the units it pulls in (`Requires=`, `Wants=`, `BindsTo=`,
//! `Requisite=`) are loaded with it when their files are in the same
//! directory, as starting it under systemd would start them, and the order
//! between the units loaded together (`After=`, `Before=`, and the units
//! pulled in) becomes `depends_on`. Units elsewhere, and targets, are noted.

mod syntax;
mod unit;

use super::{AppFileError, Loaded, Note};
use oxidepm_proto::{Dependency, DependencyCondition};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Most units one file may bring in through its dependencies.
const MAX_UNITS: usize = 64;

/// Loads a unit and the units it pulls in from its directory.
pub(super) fn load(path: &Path) -> Result<Loaded, AppFileError> {
    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut queue: VecDeque<PathBuf> = VecDeque::from([path.to_path_buf()]);
    let mut queued: Vec<String> = vec![file_name(path)];
    let mut units = Vec::new();
    let mut notes = Vec::new();
    while let Some(next) = queue.pop_front() {
        let unit = unit::read(&next, &specifiers(&file_name(&next)))?;
        for (pulled, line) in &unit.pulls {
            if queued.contains(pulled) {
                continue;
            }
            let candidate = dir.join(pulled);
            if pulled.ends_with(".service") && !pulled.contains('/') && candidate.is_file() {
                if queued.len() >= MAX_UNITS {
                    return Err(super::at_line(
                        &unit.path,
                        *line,
                        format!("more than {MAX_UNITS} units are pulled in; import fewer at once"),
                    ));
                }
                queued.push(pulled.clone());
                queue.push_back(candidate);
            }
        }
        units.push(unit);
    }

    let stem = |file: &str| file.rsplit_once('.').map_or(file, |(s, _)| s).to_string();
    let loaded: Vec<String> = units.iter().map(|u| u.file_name.clone()).collect();
    let mut before: Vec<(String, String)> = Vec::new();
    for unit in &mut units {
        let name = unit.spec.name.clone();
        let mut note = |field: &str, message: String| {
            unit.notes.push(Note {
                app: Some(name.clone()),
                field: field.to_string(),
                message,
            })
        };
        let mut depends: Vec<String> = Vec::new();
        for (other, _) in unit.pulls.iter().chain(&unit.after) {
            if loaded.contains(other) {
                if !depends.contains(other) && *other != unit.file_name {
                    depends.push(other.clone());
                }
            } else if other.ends_with(".target") {
                note(
                    other,
                    "a systemd target: no equivalent, nothing waits for it".into(),
                );
            } else if unit.pulls.iter().any(|(p, _)| p == other) {
                note(
                    other,
                    "not in this directory: oxidepm does not start it; start it yourself, or \
                     load its unit too"
                        .into(),
                );
            } else {
                note(
                    other,
                    "not loaded with this unit: the order has no effect".into(),
                );
            }
        }
        for (other, _) in &unit.before {
            if loaded.contains(other) {
                before.push((other.clone(), unit.file_name.clone()));
            }
        }
        unit.spec.depends_on = depends
            .iter()
            .map(|d| Dependency {
                app: stem(d),
                condition: DependencyCondition::Started,
            })
            .collect();
    }
    for (later, earlier) in before {
        if let Some(unit) = units.iter_mut().find(|u| u.file_name == later) {
            let app = stem(&earlier);
            if !unit.spec.depends_on.iter().any(|d| d.app == app) {
                unit.spec.depends_on.push(Dependency {
                    app,
                    condition: DependencyCondition::Started,
                });
            }
        }
    }
    let mut out = Loaded::default();
    for unit in units {
        notes.extend(unit.notes);
        out.apps.push(unit.spec);
    }
    out.notes = notes;
    Ok(out)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The specifiers of a unit, for the user running oxidepm (as a user
/// manager would resolve them: `%h` is `$HOME` when set).
fn specifiers(unit: &str) -> syntax::Specifiers {
    let uid = nix::unistd::geteuid();
    let account = nix::unistd::User::from_uid(uid).ok().flatten();
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| h.starts_with('/'))
        .or_else(|| {
            account
                .as_ref()
                .map(|u| u.dir.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "/".into());
    syntax::Specifiers {
        unit: unit.to_string(),
        home,
        user: account.map(|u| u.name).unwrap_or_else(|| uid.to_string()),
        uid: uid.as_raw(),
        runtime: std::env::var("XDG_RUNTIME_DIR")
            .ok()
            .filter(|d| d.starts_with('/'))
            .unwrap_or_else(|| "/run".into()),
        host: crate::cli::appfile::host_name(),
    }
}

#[cfg(test)]
mod tests;
