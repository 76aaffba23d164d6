//! `reload`, `signal`, `reset` and `scale`: the requests and their printing.

use super::args::Command;
use super::output::Printer;
use super::{connect, Error};
use oxidepm_proto::{AppAction, Op, Reloaded, ResetDone, SignalName, Signalled};
use std::io::Write;

/// Runs one of the four commands.
pub fn run(command: Command, out: &Printer) -> Result<(), Error> {
    let mut c = connect::client(true)?;
    let mut stdout = std::io::stdout().lock();
    match command {
        Command::Reload { targets } => {
            let done: Vec<Reloaded> = c.call_as(Op::Reload {
                target: targets.join(","),
            })?;
            if out.json {
                return Ok(out.value(&done)?);
            }
            for r in &done {
                let pids = match (r.old_pid, r.pid) {
                    (Some(old), Some(new)) => format!(" (pid {old} → {new})"),
                    (None, Some(new)) => format!(" (pid {new})"),
                    _ => String::new(),
                };
                writeln!(stdout, "{} [{}]: {}{pids}", r.name, r.id, r.how.as_str())?;
            }
        }
        Command::Signal { signal, targets } => {
            let done: Vec<Signalled> = c.call_as(Op::Signal {
                target: targets.join(","),
                signal: SignalName::Name(signal),
            })?;
            if out.json {
                return Ok(out.value(&done)?);
            }
            for s in &done {
                writeln!(
                    stdout,
                    "{} [{}]: {} sent to pid {}",
                    s.name, s.id, s.signal, s.pid
                )?;
            }
        }
        Command::Reset { targets } => {
            let done: Vec<ResetDone> = c.call_as(Op::Reset {
                target: targets.join(","),
            })?;
            if out.json {
                return Ok(out.value(&done)?);
            }
            for r in &done {
                writeln!(
                    stdout,
                    "{} [{}]: {} restarts forgotten ({})",
                    r.name,
                    r.id,
                    r.restarts_before,
                    r.status.as_str()
                )?;
            }
        }
        Command::Scale { target, instances } => {
            let done: Vec<AppAction> = c.call_as(Op::Scale { target, instances })?;
            if done.is_empty() && !out.json {
                writeln!(stdout, "already {instances}; nothing to do")?;
                return Ok(());
            }
            out.actions(&done)?;
        }
        _ => {}
    }
    Ok(())
}
