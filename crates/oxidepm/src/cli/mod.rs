//! The command-line client: parses arguments, talks to the daemon, prints.

pub mod appfile;
mod args;
mod connect;
mod error;
mod monit;
mod output;
mod script;
mod start;
mod startup;
mod terminal;

pub use connect::ConnectError;
pub use error::{Error, LocalError};

use crate::client::ClientError;
use args::{Cli, Command};
use clap::Parser;
use oxidepm_proto::{
    AppAction, AppInfo, AuditRecord, ErrorBody, ErrorCode, EventRecord, Flushed, Killed, LogLine,
    LogStream, LogsDone, Op, Pong, RouteAdded, RouteRemoved, Saved, Stopped,
};
use serde_json::Value;
use std::process::ExitCode;

/// Runs the CLI with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    if let Command::Monit = cli.command {
        return monit::main();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e, json);
            ExitCode::FAILURE
        }
    }
}

/// Prints why a command failed. An error of the daemon, and one found here
/// before sending (reported as the daemon would report it), print as the
/// protocol's error; any other failure is `E_CLIENT`.
fn report(e: &Error, json: bool) {
    let local;
    let body = match e {
        Error::Client(ClientError::Daemon(b)) => Some(b),
        Error::Local(l) => {
            local = ErrorBody::new(ErrorCode::BadRequest, l.to_string());
            Some(&local)
        }
        Error::Client(_) | Error::Connect(_) => None,
    };
    match (body, json) {
        (Some(b), true) => eprintln!("{}", serde_json::to_string(b).unwrap_or_default()),
        (Some(b), false) => eprintln!("oxidepm: error {}: {}", b.code, b.message),
        (None, true) => eprintln!(
            "{}",
            serde_json::json!({"code": "E_CLIENT", "message": e.to_string()})
        ),
        (None, false) => eprintln!("oxidepm: {e}"),
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    let json = cli.json;
    let out = output::Printer::new(json);
    match cli.command {
        Command::Start(a) => start::run(a, &out)?,
        Command::Stop { targets } => {
            let done: Vec<Stopped> = connect::client(true)?.call_as(Op::Stop {
                target: targets.join(","),
            })?;
            out.stopped(&done);
        }
        Command::Restart { targets } => {
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Restart {
                target: targets.join(","),
            })?;
            out.actions(&done);
        }
        Command::Delete { targets } => {
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Delete {
                target: targets.join(","),
            })?;
            out.actions(&done);
        }
        Command::Status => {
            let mut c = connect::client(true)?;
            let apps: Vec<AppInfo> = c.call_as(Op::Status)?;
            out.status(&apps);
            out.warning(c.warning());
        }
        Command::Show { target } => {
            let apps: Vec<AppInfo> = connect::client(true)?.call_as(Op::Show { target })?;
            out.show(&apps);
        }
        Command::Logs {
            target,
            lines,
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
            let mut c = connect::client(true)?;
            if follow {
                c.wait_for_ever().map_err(ClientError::Io)?;
            }
            let op = Op::Logs {
                target,
                lines,
                follow,
                stream,
            };
            let out = output::Printer {
                escape: out.escape && !raw,
                ..out
            };
            let mut stdout = std::io::stdout().lock();
            let _: Option<LogsDone> =
                c.call_stream_as(op, |line: LogLine| out.log_line(&mut stdout, &line))?;
        }
        Command::Events {
            target,
            limit,
            follow: false,
            ..
        } => {
            let events: Vec<EventRecord> =
                connect::client(true)?.call_as(Op::Events { target, limit })?;
            out.events(&events);
        }
        Command::Events { target, kinds, .. } => {
            let mut c = connect::client(true)?;
            let mut stdout = std::io::stdout().lock();
            // Ends when stdout is closed (quietly) or on Ctrl-C.
            let _: Option<serde_json::Value> = c.call_stream_as(
                Op::Subscribe { target, kinds },
                |item: oxidepm_proto::Streamed| out.streamed(&mut stdout, &item),
            )?;
        }
        Command::Flush { target } => {
            let flushed: Flushed = connect::client(true)?.call_as(Op::Flush { target })?;
            out.value(&flushed);
        }
        Command::Save { name } => {
            let saved: Saved = connect::client(true)?.call_as(Op::Save { name })?;
            out.value(&saved);
        }
        Command::Resurrect { name } => {
            let done: Vec<AppAction> = connect::client(true)?.call_as(Op::Resurrect { name })?;
            out.actions(&done);
        }
        Command::Ping => {
            let mut c = connect::client(true)?;
            let pong: Pong = c.call_as(Op::Ping)?;
            out.value(&pong);
            out.warning(c.warning());
        }
        Command::Whoami => out.whoami(&connect::client(true)?.call_as(Op::Whoami)?),
        Command::Audit {
            app,
            actor,
            since,
            limit,
        } => {
            let rows: Vec<AuditRecord> = connect::client(true)?.call_as(Op::Audit {
                app,
                actor,
                since,
                limit,
            })?;
            out.audit(&rows);
        }
        Command::Route { action } => {
            let mut c = connect::client(true)?;
            match action {
                args::RouteAction::List => out.routes(&c.call_as(Op::Routes)?),
                args::RouteAction::Add(r) => {
                    let added: RouteAdded = c.call_as(Op::RouteAdd { route: r.route() })?;
                    out.value(&added);
                }
                args::RouteAction::Rm(r) => {
                    let removed: RouteRemoved = c.call_as(Op::RouteRm { route: r.route() })?;
                    out.value(&removed);
                }
            }
        }
        Command::Monit => return Ok(()),
        Command::Lanes => out.lanes(&connect::client(true)?.call_as(Op::Lanes)?),
        Command::Startup { user, write } => {
            let home = crate::paths::Home::from_env();
            let text = startup::unit(&home, &startup::daemon_path(), user);
            if write {
                let said = startup::install(&text, user).map_err(LocalError::from)?;
                print!("{said}");
            } else {
                print!("{text}");
            }
        }
        Command::Kill => match connect::client(false) {
            Ok(mut c) => {
                let killed: Killed = c.call_as(Op::Kill)?;
                connect::wait_gone();
                out.value(&killed);
            }
            Err(ConnectError::NoDaemon { .. } | ConnectError::Connect { .. }) => {
                if json {
                    println!("{{\"stopped\":false,\"running\":false}}");
                } else {
                    println!("no daemon is running");
                }
            }
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// Prints a value as JSON (used by several commands in --json mode).
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}
