//! The command-line client: parses arguments, talks to the daemon, prints.

// The CLI is a process of its own, never the daemon's runtime: it may wait
// for the programs it runs and sleep between tries.
#![allow(clippy::disallowed_methods)]

// First, so that its macros are in scope in every module after it.
#[macro_use]
mod say;
pub mod appfile;
mod args;
pub(crate) mod connect;
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
mod script;
mod start;
mod startup;
mod terminal;
mod verbs;
pub(crate) mod when;

pub use connect::ConnectError;
pub use error::{Error, LocalError};

use args::{Cli, Command};
use clap::Parser;
use oxidepm_proto::{
    AppAction, EventRecord, Flushed, Killed, LogStream, Op, Pong, RouteAdded, RouteRemoved, Saved,
    Stopped,
};
use std::io::Write;
use std::process::ExitCode;

/// Runs the CLI with the process's arguments.
pub fn main() -> ExitCode {
    extras::complete_if_asked();
    let cli = Cli::parse();
    let json = cli.json;
    if let Command::Monit = cli.command {
        return monit::main();
    }
    let cli = match cli {
        Cli {
            command: Command::Mcp(args),
            ..
        } => return crate::mcp::main(args),
        cli => cli,
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => exit::fail(&e, json),
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let json = cli.json;
    let out = output::Printer::new(json, cli.no_color);
    match cli.command {
        Command::Start(a) => start::run(a, &out)?,
        Command::Status { targets } => return reads::status(&out, targets),
        c @ (Command::Stop { .. }
        | Command::Restart { .. }
        | Command::Delete { .. }
        | Command::Flush { .. }
        | Command::Save { .. }
        | Command::Resurrect { .. }
        | Command::Kill) => change(c, &out)?,
        c @ (Command::Show { .. }
        | Command::Logs { .. }
        | Command::Events { .. }
        | Command::Ping
        | Command::Whoami
        | Command::Audit { .. }) => read(c, out)?,
        Command::Route { action } => route(action, &out)?,
        Command::Monit | Command::Mcp(_) => {}
        Command::Lanes { action } => lanes(action, &out)?,
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
        Command::Import(a) => import::run(&a, json)?,
        Command::Completions { shell } => extras::completions(shell)?,
        Command::Man => extras::man()?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The commands that change apps or the daemon (the others are run by
/// [`run`]).
fn change(command: Command, out: &output::Printer) -> Result<(), Error> {
    match command {
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
        Command::Kill => kill(out)?,
        _ => {}
    }
    Ok(())
}

/// `kill`: the daemon stops every app, then itself; no daemon is not an
/// error.
fn kill(out: &output::Printer) -> Result<(), Error> {
    match connect::client(false) {
        Ok(mut c) => {
            let killed: Killed = c.call_as(Op::Kill)?;
            connect::wait_gone();
            out.said(&killed, "every app is stopped and the daemon has exited")?;
        }
        Err(ConnectError::NoDaemon { .. } | ConnectError::Connect { .. }) => {
            if out.json {
                writeln!(std::io::stdout(), "{{\"stopped\":false,\"running\":false}}")?;
            } else {
                writeln!(std::io::stdout(), "no daemon is running")?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The commands that read what the daemon knows (the others are run by
/// [`run`]).
fn read(command: Command, out: output::Printer) -> Result<(), Error> {
    match command {
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
            no_escape,
            grep,
            regex,
            context,
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
                no_escape,
                grep,
                regex,
                context,
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
        _ => {}
    }
    Ok(())
}

/// `route`: list, add or remove a route of the bridge.
fn route(action: args::RouteAction, out: &output::Printer) -> Result<(), Error> {
    if let args::RouteAction::List = action {
        return Ok(out.routes(&reads::client()?.call_as(Op::Routes)?)?);
    }
    let mut c = connect::client(true)?;
    match action {
        args::RouteAction::List => {}
        args::RouteAction::Add(r) => {
            let added: RouteAdded = c.call_as(Op::RouteAdd { route: r.route() })?;
            let text = format!(
                "route added: {} (until a reload of daemon.toml or `route rm`)",
                added.added.describe()
            );
            out.said(&added, &text)?;
        }
        args::RouteAction::Rm(r) => {
            let removed: RouteRemoved = c.call_as(Op::RouteRm { route: r.route() })?;
            let text = format!("route removed: {}", removed.removed.describe());
            out.said(&removed, &text)?;
        }
    }
    Ok(())
}

/// `lanes`: the report, or a name released, or the keys migrated.
fn lanes(action: Option<args::LanesAction>, out: &output::Printer) -> Result<(), Error> {
    match action {
        None => out.lanes(&reads::client()?.call_as(Op::Lanes)?)?,
        Some(args::LanesAction::Release { name, .. }) => {
            let released: oxidepm_proto::NameReleased =
                connect::client(true)?.call_as(Op::LanesRelease { name })?;
            out.value(&released)?;
        }
        Some(args::LanesAction::MigrateKeys) => {
            let migrated: oxidepm_proto::KeysMigrated =
                connect::client(true)?.call_as(Op::LanesMigrateKeys)?;
            out.value(&migrated)?;
        }
    }
    Ok(())
}
