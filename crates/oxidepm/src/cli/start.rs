//! `oxidepm start`: what the target is (an app file, a script, a program
//! with its arguments after `--`, or existing apps) and the request made of
//! it. A start from the command line never redefines an app silently: the
//! daemon refuses a different spec under an existing name unless
//! `--update` is given.

use super::args::StartArgs;
use super::output::Printer;
use super::script::{self, ScriptError};
use super::{appfile, connect, file_start, Error, LocalError};
use crate::client::ClientError;
use oxidepm_proto::{AppAction, AppKind, AppSpec, Defined, ErrorCode, Op, RestartPolicy};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `oxidepm start`: sends the request and prints the answer.
pub(super) fn run(a: StartArgs, out: &Printer) -> Result<(), Error> {
    let target = a.target.clone();
    let instances = a.instances;
    let is_app_file = target.as_deref().is_some_and(|t| {
        let path = Path::new(t);
        path.is_file() && script::app_file_format(path).is_some()
    });
    if instances.is_some() && is_app_file {
        return Err(LocalError::InstancesOfFile.into());
    }
    let op = match (start_op(a)?, instances) {
        (Op::Define { apps, update }, Some(n)) => Op::Define {
            apps: with_instances(apps, n)?,
            update,
        },
        (op, Some(_)) if !matches!(op, Op::Define { .. }) => {
            return Err(LocalError::InstancesOfExisting.into())
        }
        (op, _) => op,
    };
    match op {
        op @ Op::Define { .. } => {
            out.defined(&connect::client(true)?.call_as::<Vec<Defined>>(op)?)?;
        }
        op => match connect::client(true)?.call_as::<Vec<AppAction>>(op) {
            Ok(done) => out.actions(&done)?,
            Err(ClientError::Daemon(mut body)) if body.code == ErrorCode::NotFound => {
                // `start app.js` typed in the wrong directory: say that the
                // file is not here either, not only that no app has the name.
                if let Some(t) = target.filter(|t| Path::new(t).extension().is_some()) {
                    let here = std::env::current_dir().unwrap_or_default();
                    body.message = format!(
                        "{}; there is no file {t:?} in {} either",
                        body.message,
                        here.display()
                    );
                }
                return Err(ClientError::Daemon(body).into());
            }
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// `-i N`: the one app a command line defines, as N instances (`-i 1`
/// changes nothing); a file sets `instances` per app instead.
fn with_instances(apps: Vec<AppSpec>, n: u32) -> Result<Vec<AppSpec>, Error> {
    match apps.as_slice() {
        [_] if n == 1 => Ok(apps),
        [app] => Ok((0..n)
            .map(|i| oxidepm_proto::instance_spec(app, &app.name, i))
            .collect()),
        _ => Err(LocalError::InstancesOfFile.into()),
    }
}

/// Builds the request for `oxidepm start`.
fn start_op(a: StartArgs) -> Result<Op, Error> {
    file_start::only_with_a_file(&a)?;
    let Some(target) = a.target.clone() else {
        // `start -- node other.js`: named after the script it runs.
        let (program, args) = a.command.split_first().ok_or(LocalError::NothingToStart)?;
        let cwd = cwd_of(&a)?;
        let name = match &a.name {
            Some(n) => n.clone(),
            None => script::name_for_command(program, args, &cwd).map_err(LocalError::from)?,
        };
        return command_op(&a, name, cwd, a.command.clone());
    };
    let path = Path::new(&target);
    if path.is_file() {
        if script::app_file_format(path).is_some() {
            if !a.command.is_empty() {
                return Err(LocalError::ArgsForAppFile { file: target }.into());
            }
            // A file is the truth about its apps: it changes them.
            return Ok(Op::Define {
                apps: file_start::apps(&a, path)?,
                update: true,
            });
        }
        return script_op(&a, path);
    }
    if !a.command.is_empty() {
        // `start npm --name x -- start`: the program, then its arguments.
        let cwd = cwd_of(&a)?;
        let name = match &a.name {
            Some(n) => n.clone(),
            None => script::name_from(&target).map_err(LocalError::from)?,
        };
        let mut command = vec![target];
        command.extend(a.command.iter().cloned());
        return command_op(&a, name, cwd, command);
    }
    if target.contains('/') {
        return Err(LocalError::NoSuchFile { target }.into());
    }
    if a.name.is_some()
        || !a.env.is_empty()
        || a.cwd.is_some()
        || a.interpreter.is_some()
        || a.interpreter_args.is_some()
    {
        return Err(LocalError::NotAFile { target }.into());
    }
    Ok(Op::Start { target })
}

/// `start <script> [-- args]`: the interpreter its extension names (or
/// `--interpreter`), the script by its absolute path, named after its stem.
fn script_op(a: &StartArgs, path: &Path) -> Result<Op, Error> {
    let script: PathBuf = std::path::absolute(path)
        .map_err(ClientError::Io)?
        .components()
        .collect();
    let shown = script.to_string_lossy().into_owned();
    let executable = std::fs::metadata(&script)
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    let interpreter = match a.interpreter.as_deref() {
        Some("none") => None,
        Some(i) => Some(i.to_string()),
        None => script::interpreter_for(&script, executable)
            .map_err(LocalError::from)?
            .map(String::from),
    };
    let mut command = Vec::new();
    match interpreter {
        Some(i) => {
            command.push(i);
            if let Some(words) = &a.interpreter_args {
                command.extend(words.split_whitespace().map(String::from));
            }
        }
        None if a.interpreter_args.is_some() => {
            return Err(
                LocalError::from(ScriptError::ArgsWithoutInterpreter { script: shown }).into(),
            )
        }
        None => {}
    }
    command.push(shown.clone());
    command.extend(a.command.iter().cloned());
    let name = match &a.name {
        Some(n) => n.clone(),
        None => script::name_from(&shown).map_err(LocalError::from)?,
    };
    command_op(a, name, cwd_of(a)?, command)
}

/// A define of one app from the command line: refused by the daemon when
/// the app exists with another spec, unless `--update`.
fn command_op(
    a: &StartArgs,
    name: String,
    cwd: PathBuf,
    command: Vec<String>,
) -> Result<Op, Error> {
    let spec = spec_from_args(a, name, cwd, command)?;
    Ok(Op::Define {
        apps: vec![spec],
        update: a.update,
    })
}

/// The app's directory: `--cwd`, else the current one.
fn cwd_of(a: &StartArgs) -> Result<PathBuf, Error> {
    match &a.cwd {
        Some(d) => std::fs::canonicalize(d).map_err(|source| {
            LocalError::Cwd {
                dir: d.clone(),
                source,
            }
            .into()
        }),
        None => Ok(std::env::current_dir().map_err(ClientError::Io)?),
    }
}

/// A program given by a relative path is made absolute here, where it was
/// typed: the daemon would look for it from the app's directory.
fn absolute_program(program: &str) -> Result<String, Error> {
    if !program.contains('/') || program.starts_with('/') {
        return Ok(program.to_string());
    }
    let p = std::path::absolute(program).map_err(ClientError::Io)?;
    let clean: PathBuf = p.components().collect();
    Ok(clean.to_string_lossy().into_owned())
}

fn spec_from_args(
    a: &StartArgs,
    name: String,
    cwd: PathBuf,
    command: Vec<String>,
) -> Result<AppSpec, Error> {
    let (program, args) = command.split_first().ok_or(LocalError::NothingToStart)?;
    let mut spec = AppSpec::new(name, absolute_program(program)?, args.to_vec());
    spec.cwd = Some(cwd.to_string_lossy().into_owned());
    if let Some(f) = &a.env_file {
        spec.env = appfile::read_env_file(Path::new(f)).map_err(LocalError::from)?;
    }
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| LocalError::EnvPair { pair: kv.clone() })?;
        spec.env.insert(k.to_string(), v.to_string());
    }
    spec.tags = a.tag.clone();
    if let Some(r) = &a.restart {
        spec.restart = match r.as_str() {
            "always" => RestartPolicy::Always,
            "on-failure" => RestartPolicy::OnFailure,
            "never" => RestartPolicy::Never,
            other => {
                return Err(LocalError::Restart {
                    value: other.to_string(),
                }
                .into())
            }
        };
    }
    let ms = |option: &'static str, v: &Option<String>| -> Result<Option<u64>, LocalError> {
        v.as_deref()
            .map(|s| {
                appfile::parse_duration_ms(s).map_err(|reason| LocalError::Value { option, reason })
            })
            .transpose()
    };
    if let Some(v) = ms("--restart-delay", &a.restart_delay)? {
        spec.restart_delay_ms = v;
    }
    if let Some(v) = ms("--min-uptime", &a.min_uptime)? {
        spec.min_uptime_ms = v;
    }
    if let Some(v) = ms("--kill-timeout", &a.kill_timeout)? {
        spec.kill_timeout_ms = v;
    }
    if let Some(n) = a.max_restarts {
        spec.max_restarts = n;
    }
    if let Some(s) = &a.stop_signal {
        spec.stop_signal = if s.to_ascii_uppercase().starts_with("SIG") {
            s.to_ascii_uppercase()
        } else {
            format!("SIG{}", s.to_ascii_uppercase())
        };
    }
    if let Some(m) = &a.max_memory_restart {
        spec.max_memory_bytes =
            Some(appfile::parse_size(m).map_err(|reason| LocalError::Value {
                option: "--max-memory-restart",
                reason,
            })?);
    }
    spec.cron_restart = a.cron_restart.clone();
    spec.watch = watch_spec(a)?;
    spec.user = a.user.clone();
    spec.protected = a.protected;
    spec.log_timestamps = !a.no_timestamps;
    spec.log_target = a.log_target;
    spec.kind = match a.kind.as_deref() {
        None | Some("app") => AppKind::App,
        Some("agent") => AppKind::Agent,
        Some("adapter") => AppKind::Adapter,
        Some("responder") => AppKind::Responder,
        Some(other) => {
            return Err(LocalError::Kind {
                value: other.to_string(),
            }
            .into())
        }
    };
    Ok(spec)
}

