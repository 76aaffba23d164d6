//! supervisord configuration files: each `[program:x]` section becomes one
//! app (or `numprocs` of them), with supervisord's own defaults where the
//! file says nothing, so that a program behaves as it did under supervisord.
//!
//! The main file's `[include] files = …` globs are followed (relative to the
//! main file, as supervisord does; an included file's own `[include]` is not,
//! as supervisord does not). Programs are started in supervisord's order:
//! lower `priority` first, then by name; this is the order of the apps in the
//! file (no `depends_on` is made: supervisord does not wait either).

mod expand;
mod program;

use super::ini::{self, Dialect, Section};
use super::{at_line, base_dir, no_apps, AppFileError, Format, Loaded, Note};
use std::path::{Path, PathBuf};

/// Most files `[include]` may bring in.
const MAX_INCLUDED: usize = 256;

/// One file of the configuration and its sections.
struct Source {
    path: PathBuf,
    /// Its absolute directory, `%(here)s`.
    here: String,
    sections: Vec<Section>,
}

/// Loads a supervisord configuration file and the files it includes.
pub(super) fn load(path: &Path) -> Result<Loaded, AppFileError> {
    let env = |name: &str| std::env::var(name).ok();
    load_in(path, &env)
}

/// [`load`], with `%(ENV_X)s` looked up in `env`.
pub(super) fn load_in(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, AppFileError> {
    let main = read(path)?;
    let mut notes = Vec::new();
    let mut sources = vec![];
    let included = includes(&main, env, &mut notes)?;
    sources.push(main);
    for file in included {
        let source = read(&file)?;
        if let Some(section) = source.sections.iter().find(|s| s.name == "include") {
            notes.push(file_note(
                "[include]",
                format!(
                    "in {} (line {}) is not followed: supervisord reads the [include] of the \
                     main file only; list its files there",
                    source.path.display(),
                    section.line
                ),
            ));
        }
        sources.push(source);
    }

    let groups = program::groups(&sources)?;
    let mut programs: Vec<program::Process> = Vec::new();
    let mut seen: Vec<(&str, &Path)> = Vec::new();
    for source in &sources {
        for section in &source.sections {
            let name = section.name.as_str();
            if let Some(program) = name.strip_prefix("program:") {
                if let Some((_, first)) = seen.iter().find(|(n, _)| *n == program) {
                    return Err(at_line(
                        &source.path,
                        section.line,
                        format!(
                            "[program:{program}] is also defined in {}; keep one of them",
                            first.display()
                        ),
                    ));
                }
                seen.push((program, &source.path));
                let group = groups.get(program).map(|g| g.name.as_str());
                programs.extend(program::processes(source, section, program, group, env)?);
            } else {
                other_section(name, &mut notes);
            }
        }
    }
    if programs.is_empty() {
        return Err(no_apps(path, Format::Supervisord));
    }
    let mut names = std::collections::BTreeSet::new();
    for p in &programs {
        if !names.insert(p.spec.name.clone()) {
            return Err(at_line(
                &p.file,
                p.line,
                format!(
                    "process name {:?} is used twice; make process_name unique \
                     (with %(process_num)02d for numprocs)",
                    p.spec.name
                ),
            ));
        }
    }
    // supervisord starts lower priorities first, then by program name.
    programs.sort_by(|a, b| (a.priority, &a.program).cmp(&(b.priority, &b.program)));
    notes.push(file_note(
        "environment",
        "programs get their environment= settings (plus PATH, HOME and USER), not the \
         environment oxidepm runs in as under supervisord; pass a variable on with \
         %(ENV_NAME)s"
            .into(),
    ));
    let mut loaded = Loaded {
        apps: Vec::new(),
        notes,
    };
    for p in programs {
        loaded.notes.extend(p.notes);
        loaded.apps.push(p.spec);
    }
    Ok(loaded)
}

/// Reads and parses one file of the configuration.
fn read(path: &Path) -> Result<Source, AppFileError> {
    let text = super::read::config_text(path)?;
    let sections = ini::parse(&text, Dialect::Supervisord)
        .map_err(|(line, message)| at_line(path, line, message))?;
    let here = base_dir(path)?.to_string_lossy().into_owned();
    Ok(Source {
        path: path.to_path_buf(),
        here,
        sections,
    })
}

/// The files the main file's `[include]` names, in supervisord's order
/// (each glob's matches sorted).
fn includes(
    main: &Source,
    env: &dyn Fn(&str) -> Option<String>,
    notes: &mut Vec<Note>,
) -> Result<Vec<PathBuf>, AppFileError> {
    let Some(section) = main.sections.iter().find(|s| s.name == "include") else {
        return Ok(Vec::new());
    };
    let Some(entry) = section.last("files") else {
        return Err(at_line(
            &main.path,
            section.line,
            "[include] has no files = setting; add one (space-separated globs) or remove [include]",
        ));
    };
    let vars = expand::Vars {
        names: [("here", expand::Var::Text(main.here.clone()))].into(),
        env,
    };
    let files = expand::expand(&entry.value, &vars)
        .map_err(|e| at_line(&main.path, entry.line, format!("[include] files: {e}")))?;
    let mut out = Vec::new();
    for pattern in files.split_whitespace() {
        // supervisord's glob (Python's, not recursive) reads ** as *, one
        // level: so does this one, which also never walks a symlink loop.
        let pattern = super::text::one_level_glob(pattern);
        let full = Path::new(&main.here).join(&pattern);
        let full = full.to_string_lossy();
        let matches = glob::glob(&full).map_err(|e| {
            at_line(
                &main.path,
                entry.line,
                format!("[include] files: {pattern:?} is not a valid glob: {e}"),
            )
        })?;
        // A glob such as /**/* could walk the whole disk: stop past the bound.
        let mut found: Vec<PathBuf> = matches
            .filter_map(Result::ok)
            .take(MAX_INCLUDED + 1)
            .collect();
        found.sort();
        if found.is_empty() {
            notes.push(file_note(
                "[include]",
                format!("no file matches {full:?}; nothing included from it"),
            ));
        }
        let found_len = found.len();
        for file in found {
            if file.is_file() && !out.contains(&file) {
                out.push(file);
            }
        }
        if out.len() > MAX_INCLUDED || found_len > MAX_INCLUDED {
            return Err(at_line(
                &main.path,
                entry.line,
                format!("[include] files names more than {MAX_INCLUDED} files; include fewer"),
            ));
        }
    }
    Ok(out)
}

/// A note on a section that is not a program.
fn other_section(name: &str, notes: &mut Vec<Note>) {
    let message = match name.split_once(':').map_or(name, |(kind, _)| kind) {
        "include" => return,
        "group" => {
            "its programs are tagged with the group's name (select them with @group); \
             the group's priority is not used"
        }
        "supervisord" => {
            "supervisord's own settings are not used; the daemon's are in \
             $OXIDEPM_HOME/daemon.toml (for nodaemon, run `oxidepmd --foreground --attach <file>`)"
        }
        "unix_http_server" | "inet_http_server" | "supervisorctl" | "rpcinterface" => {
            "not used: `oxidepm` talks to the daemon over its own socket"
        }
        "eventlistener" => {
            "not started: oxidepm has no supervisord event protocol (`oxidepm events --follow` \
             streams its events)"
        }
        "fcgi-program" => "not started: oxidepm does not open FastCGI sockets for programs",
        _ => "unknown section; ignored",
    };
    notes.push(file_note(&format!("[{name}]"), message.into()));
}

fn file_note(field: &str, message: String) -> Note {
    Note {
        app: None,
        field: field.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests;
