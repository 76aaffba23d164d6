//! The command-line client: parses arguments, talks to the daemon, prints.

pub mod appfile;
mod args;
mod connect;
mod error;
mod exit;
mod extras;
mod file_start;
mod files;
mod help;
mod import;
mod monit;
mod output;
mod reads;
mod reload;
mod startup;
mod terminal;
mod verbs;
mod when;

pub use connect::ConnectError;
pub use error::{Error, LocalError};

use crate::client::ClientError;
use args::{Cli, Command, StartArgs};
use clap::Parser;
use oxidepm_proto::{
    AppAction, AppKind, AppSpec, Defined, EventRecord, Flushed, Killed, LogStream, Op, Pong,
    RestartPolicy, RouteAdded, RouteRemoved, Saved, Stopped,
};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Runs the CLI with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    if let Command::Monit = cli.command {
        return monit::main();
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => exit::fail(&e, json),
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let json = cli.json;
    let out = output::Printer::new(json, cli.no_color);
    match cli.command {
        Command::Start(a) => match start_op(a)? {
            op @ Op::Define { .. } => {
                out.defined(&connect::client(true)?.call_as::<Vec<Defined>>(op)?)?
            }
            op => out.actions(&connect::client(true)?.call_as::<Vec<AppAction>>(op)?)?,
        },
        Command::Stop { targets } => {
            let target = files::selector(&targets)?;
            let done: Vec<Stopped> = connect::client(true)?.call_as(Op::Stop { target })?;
            out.stopped(&done)?;
        }
        Command::Restart { targets } => {
            let target = files::selector(&targets)?;
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Restart { target })?;
            out.actions(&done)?;
        }
        Command::Delete { targets } => {
            let target = files::selector(&targets)?;
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Delete { target })?;
            out.actions(&done)?;
        }
        Command::Status { targets } => return reads::status(&out, targets),
        Command::Show { target, lines } => reads::show(&out, target, lines)?,
        Command::Logs {
            target,
            lines,
            since,
            until,
            follow,
            out: only_out,
            err: only_err,
            raw,
        } => {
            let stream = match (only_out, only_err) {
                (true, false) => Some(LogStream::Out),
                (false, true) => Some(LogStream::Err),
                _ => None,
            };
            let a = reads::LogsArgs {
                target,
                lines,
                since,
                until,
                follow,
                stream,
                raw,
            };
            reads::logs(out, a)?;
        }
        Command::Events {
            target,
            limit,
            since,
            follow: false,
            ..
        } => {
            let since = when::resolve("--since", since)?;
            let op = Op::Events {
                target,
                limit,
                since,
            };
            out.events(&reads::client()?.call_as::<Vec<EventRecord>>(op)?)?;
        }
        Command::Events { target, kinds, .. } => {
            let mut c = reads::client()?;
            let mut stdout = std::io::stdout().lock();
            // Ends when stdout is closed (quietly) or on Ctrl-C.
            let _: Option<serde_json::Value> = c.call_stream_as(
                Op::Subscribe { target, kinds },
                |item: oxidepm_proto::Streamed| out.streamed(&mut stdout, &item),
            )?;
        }
        Command::Flush { target } => {
            let flushed: Flushed = connect::client(true)?.call_as(Op::Flush { target })?;
            out.value(&flushed)?;
        }
        Command::Save { name } => {
            let saved: Saved = connect::client(true)?.call_as(Op::Save { name })?;
            out.value(&saved)?;
        }
        Command::Resurrect { name } => {
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Resurrect { name })?;
            out.actions(&done)?;
        }
        Command::Ping => {
            let mut c = connect::client(true)?;
            let pong: Pong = c.call_as(Op::Ping)?;
            out.value(&pong)?;
            out.warning(c.warning());
        }
        Command::Whoami => out.whoami(&reads::client()?.call_as(Op::Whoami)?)?,
        Command::Audit {
            app,
            actor,
            since,
            until,
            limit,
        } => reads::audit(&out, app, actor, since, until, limit)?,
        Command::Route {
            action: args::RouteAction::List,
        } => out.routes(&reads::client()?.call_as(Op::Routes)?)?,
        Command::Route { action } => {
            let mut c = connect::client(true)?;
            match action {
                args::RouteAction::List => {}
                args::RouteAction::Add(r) => {
                    let added: RouteAdded = c.call_as(Op::RouteAdd { route: r.route() })?;
                    out.value(&added)?;
                }
                args::RouteAction::Rm(r) => {
                    let removed: RouteRemoved = c.call_as(Op::RouteRm { route: r.route() })?;
                    out.value(&removed)?;
                }
            }
        }
        Command::Monit => {}
        Command::Lanes => out.lanes(&reads::client()?.call_as(Op::Lanes)?)?,
        Command::Startup {
            user,
            write,
            run_as,
        } => {
            startup::run(user, write, run_as.as_deref()).map_err(LocalError::from)?;
        }
        Command::Reload { .. }
        | Command::Signal { .. }
        | Command::Reset { .. }
        | Command::Scale { .. } => verbs::run(cli.command, &out)?,
        Command::Unstartup { user, run_as } => {
            startup::uninstall(user, run_as.as_deref()).map_err(LocalError::from)?;
        }
        Command::ReloadDaemonConfig => reload::run(&out)?,
        Command::Import(a) => import::run(&a)?,
        Command::Kill => match connect::client(false) {
            Ok(mut c) => {
                let killed: Killed = c.call_as(Op::Kill)?;
                connect::wait_gone();
                out.value(&killed)?;
            }
            Err(ConnectError::NoDaemon { .. } | ConnectError::Connect { .. }) => {
                if json {
                    writeln!(std::io::stdout(), "{{\"stopped\":false,\"running\":false}}")?;
                } else {
                    writeln!(std::io::stdout(), "no daemon is running")?;
                }
            }
            Err(e) => return Err(e.into()),
        },
        Command::Completions { shell } => extras::completions(shell)?,
        Command::Man => extras::man()?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds the request for `oxidepm start`: a config file, a command after