/// `--watch[=PATHS]`, `--ignore-watch` and `--watch-delay` as a watch;
/// the last two without `--watch` are refused, since they would do nothing.
fn watch_spec(a: &StartArgs) -> Result<Option<oxidepm_proto::WatchSpec>, LocalError> {
    let Some(paths) = &a.watch else {
        if !a.ignore_watch.is_empty() || a.watch_delay.is_some() {
            return Err(LocalError::Value {
                option: "--ignore-watch",
                reason: "--ignore-watch and --watch-delay need --watch".into(),
            });
        }
        return Ok(None);
    };
    let mut w = oxidepm_proto::WatchSpec::cwd();
    w.paths = paths
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    // pm2 takes `--ignore-watch="node_modules logs"`: one flag, several names.
    w.ignore = a
        .ignore_watch
        .iter()
        .flat_map(|g| g.split_whitespace())
        .map(String::from)
        .collect();
    if let Some(d) = &a.watch_delay {
        w.delay_ms = appfile::parse_duration_ms(d).map_err(|reason| LocalError::Value {
            option: "--watch-delay",
            reason,
        })?;
    }
    Ok(Some(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn op(args: &[&str]) -> Result<Op, Error> {
        let cli = super::super::args::Cli::try_parse_from(
            std::iter::once("oxidepm").chain(args.iter().copied()),
        )
        .expect("parses");
        match cli.command {
            super::super::args::Command::Start(a) => start_op(a),
            _ => unreachable!("a start"),
        }
    }

    fn one(args: &[&str]) -> (AppSpec, bool) {
        match op(args).unwrap() {
            Op::Define { mut apps, update } => (apps.remove(0), update),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_program_keeps_its_arguments_after_dashes() {
        let (spec, update) = one(&["start", "npm", "--name", "x", "--", "start"]);
        assert_eq!((spec.name.as_str(), spec.command.as_str()), ("x", "npm"));
        assert_eq!(spec.args, ["start"]);
        assert!(!update, "the command line never redefines silently");
        let (spec, update) = one(&["start", "--update", "--", "sleep", "5"]);
        assert_eq!(spec.name, "sleep");
        assert!(update);
    }

    #[test]
    fn scripts_get_their_interpreter_and_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let js = dir.path().join("app.js");
        std::fs::write(&js, "").unwrap();
        let js = js.display().to_string();
        let (spec, _) = one(&["start", &js, "--node-args", "--inspect", "--", "-p", "1"]);
        assert_eq!(spec.name, "app");
        assert_eq!(spec.command, "node");
        assert_eq!(spec.args, ["--inspect", js.as_str(), "-p", "1"]);
        let (spec, _) = one(&["start", &js, "--interpreter", "bun", "--name", "api"]);
        assert_eq!((spec.name.as_str(), spec.command.as_str()), ("api", "bun"));
        let (spec, _) = one(&["start", "--", "node", &js]);
        assert_eq!(spec.name, "app");
        let err = op(&[
            "start",
            &js,
            "--interpreter",
            "none",
            "--interpreter-args",
            "-x",
        ]);
        assert!(err.unwrap_err().to_string().contains("--interpreter"));
    }

    #[test]
    fn targets_that_are_not_scripts() {
        assert!(matches!(op(&["start", "web"]).unwrap(), Op::Start { .. }));
        let gone = op(&["start", "./no/such/app.js"]).unwrap_err().to_string();
        assert!(gone.contains("not a file"), "{gone}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("apps.toml");
        std::fs::write(&file, "[[apps]]\nscript = \"sleep\"\n").unwrap();
        let file = file.display().to_string();
        let err = op(&["start", &file, "--", "x"]).unwrap_err().to_string();
        assert!(err.contains("not for the app file"), "{err}");
        assert!(matches!(
            op(&["start", &file]).unwrap(),
            Op::Define { update: true, .. }
        ));
    }
}
