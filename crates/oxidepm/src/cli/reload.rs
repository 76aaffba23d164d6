//! `oxidepm reload-daemon-config`: the daemon reads daemon.toml again
//! without stopping any app, and says what it applied and what waits.

use super::output::Printer;
use super::{connect, Error};
use oxidepm_proto::{ConfigReloaded, Op};

/// Asks the running daemon to reload; never starts one (a daemon that is
/// not running reads daemon.toml when it starts).
pub fn run(out: &Printer) -> Result<(), Error> {
    let mut c = connect::client(false)?;
    let r: ConfigReloaded = c.call_as(Op::ReloadDaemonConfig)?;
    if out.json {
        super::print_json(&serde_json::to_value(&r).unwrap_or_default());
        return Ok(());
    }
    println!("reloaded {}", r.path);
    if r.applied.is_empty() && r.not_applied.is_empty() {
        println!("nothing changed");
    }
    for key in &r.applied {
        println!("applied: {key}");
    }
    for n in &r.not_applied {
        println!("not applied: {}", n.reason);
    }
    Ok(())
}