/// `--`, a program path, or a selector of existing apps.
fn start_op(a: StartArgs) -> Result<Op, Error> {
    file_start::only_with_a_file(&a)?;
    if !a.command.is_empty() {
        let spec = spec_from_args(&a, a.command.clone())?;
        return Ok(Op::Define { apps: vec![spec] });
    }
    let Some(target) = a.target.clone() else {
        return Err(LocalError::NothingToStart.into());
    };
    let path = Path::new(&target);
    if path.is_file() {
        if appfile::Format::from_path(path).is_some() {
            let apps = file_start::apps(&a, path)?;
            return Ok(Op::Define { apps });
        }
        let spec = spec_from_args(&a, vec![target])?;
        return Ok(Op::Define { apps: vec![spec] });
    }
    if a.name.is_some() || !a.env.is_empty() || a.cwd.is_some() {
        return Err(LocalError::NotAFile { target }.into());
    }
    Ok(Op::Start { target })
}

fn spec_from_args(a: &StartArgs, command: Vec<String>) -> Result<AppSpec, Error> {
    let program = command[0].clone();
    let name = match &a.name {
        Some(n) => n.clone(),
        None => Path::new(&program)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| program.clone()),
    };
    let cwd = match &a.cwd {
        Some(d) => std::fs::canonicalize(d).map_err(|source| LocalError::Cwd {
            dir: d.clone(),
            source,
        })?,
        None => std::env::current_dir().map_err(ClientError::Io)?,
    };
    let mut spec = AppSpec::new(name, program, command[1..].to_vec());
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
    spec.user = a.user.clone();
    spec.protected = a.protected;
    spec.log_timestamps = !a.no_timestamps;
    spec.log_target = a.log_target;
    spec.kind = match a.kind.as_deref() {
        None | Some("app") => AppKind::App,
        Some("agent") => AppKind::Agent,
        Some("adapter") => AppKind::Adapter,
        Some(other) => {
            return Err(LocalError::Kind {
                value: other.to_string(),
            }
            .into())
        }
    };
    Ok(spec)
}
