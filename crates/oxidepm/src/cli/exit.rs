//! How a command ends: what it prints on stderr and its exit status.
//!
//! | status | when |
//! |---|---|
//! | 0 | done; also when the reader of stdout went away (`| head -1`) |
//! | 1 | the daemon refused or failed, or it could not be reached; a unit `startup` could not install or remove |
//! | 2 | the command is wrong as given (clap's usage errors, and ours) |
//! | 3 | a read command found no daemon; `status APP`: not running |
//! | 4 | `status APP`: no such app |
//!
//! A closed stdout ends with 0, as `systemctl` does, not with the 141 of a
//! process killed by SIGPIPE (`git`): the reader had what it wanted, and
//! `set -o pipefail` scripts that read one line should not fail.

use super::Error;
use crate::client::ClientError;
use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// Exit status of a command that is wrong as given.
pub const USAGE: u8 = 2;
/// Exit status of a read with no daemon, and of `status APP` for an app
/// that is not running (LSB "program is not running").
pub const NOT_RUNNING: u8 = 3;
/// Exit status of `status APP` for an app that does not exist (LSB
/// "program or service status is unknown").
pub const UNKNOWN: u8 = 4;

/// Reports `e` on stderr (JSON with `json`) and gives the exit status.
pub fn fail(e: &Error, json: bool) -> ExitCode {
    let (code, status) = match e {
        Error::Output(io) if io.kind() == ErrorKind::BrokenPipe => return ExitCode::SUCCESS,
        Error::Client(ClientError::Daemon(b)) => (b.code.to_string(), 1),
        // A unit that systemd would not take is a failure of the system,
        // not of the command as typed (`systemctl enable` exits 1 too).
        Error::Local(super::LocalError::Install(_)) => ("E_CLIENT".to_string(), 1),
        Error::Local(_) => ("E_USAGE".to_string(), USAGE),
        Error::NotRunning => ("E_NO_DAEMON".to_string(), NOT_RUNNING),
        Error::Client(_) | Error::Connect(_) | Error::Output(_) => ("E_CLIENT".to_string(), 1),
    };
    let message = match e {
        Error::Client(ClientError::Daemon(b)) => b.message.clone(),
        other => other.to_string(),
    };
    let mut err = std::io::stderr().lock();
    // Nothing is left to tell a reader who closed stderr too.
    let _ = if json {
        writeln!(
            err,
            "{}",
            serde_json::json!({ "code": code, "message": message })
        )
    } else if let Error::Client(ClientError::Daemon(b)) = e {
        writeln!(err, "oxidepm: error {}: {}", b.code, b.message)
    } else {
        writeln!(err, "oxidepm: {e}")
    };
    ExitCode::from(status)
}
