//! `oxidepm reload-daemon-config`: the daemon reads daemon.toml again
//! without stopping any app, and says what it applied and what waits.

use super::output::Printer;
use super::{reads, Error};
use oxidepm_proto::{ConfigReloaded, Op};
use std::io::Write;

/// Asks the running daemon to reload; never starts one (a daemon that is
/// not running reads daemon.toml when it starts).
pub fn run(out: &Printer) -> Result<(), Error> {
    let r: ConfigReloaded = reads::client()?.call_as(Op::ReloadDaemonConfig)?;
    if out.json {
        return Ok(out.value(&r)?);
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "reloaded {}", r.path)?;
    if r.applied.is_empty() && r.not_applied.is_empty() {
        writeln!(stdout, "nothing changed")?;
    }
    for key in &r.applied {
        writeln!(stdout, "applied: {key}")?;
    }
    for n in &r.not_applied {
        writeln!(stdout, "not applied: {}", n.reason)?;
    }
    Ok(())
}
