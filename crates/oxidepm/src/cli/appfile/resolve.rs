//! Turning the fields of one app, as read, into an [`AppSpec`].

use oxidepm_proto::{AppKind, AppSpec, Dependency, HealthSpec, RestartPolicy, WatchSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The fields of one app as read, each already checked on its own.
#[derive(Default)]
pub(super) struct RawApp {
    pub name: Option<String>,
    pub script: Option<String>,
    pub args: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub env_file: BTreeMap<String, String>,
    /// pm2's `port`: a PORT variable under `env`.
    pub port: Option<String>,
    /// The `env_<name>` section chosen with `--env <name>`.
    pub env_section: BTreeMap<String, String>,
    pub interpreter: Option<String>,
    /// With the key it was given under (`interpreter_args` or `node_args`).
    pub interpreter_args: Option<(String, Vec<String>)>,
    pub autorestart: Option<bool>,
    pub restart: Option<RestartPolicy>,
    pub max_restarts: Option<u32>,
    pub min_uptime_ms: Option<u64>,
    pub restart_delay_ms: Option<u64>,
    pub exp_backoff_ms: Option<u64>,
    pub kill_timeout_ms: Option<u64>,
    pub stop_signal: Option<String>,
    pub max_memory_bytes: Option<u64>,
    pub cron_restart: Option<String>,
    /// `watch`: the paths (empty: the cwd), or `None`.
    pub watch: Option<Vec<String>>,
    pub ignore_watch: Vec<String>,
    pub watch_delay_ms: Option<u64>,
    pub log_timestamps: Option<bool>,
    pub log_max_bytes: Option<u64>,
    pub log_keep: Option<u32>,
    pub log_target: Option<oxidepm_proto::LogTarget>,
    pub tags: Vec<String>,
    pub namespace: Option<String>,
    pub user: Option<String>,
    pub kind: Option<AppKind>,
    pub protected: Option<bool>,
    pub autostart: Option<bool>,
    pub health: Option<HealthSpec>,
    pub depends_on: Vec<Dependency>,
}

/// Checks the fields of one app together and builds its spec; `base` is the
/// app file's directory and `taken` the names of the apps before it.
pub(super) fn resolve(
    raw: RawApp,
    base: &Path,
    taken: &BTreeSet<String>,
) -> Result<AppSpec, String> {
    let Some(script) = raw.script else {
        return Err("missing field \"script\"; set it to the program or script to run".into());
    };
    let name = match raw.name {
        Some(name) => name,
        None => derived_name(&script, taken)?,
    };
    let cwd = match &raw.cwd {
        Some(cwd) => absolutize(base, cwd),
        None => base.to_path_buf(),
    };

    let interpreter = match raw.interpreter.as_deref() {
        Some("none") => None,
        Some(interpreter) => Some(interpreter),
        None => interpreter_of(&cwd, &script)?,
    };
    let (command, args) = match interpreter {
        Some(interpreter) => {
            let mut args = raw.interpreter_args.map(|(_, a)| a).unwrap_or_default();
            args.push(path_string(&absolutize(&cwd, &script)));
            args.extend(raw.args);
            (program(&cwd, interpreter, false), args)
        }
        None => {
            if let Some((key, _)) = raw.interpreter_args.filter(|(_, a)| !a.is_empty()) {
                return Err(format!(
                    "{key:?} is set but {script:?} runs without an interpreter; \
                     set \"interpreter\" or remove {key:?}"
                ));
            }
            (program(&cwd, &script, true), raw.args)
        }
    };

    let restart = match (raw.autorestart, raw.restart) {
        (Some(false), None | Some(RestartPolicy::Never)) => RestartPolicy::Never,
        (Some(true), Some(RestartPolicy::Never)) | (Some(false), Some(_)) => {
            return Err(format!(
                "\"autorestart\" = {} conflicts with \"restart\" = {:?}; keep one of them",
                raw.autorestart.unwrap_or_default(),
                restart_name(raw.restart.unwrap_or_default()),
            ))
        }
        (_, restart) => restart.unwrap_or_default(),
    };
    if raw.depends_on.iter().any(|d| d.app == name) {
        return Err(format!("\"depends_on\" lists {name:?}, the app itself"));
    }

    // `env` is more specific than `env_file`, which is more specific than
    // `port`; pm2 merges the chosen `env_<name>` section over them all.
    let mut env: BTreeMap<String, String> =
        raw.port.map(|p| ("PORT".into(), p)).into_iter().collect();
    env.extend(raw.env_file);
    env.extend(raw.env);
    env.extend(raw.env_section);
    let mut tags: Vec<String> = Vec::new();
    for tag in raw.tags.into_iter().chain(raw.namespace) {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }

    let mut spec = AppSpec::new(name, command, args);
    spec.cwd = Some(path_string(&cwd));
    spec.env = env;
    spec.user = raw.user;
    spec.restart = restart;
    spec.tags = tags;
    spec.max_memory_bytes = raw.max_memory_bytes;
    spec.cron_restart = raw.cron_restart;
    // pm2 takes ignore_watch and watch_delay without watch, doing nothing.
    spec.watch = raw.watch.map(|paths| WatchSpec {
        paths,
        ignore: raw.ignore_watch,
        delay_ms: raw
            .watch_delay_ms
            .unwrap_or_else(oxidepm_proto::app::defaults::watch_delay_ms),
    });
    spec.health = raw.health;
    spec.depends_on = raw.depends_on;
    set(&mut spec.restart_delay_ms, raw.restart_delay_ms);
    set(&mut spec.exp_backoff_ms, raw.exp_backoff_ms);
    set(&mut spec.max_restarts, raw.max_restarts);
    set(&mut spec.min_uptime_ms, raw.min_uptime_ms);
    set(&mut spec.kill_timeout_ms, raw.kill_timeout_ms);
    set(&mut spec.stop_signal, raw.stop_signal);
    set(&mut spec.kind, raw.kind);
    set(&mut spec.protected, raw.protected);
    set(&mut spec.log_timestamps, raw.log_timestamps);
    set(&mut spec.log_max_bytes, raw.log_max_bytes);
    set(&mut spec.log_keep, raw.log_keep);
    if raw.log_target.is_some() {
        spec.log_target = raw.log_target;
    }
    set(&mut spec.autostart, raw.autostart);
    Ok(spec)
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

fn restart_name(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "always",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Never => "never",
    }
}

/// pm2 names an app without a name after its script's file stem.
fn derived_name(script: &str, taken: &BTreeSet<String>) -> Result<String, String> {
    let stem = Path::new(script)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    oxidepm_proto::check_app_name(stem).map_err(|e| {
        format!(
            "no \"name\" is set and the script's file name does not make one ({e}); set \"name\""
        )
    })?;
    if taken.contains(stem) {
        return Err(format!(
            "no \"name\" is set and the name from the script, {stem:?}, is used by an earlier \
             app of this file; set \"name\""
        ));
    }
    Ok(stem.to_string())
}

/// The interpreter of a script: for a `.sh` or `.ts` file that is there, the
/// rule `oxidepm start <script>` follows (a `.sh` with sh unless it is
/// executable with a `#!` line, `.ts` refused without `interpreter`);
/// otherwise pm2's choice by extension.
fn interpreter_of(cwd: &Path, script: &str) -> Result<Option<&'static str>, String> {
    use std::os::unix::fs::PermissionsExt;
    let path = absolutize(cwd, script);
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    // Other files run as programs (a missing exec bit is named at start).
    if !matches!(extension, "sh" | "ts" | "mts" | "cts" | "tsx") {
        return Ok(inferred_interpreter(script));
    }
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => {
            let executable = m.permissions().mode() & 0o111 != 0;
            super::super::script::interpreter_for(&path, executable).map_err(|e| e.to_string())
        }
        _ => Ok(inferred_interpreter(script)),
    }
}

/// The interpreter pm2 would pick from the script's extension.
fn inferred_interpreter(script: &str) -> Option<&'static str> {
    match Path::new(script).extension()?.to_str()? {
        "js" | "mjs" | "cjs" => Some("node"),
        "py" => Some("python3"),
        _ => None,
    }
}

/// The program to execute: a path with a slash is made absolute against the
/// app's directory, since a relative program would otherwise be resolved
/// against the daemon's directory. A bare name is looked up on PATH, unless
/// (for a script, as pm2 does) a file of that name is in the app's directory.
fn program(cwd: &Path, program: &str, may_be_local: bool) -> String {
    if program.contains('/') || (may_be_local && cwd.join(program).is_file()) {
        path_string(&absolutize(cwd, program))
    } else {
        program.to_string()
    }
}

/// `path` against `base` when relative, without `.` components.
pub(super) fn absolutize(base: &Path, path: &str) -> PathBuf {
    base.join(path).components().collect()
}

fn path_string(path: &Path) -> String {
    // Paths here are built from UTF-8 strings and a UTF-8 base directory.
    path.to_string_lossy().into_owned()
}
