//! One systemd unit file as an app: `[Service]` mapped with systemd's own
//! defaults, `[Unit]` dependencies kept for the caller, a note for every
//! key without an equivalent.

use super::syntax::{self, Specifiers};
use crate::cli::appfile::ini::{self, Dialect, Entry, Section};
use crate::cli::appfile::{at_line, fields, AppFileError, Note};
use oxidepm_proto::{AppSpec, RestartPolicy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod environment;

/// A unit, read.
pub(super) struct Unit {
    /// The unit's file name (`web.service`).
    pub file_name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// The app it makes (`depends_on` is filled in by the caller).
    pub spec: AppSpec,
    /// Its keys without an exact equivalent.
    pub notes: Vec<Note>,
    /// Units this one pulls in (`Requires=`, `Wants=`, `BindsTo=`, `Requisite=`).
    pub pulls: Vec<(String, usize)>,
    /// Units this one is ordered after (`After=`).
    pub after: Vec<(String, usize)>,
    /// Units this one is ordered before (`Before=`).
    pub before: Vec<(String, usize)>,
}

/// Keys with a mapping (or a note made where they are read).
const MAPPED: &[&str] = &[
    "Type",
    "ExecStart",
    "WorkingDirectory",
    "User",
    "Environment",
    "EnvironmentFile",
    "Restart",
    "RestartSec",
    "TimeoutStopSec",
    "TimeoutSec",
    "KillSignal",
    "KillMode",
    "MemoryMax",
    "MemoryLimit",
];

/// The keys of `[Unit]` read as dependencies.
const DEPENDENCY_KEYS: &[&str] = &[
    "Requires",
    "Wants",
    "BindsTo",
    "Requisite",
    "After",
    "Before",
];

/// Reads the unit at `path`.
pub(super) fn read(path: &Path, specifiers: &Specifiers) -> Result<Unit, AppFileError> {
    let text = crate::cli::appfile::read::config_text(path)?;
    let sections = ini::parse(&text, Dialect::Systemd)
        .map_err(|(line, message)| at_line(path, line, message))?;
    let file_name = specifiers.unit.clone();
    let stem = file_name.rsplit_once('.').map_or(&*file_name, |(s, _)| s);
    if stem.ends_with('@') {
        return Err(AppFileError::new(
            path,
            format!(
                "{file_name} is a template; start an instance of it: copy it to \
                 {stem}<instance>.service (%i is the instance)"
            ),
        ));
    }
    let name = fields::app_name(stem).map_err(|e| {
        AppFileError::new(
            path,
            format!("the unit's name makes the app's name: {e}; rename the file"),
        )
    })?;
    let empty = Section {
        name: "Service".into(),
        line: 1,
        entries: Vec::new(),
    };
    let service = sections
        .iter()
        .find(|s| s.name == "Service")
        .unwrap_or(&empty);
    let mut reader = Reader {
        path,
        name: &name,
        specifiers,
        notes: Vec::new(),
    };
    let spec = reader.service(service)?;
    let mut unit = Unit {
        file_name,
        path: path.to_path_buf(),
        spec,
        notes: Vec::new(),
        pulls: Vec::new(),
        after: Vec::new(),
        before: Vec::new(),
    };
    for section in &sections {
        match section.name.as_str() {
            "Service" => {}
            "Unit" => reader.unit_section(section, &mut unit)?,
            "Install" => {
                for e in &section.entries {
                    reader.note(
                        &format!("[Install] {}", e.key),
                        "to start apps at boot, install the daemon's unit with `oxidepm startup \
                         --write` and set resurrect = true in daemon.toml",
                    );
                }
            }
            other => reader.note(&format!("[{other}]"), "section not used by oxidepm"),
        }
    }
    unit.notes = reader.notes;
    Ok(unit)
}

/// Reads values of one unit, collecting its notes.
struct Reader<'a> {
    path: &'a Path,
    name: &'a str,
    specifiers: &'a Specifiers,
    notes: Vec<Note>,
}

