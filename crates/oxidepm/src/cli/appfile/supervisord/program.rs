//! One `[program:x]` section: its processes as app specs, with
//! supervisord's defaults, and a note for every key without an equivalent.

use super::expand::{self, Var, Vars};
use super::Source;
use crate::cli::appfile::ini::{Entry, Section};
use crate::cli::appfile::resolve::absolutize;
use crate::cli::appfile::{at_line, fields, parse_size, AppFileError, Note};
use oxidepm_proto::{AppSpec, RestartPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One process of a program, ready to be an app.
pub(super) struct Process {
    /// The app.
    pub spec: AppSpec,
    /// Its keys without an exact equivalent.
    pub notes: Vec<Note>,
    /// supervisord's start order: lower first.
    pub priority: i64,
    /// The program's name, the second sort key.
    pub program: String,
    /// The file of the section, for messages about the app as a whole.
    pub file: PathBuf,
    /// The line of the section's header.
    pub line: usize,
}

/// A `[group:x]` section.
pub(super) struct Group {
    /// Its name, which becomes a tag of its programs.
    pub name: String,
}

/// Keys of a program section that are mapped (and so need no note).
const MAPPED: &[&str] = &[
    "command",
    "process_name",
    "numprocs",
    "numprocs_start",
    "priority",
    "autostart",
    "startsecs",
    "startretries",
    "autorestart",
    "exitcodes",
    "stopsignal",
    "stopwaitsecs",
    "stopasgroup",
    "killasgroup",
    "user",
    "directory",
    "environment",
    "redirect_stderr",
    "stdout_logfile",
    "stderr_logfile",
    "stdout_logfile_maxbytes",
    "stderr_logfile_maxbytes",
    "stdout_logfile_backups",
    "stderr_logfile_backups",
];

/// The program each `[group:x]` claims; a program in two groups, or a
/// group naming a program the files do not define, is an error as in
/// supervisord.
pub(super) fn groups(sources: &[Source]) -> Result<BTreeMap<String, Group>, AppFileError> {
    let defined: Vec<&str> = sources
        .iter()
        .flat_map(|s| &s.sections)
        .filter_map(|s| s.name.strip_prefix("program:"))
        .collect();
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for source in sources {
        for section in &source.sections {
            let Some(group) = section.name.strip_prefix("group:") else {
                continue;
            };
            let Some(entry) = section.last("programs") else {
                return Err(at_line(
                    &source.path,
                    section.line,
                    format!("[group:{group}] has no programs = setting; list its programs"),
                ));
            };
            fields::tag(group).map_err(|e| {
                at_line(&source.path, section.line, format!("[group:{group}]: {e}"))
            })?;
            for program in entry
                .value
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
            {
                if !defined.contains(&program) {
                    return Err(at_line(
                        &source.path,
                        entry.line,
                        format!("[group:{group}] names program {program:?}, which no [program:{program}] defines"),
                    ));
                }
                if let Some(other) = out.get(program) {
                    return Err(at_line(
                        &source.path,
                        entry.line,
                        format!(
                            "program {program:?} is in groups {:?} and {group:?}; keep one",
                            other.name
                        ),
                    ));
                }
                out.insert(
                    program.to_string(),
                    Group {
                        name: group.to_string(),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// The values of one section, expanded for one process.
struct Reader<'a> {
    source: &'a Source,
    section: &'a Section,
    program: &'a str,
    vars: Vars<'a>,
}

impl Reader<'_> {
    fn error(&self, entry: &Entry, message: impl std::fmt::Display) -> AppFileError {
        at_line(
            &self.source.path,
            entry.line,
            format!("[program:{}] {}: {message}", self.program, entry.key),
        )
    }

    /// The expanded value of `key`, with its entry.
    fn get(&self, key: &str) -> Result<Option<(&Entry, String)>, AppFileError> {
        let Some(entry) = self.section.last(key) else {
            return Ok(None);
        };
        let value = expand::expand(&entry.value, &self.vars).map_err(|e| self.error(entry, e))?;
        Ok(Some((entry, value)))
    }

    fn number(&self, key: &str, default: u64, max: u64) -> Result<u64, AppFileError> {
        let Some((entry, value)) = self.get(key)? else {
            return Ok(default);
        };
        match value.trim().parse::<u64>() {
            Ok(n) if n <= max => Ok(n),
            Ok(_) => Err(self.error(entry, format!("{value} is too large; the maximum is {max}"))),
            Err(_) => Err(self.error(entry, format!("{value:?} is not a whole number"))),
        }
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool, AppFileError> {
        let Some((entry, value)) = self.get(key)? else {
            return Ok(default);
        };
        boolean(&value).map_err(|e| self.error(entry, e))
    }
}

/// supervisord's booleans.
fn boolean(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!("{value:?} is not a boolean; use true or false")),
    }
}

/// The processes of `[program:<program>]`.
pub(super) fn processes(
    source: &Source,
    section: &Section,
    program: &str,
    group: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Process>, AppFileError> {
    let host = crate::cli::appfile::host_name();
    let reader = |num: u64, numprocs: u64| Reader {
        source,
        section,
        program,
        vars: Vars {
            names: BTreeMap::from([
                ("program_name", Var::Text(program.to_string())),
                (
                    "group_name",
                    Var::Text(group.unwrap_or(program).to_string()),
                ),
                ("process_num", Var::Number(num)),
                ("numprocs", Var::Number(numprocs)),
                ("here", Var::Text(source.here.clone())),
                ("host_node_name", Var::Text(host.clone())),
            ]),
            env,
        },
    };
    let first = reader(0, 1);
    let start = first.number("numprocs_start", 0, 100_000)?;
    let numprocs = first.number("numprocs", 1, 1000)?;
    if let Some(entry) = section.last("numprocs") {
        if numprocs == 0 {
            return Err(first.error(entry, "must be at least 1"));
        }
        let named = section
            .last("process_name")
            .is_some_and(|e| e.value.contains("%(process_num)"));
        if numprocs > 1 && !named {
            return Err(first.error(
                entry,
                "numprocs > 1 needs %(process_num) in process_name, as supervisord does; \
                 add process_name=%(program_name)s_%(process_num)02d",
            ));
        }
    }
    (start..start + numprocs)
        .map(|num| process(&reader(num, numprocs), group))
        .collect()
}

/// One process, with the section's values expanded for it.
fn process(r: &Reader, group: Option<&str>) -> Result<Process, AppFileError> {
    let mut notes = Vec::new();
    let name = process_name(r)?;
    let mut note = |field: &str, message: String| {
        notes.push(Note {
            app: Some(name.clone()),
            field: field.to_string(),
            message,
        })
    };
    let (program, args) = command(r)?;
    let here = std::path::Path::new(&r.source.here);
    let cwd = match r.get("directory")? {
        Some((_, dir)) => absolutize(here, &dir),
        None => {
            note(
                "directory",
                "not set: the app runs in the file's directory (supervisord: its own)".into(),
            );
            here.to_path_buf()
        }
    };
    let program = if program.contains('/') {
        absolutize(&cwd, &program).to_string_lossy().into_owned()
    } else {
        program
    };
    let mut spec = AppSpec::new(name.clone(), program, args);
    spec.cwd = Some(cwd.to_string_lossy().into_owned());
    if let Some(group) = group {
        spec.tags.push(group.to_string());
    }
    if let Some((entry, value)) = r.get("environment")? {
        for (key, val) in expand::environment(&value).map_err(|e| r.error(entry, e))? {
            spec.env.insert(key, val);
        }
    }
    if let Some((entry, user)) = r.get("user")? {
        spec.user = Some(fields::user(user.trim()).map_err(|e| r.error(entry, e))?);
    }
    spec.autostart = r.boolean("autostart", true)?;
    restarting(r, &mut spec, &mut note)?;
    stopping(r, &mut spec, &mut note)?;
    logs(r, &mut spec, &mut note)?;
    note_unmapped(r, &name, &mut notes);
    let priority = r.number("priority", 999, i64::MAX as u64)? as i64;
    Ok(Process {
        spec,
        notes,
        priority,
        program: r.program.to_string(),
        file: r.source.path.clone(),
        line: r.section.line,
    })
}

/// `process_name`, else the program's name: the app's name.
fn process_name(r: &Reader) -> Result<String, AppFileError> {
    match r.get("process_name")? {
        Some((entry, name)) => fields::app_name(&name).map_err(|e| r.error(entry, e)),
        None => fields::app_name(r.program).map_err(|e| {
            at_line(
                &r.source.path,
                r.section.line,
                format!("[program:{}]: {e}", r.program),
            )
        }),
    }
}

/// `command`, split as supervisord splits it: the program and its
/// arguments.
fn command(r: &Reader) -> Result<(String, Vec<String>), AppFileError> {
    let Some((entry, command)) = r.get("command")? else {
        return Err(at_line(
            &r.source.path,
            r.section.line,
            format!(
                "[program:{}] has no command; add command = /path/to/program args",
                r.program
            ),
        ));
    };
    // supervisord splits the command itself, with shell quoting, and runs no shell.
    let words = shell_words::split(&command).map_err(|e| {
        r.error(
            entry,
            format!("cannot split {command:?}: {e}; check its quotes"),
        )
    })?;
    let Some((program, args)) = words.split_first() else {
        return Err(r.error(entry, "is empty; give the program to run"));
    };
    Ok((program.clone(), args.to_vec()))
}

/// `autorestart`, `exitcodes`, `startsecs` and `startretries`.
fn restarting(
    r: &Reader,
    spec: &mut AppSpec,
    note: &mut dyn FnMut(&str, String),
) -> Result<(), AppFileError> {
    let exitcodes = match r.get("exitcodes")? {
        Some((_, codes)) => codes.split(',').map(str::trim).map(String::from).collect(),
        None => vec!["0".to_string()],
    };
    spec.restart = match r.get("autorestart")? {
        None => RestartPolicy::OnFailure,
        Some((entry, value)) => match value.trim().to_ascii_lowercase().as_str() {
            "unexpected" => RestartPolicy::OnFailure,
            v => match boolean(v) {
                Ok(true) => RestartPolicy::Always,
                Ok(false) => RestartPolicy::Never,
                Err(_) => {
                    return Err(
                        r.error(entry, format!("{value:?} is not true, false or unexpected"))
                    )
                }
            },
        },
    };
    if exitcodes != ["0"] {
        note(
            "exitcodes",
            format!(
                "{}: only exit status 0 counts as expected; others are restarted with \
                 autorestart=unexpected",
                exitcodes.join(",")
            ),
        );
    }
    spec.min_uptime_ms = r.number("startsecs", 1, 7 * 24 * 3600)? * 1000;
    spec.max_restarts = r.number("startretries", 3, u32::MAX.into())? as u32;
    Ok(())
}

/// `stopwaitsecs`, `stopsignal`, `stopasgroup` and `killasgroup`.
fn stopping(
    r: &Reader,
    spec: &mut AppSpec,
    note: &mut dyn FnMut(&str, String),
) -> Result<(), AppFileError> {
    spec.kill_timeout_ms = r.number("stopwaitsecs", 10, 7 * 24 * 3600)? * 1000;
    if let Some((entry, signal)) = r.get("stopsignal")? {
        spec.stop_signal = fields::signal(&signal).map_err(|e| r.error(entry, e))?;
    }
    for key in ["stopasgroup", "killasgroup"] {
        if !r.boolean(key, true)? {
            note(
                key,
                "false: oxidepm always signals the app's whole process group".into(),
            );
        }
    }
    Ok(())
}

/// A note for each key of the section without a mapping.
fn note_unmapped(r: &Reader, name: &str, notes: &mut Vec<Note>) {
    for entry in &r.section.entries {
        if MAPPED.contains(&entry.key.as_str()) {
            continue;
        }
        let message = match entry.key.as_str() {
            "umask" => "not applied: apps run with the daemon's umask",
            "serverurl" => "not used: apps reach the daemon through `oxidepm`",
            k if k.ends_with("_capture_maxbytes") || k.ends_with("_events_enabled") => {
                "not used: oxidepm has no supervisord event protocol"
            }
            k if k.ends_with("_syslog") => {
                "not used; set log_target = \"journald\" to send output to the journal"
            }
            _ => "not used by oxidepm (no equivalent)",
        };
        notes.push(Note {
            app: Some(name.to_string()),
            field: entry.key.clone(),
            message: message.into(),
        });
    }
}

/// The log keys: rotation is mapped, locations are noted.
fn logs(
    r: &Reader,
    spec: &mut AppSpec,
    note: &mut dyn FnMut(&str, String),
) -> Result<(), AppFileError> {
    let redirect = r.boolean("redirect_stderr", false)?;
    if redirect {
        note(
            "redirect_stderr",
            "stderr is kept in a log of its own; `oxidepm logs <app>` shows both, merged by time"
                .into(),
        );
    }
    for stream in ["stdout", "stderr"] {
        let key = format!("{stream}_logfile");
        let Some((_, value)) = r.get(&key)? else {
            continue;
        };
        if redirect && stream == "stderr" {
            continue;
        }
        let message = match value.trim() {
            "AUTO" => continue,
            "NONE" => "NONE: the output is still kept, in oxidepm's log files".into(),
            "/dev/stdout" | "/dev/fd/1" | "/dev/stderr" | "/dev/fd/2" => format!(
                "{value}: the output goes to oxidepm's log files; follow it with `oxidepm logs \
                 <app> --follow`, or run `oxidepmd --foreground --attach <file>` to have it on \
                 the daemon's {stream}"
            ),
            _ => format!(
                "{value} is not written: the output is kept in oxidepm's log files under \
                 $OXIDEPM_HOME/logs (`oxidepm logs <app>`)"
            ),
        };
        note(&key, message);
    }
    // oxidepm has one rotation setting for both streams: the larger wins.
    let mut max_bytes: Option<u64> = None;
    let mut backups: Option<u64> = None;
    for stream in ["stdout", "stderr"] {
        let key = format!("{stream}_logfile_maxbytes");
        if let Some((entry, value)) = r.get(&key)? {
            let bytes = parse_size(&value).map_err(|e| r.error(entry, e))?;
            if bytes == 0 {
                note(
                    &key,
                    "0 (never rotate): oxidepm always rotates; the default size is kept".into(),
                );
            } else if bytes < 1024 {
                return Err(r.error(entry, "is below 1KB, the smallest rotation size"));
            } else {
                max_bytes = Some(max_bytes.map_or(bytes, |m| m.max(bytes)));
            }
        }
        let key = format!("{stream}_logfile_backups");
        if let Some((entry, value)) = r.get(&key)? {
            let n = value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n <= u64::from(oxidepm_proto::MAX_LOG_KEEP))
                .ok_or_else(|| {
                    let max = oxidepm_proto::MAX_LOG_KEEP;
                    r.error(entry, format!("{value:?} is not a number up to {max}"))
                })?;
            backups = Some(backups.map_or(n, |b| b.max(n)));
        }
    }
    if let Some(bytes) = max_bytes {
        spec.log_max_bytes = bytes;
    }
    // supervisord keeps 10 backups by default.
    spec.log_keep = backups.unwrap_or(10) as u32;
    Ok(())
}