impl Reader<'_> {
    fn error(&self, entry: &Entry, message: impl std::fmt::Display) -> AppFileError {
        at_line(self.path, entry.line, format!("{}: {message}", entry.key))
    }

    fn note(&mut self, field: &str, message: impl Into<String>) {
        self.notes.push(Note {
            app: Some(self.name.to_string()),
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// The value of an entry with its specifiers replaced (only settings
    /// that take specifiers in systemd are read through this).
    fn value(&self, entry: &Entry) -> Result<String, AppFileError> {
        self.specifiers
            .apply(&entry.value)
            .map_err(|e| self.error(entry, e))
    }

    /// Every entry of a list-valued key in order; an empty assignment
    /// clears what came before, as in systemd.
    fn list<'s>(&self, section: &'s Section, key: &str) -> Vec<&'s Entry> {
        let mut out = Vec::new();
        for e in section.entries.iter().filter(|e| e.key == key) {
            if e.value.is_empty() {
                out.clear();
            } else {
                out.push(e);
            }
        }
        out
    }

    fn service(&mut self, s: &Section) -> Result<AppSpec, AppFileError> {
        let kind = s.last("Type").map(|e| e.value.as_str()).unwrap_or("simple");
        let exec = self.exec_line(s, kind)?;
        let env = self.environment(s)?;
        // Without its own user the app would run as the daemon's: refused
        // rather than noted, as the +/! prefixes are.
        if let Some(entry) = s.last("DynamicUser") {
            if matches!(entry.value.as_str(), "yes" | "true" | "on" | "1") {
                return Err(self.error(
                    entry,
                    "yes has no equivalent, and the app would run as the daemon's user; \
                     create a user for it and set User= instead",
                ));
            }
        }
        let (program, args) = self.exec_start(exec, &env)?;
        let mut spec = AppSpec::new(self.name.to_string(), program, args);
        spec.cwd = Some(self.working_directory(s)?);
        spec.env = env;
        if let Some(entry) = s.last("User") {
            let user = self.value(entry)?;
            spec.user = Some(fields::user(&user).map_err(|e| self.error(entry, e))?);
        }
        spec.restart = self.restart(s, kind)?;
        self.stopping(s, &mut spec)?;
        self.memory_limit(s, &mut spec)?;
        self.note_unmapped(s);
        Ok(spec)
    }

    /// The one `ExecStart=` line, of a `Type=` oxidepm can supervise.
    fn exec_line<'s>(&mut self, s: &'s Section, kind: &str) -> Result<&'s Entry, AppFileError> {
        let starts = self.list(s, "ExecStart");
        let Some(&exec) = starts.first() else {
            return Err(AppFileError::new(
                self.path,
                "no ExecStart= in [Service]; add the command to run",
            ));
        };
        match kind {
            "simple" | "exec" => {}
            "notify" | "notify-reload" | "dbus" | "idle" => self.note(
                "Type",
                format!("{kind}: the app counts as started once spawned (no readiness signal)"),
            ),
            "oneshot" => self.note(
                "Type",
                "oneshot: the program runs once (restart = never unless Restart= says otherwise)",
            ),
            "forking" => {
                let entry = s.last("Type").unwrap_or(exec);
                return Err(self.error(
                    entry,
                    "forking: the program puts itself in the background, and oxidepm supervises \
                     programs that stay in the foreground; run it with its foreground option \
                     (often -f, --foreground or --nodaemon) and set Type=simple",
                ));
            }
            other => {
                let entry = s.last("Type").unwrap_or(exec);
                return Err(
                    self.error(entry, format!("unknown type {other:?}; use simple or exec"))
                );
            }
        }
        if starts.len() > 1 {
            return Err(self.error(
                starts[1],
                "several ExecStart= lines run one after another in systemd; oxidepm runs one \
                 program per app: put the commands in a script",
            ));
        }
        Ok(exec)
    }

    /// `RestartSec=`, `TimeoutSec=`/`TimeoutStopSec=`, `KillSignal=` and
    /// `KillMode=`, over systemd's defaults.
    fn stopping(&mut self, s: &Section, spec: &mut AppSpec) -> Result<(), AppFileError> {
        // systemd's defaults: 100 ms before a restart, 90 s to stop.
        spec.restart_delay_ms = 100;
        spec.kill_timeout_ms = 90_000;
        if let Some(entry) = s.last("RestartSec") {
            spec.restart_delay_ms = self.span(entry)?.unwrap_or(0);
        }
        for key in ["TimeoutSec", "TimeoutStopSec"] {
            if let Some(entry) = s.last(key) {
                spec.kill_timeout_ms = match self.span(entry)? {
                    Some(ms) => ms,
                    None => {
                        self.note(key, "infinity: oxidepm waits at most a week before SIGKILL");
                        7 * 24 * 3600 * 1000
                    }
                };
            }
        }
        if let Some(entry) = s.last("KillSignal") {
            spec.stop_signal = fields::signal(&entry.value).map_err(|e| self.error(entry, e))?;
        }
        if let Some(entry) = s.last("KillMode") {
            match entry.value.as_str() {
                "control-group" => {}
                mode => self.note(
                    "KillMode",
                    format!("{mode}: oxidepm sends the stop signal to every process of the app"),
                ),
            }
        }
        Ok(())
    }

    /// `MemoryMax=` (or the older `MemoryLimit=`): a restart above it.
    fn memory_limit(&mut self, s: &Section, spec: &mut AppSpec) -> Result<(), AppFileError> {
        for key in ["MemoryMax", "MemoryLimit"] {
            if let Some(entry) = s.last(key) {
                spec.max_memory_bytes =
                    syntax::memory(&entry.value).map_err(|e| self.error(entry, e))?;
                if let Some(bytes) = spec.max_memory_bytes {
                    if bytes < 1 << 20 {
                        return Err(
                            self.error(entry, "is below 1M, which would restart the app forever")
                        );
                    }
                    self.note(
                        key,
                        "the app is restarted when it uses more, rather than killed by the kernel",
                    );
                }
            }
        }
        Ok(())
    }

    /// A note for each key of `[Service]` without a mapping.
    fn note_unmapped(&mut self, s: &Section) {
        for entry in &s.entries {
            if !MAPPED.contains(&entry.key.as_str()) {
                let message = match entry.key.as_str() {
                    "ExecStartPre" | "ExecStartPost" | "ExecReload" | "ExecStop"
                    | "ExecStopPost" | "ExecCondition" => "not run: oxidepm runs ExecStart only",
                    "Group" | "SupplementaryGroups" => "the app runs with the groups of User=",
                    "StandardOutput" | "StandardError" => {
                        "output is kept in oxidepm's log files (`oxidepm logs <app>`); set \
                         log_target = \"journald\" to send it to the journal"
                    }
                    "PIDFile" => "oxidepm tracks the app's processes itself",
                    "StartLimitBurst" | "StartLimitIntervalSec" => {
                        "oxidepm gives up after max_restarts unstable restarts in a row"
                    }
                    _ => "not used by oxidepm (no equivalent)",
                };
                self.note(&entry.key, message);
            }
        }
    }

    fn span(&self, entry: &Entry) -> Result<Option<u64>, AppFileError> {
        let ms = syntax::timespan_ms(&entry.value).map_err(|e| self.error(entry, e))?;
        if ms.is_some_and(|ms| ms > 7 * 24 * 3600 * 1000) {
            return Err(self.error(entry, "is longer than a week, the longest oxidepm takes"));
        }
        Ok(ms)
    }

    /// `ExecStart=`: prefixes, words, then variables.
    fn exec_start(
        &mut self,
        entry: &Entry,
        env: &BTreeMap<String, String>,
    ) -> Result<(String, Vec<String>), AppFileError> {
        let value = self.value(entry)?;
        let mut line = value.trim_start();
        let (mut ignore_failure, mut argv0, mut no_expand) = (false, false, false);
        loop {
            match line.chars().next() {
                Some('-') => ignore_failure = true,
                Some('@') => argv0 = true,
                Some(':') => no_expand = true,
                Some(p @ ('+' | '!' | '|')) => {
                    return Err(self.error(
                        entry,
                        format!(
                            "the {p} prefix (privileges or a shell) has no equivalent; remove it: \
                             the app runs as User=, or as the daemon's user"
                        ),
                    ))
                }
                _ => break,
            }
            line = &line[1..];
        }
        let mut words = syntax::words(line).map_err(|e| self.error(entry, e))?;
        if words.iter().any(|w| w == ";") {
            return Err(self.error(
                entry,
                "\";\" separates several commands; oxidepm runs one: put them in a script",
            ));
        }
        if !no_expand {
            let (expanded, unset) =
                syntax::expand_vars(words, env).map_err(|e| self.error(entry, e))?;
            words = expanded;
            for name in unset {
                self.note(
                    "ExecStart",
                    format!("${name} is not set by Environment= or EnvironmentFile=: it is passed as empty, as systemd does"),
                );
            }
        }
        if argv0 && words.len() > 1 {
            words.remove(1);
            self.note(
                "ExecStart",
                "@: the program's argv[0] is its path, not the name given",
            );
        }
        if ignore_failure {
            self.note(
                "ExecStart",
                "-: a failing exit still counts as a failure for Restart=",
            );
        }
        let Some((program, args)) = words.split_first() else {
            return Err(self.error(entry, "is empty; give the program to run"));
        };
        if !program.contains('/') && program.starts_with('.') {
            return Err(self.error(
                entry,
                format!("{program:?} is relative; give an absolute path"),
            ));
        }
        if program.contains('/') && !program.starts_with('/') {
            return Err(self.error(
                entry,
                format!(
                    "{program:?} is relative; systemd requires an absolute path or a bare name"
                ),
            ));
        }
        Ok((program.clone(), args.to_vec()))
    }

    /// `WorkingDirectory=`: absolute, `~`, or with `-` a missing one is `/`.
    fn working_directory(&mut self, s: &Section) -> Result<String, AppFileError> {
        let Some(entry) = s.last("WorkingDirectory") else {
            return Ok("/".into());
        };
        let value = self.value(entry)?;
        let (optional, dir) = match value.strip_prefix('-') {
            Some(rest) => (true, rest.to_string()),
            None => (false, value.clone()),
        };
        let dir = if dir == "~" {
            let user = s.last("User").map(|e| self.value(e)).transpose()?;
            home_of(user.as_deref()).unwrap_or_else(|| self.specifiers.home.clone())
        } else {
            dir
        };
        if !dir.starts_with('/') {
            return Err(self.error(
                entry,
                format!("{dir:?} is not an absolute path (or ~); systemd requires one"),
            ));
        }
        if optional && !Path::new(&dir).is_dir() {
            self.note(
                "WorkingDirectory",
                format!("-{dir} does not exist: the app runs in /, as under systemd"),
            );
            return Ok("/".into());
        }
        Ok(dir)
    }

    fn restart(&mut self, s: &Section, kind: &str) -> Result<RestartPolicy, AppFileError> {
        let Some(entry) = s.last("Restart") else {
            return Ok(RestartPolicy::Never);
        };
        Ok(match entry.value.as_str() {
            "no" => RestartPolicy::Never,
            "always" if kind == "oneshot" => {
                return Err(self.error(entry, "always is not allowed with Type=oneshot"))
            }
            "always" => RestartPolicy::Always,
            "on-failure" => {
                self.note(
                    "Restart",
                    "on-failure: a death by SIGTERM, SIGINT, SIGHUP or SIGPIPE is restarted too \
                     (systemd counts those as clean)",
                );
                RestartPolicy::OnFailure
            }
            v @ ("on-abnormal" | "on-abort" | "on-watchdog") => {
                self.note(
                    "Restart",
                    format!("{v}: restarted on any failure, a non-zero exit included (on-failure)"),
                );
                RestartPolicy::OnFailure
            }
            "on-success" => {
                self.note("Restart", "on-success: restarted after any exit (always)");
                RestartPolicy::Always
            }
            other => {
                return Err(self.error(
                    entry,
                    format!("unknown value {other:?}; use no, always, on-failure or on-abnormal"),
                ))
            }
        })
    }

    fn unit_section(&mut self, section: &Section, unit: &mut Unit) -> Result<(), AppFileError> {
        for entry in &section.entries {
            if !DEPENDENCY_KEYS.contains(&entry.key.as_str()) {
                let message = match entry.key.as_str() {
                    "Description" | "Documentation" => "kept only as a comment",
                    "StartLimitBurst" | "StartLimitIntervalSec" => {
                        "oxidepm gives up after max_restarts unstable restarts in a row"
                    }
                    _ => "not used by oxidepm (no equivalent)",
                };
                let field = format!("{}={}", entry.key, entry.value);
                self.note(
                    if entry.key == "Description" {
                        &field
                    } else {
                        &entry.key
                    },
                    message,
                );
                continue;
            }
            let value = self.value(entry)?;
            let names = value
                .split_whitespace()
                .map(|n| (n.to_string(), entry.line));
            match entry.key.as_str() {
                "After" => unit.after.extend(names),
                "Before" => unit.before.extend(names),
                _ => unit.pulls.extend(names),
            }
        }
        Ok(())
    }
}

/// The home directory of a user, from the password database.
fn home_of(user: Option<&str>) -> Option<String> {
    let user = match user {
        Some(name) => nix::unistd::User::from_name(name).ok().flatten()?,
        None => nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()?,
    };
    Some(user.dir.to_string_lossy().into_owned())
}
