//! Why a command failed: the daemon's answer, no daemon to talk to, or
//! something wrong on this side before any request was sent.

use super::appfile::AppFileError;
use super::connect::ConnectError;
use super::startup::InstallError;
use crate::client::ClientError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The call to the daemon failed, or the daemon answered with an error.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// No daemon could be reached or started.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The command is wrong as given; nothing was sent.
    #[error(transparent)]
    Local(#[from] LocalError),
}

/// A command that is wrong as given, found before any request is sent.
/// It is reported as the daemon reports an invalid request
/// (`E_BAD_REQUEST`), so that scripts see one shape of refusal.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// `start` with nothing to start.
    #[error("nothing to start: give a config file, an app to start, or a command after `--`")]
    NothingToStart,
    /// Options that define an app, given with a selector.
    #[error("{target:?} is not a file; options such as --name define a new app and need a command after `--`")]
    NotAFile {
        /// The selector as given.
        target: String,
    },
    /// A config file or env file that cannot be used.
    #[error(transparent)]
    AppFile(#[from] AppFileError),
    /// `--cwd` names a directory that cannot be resolved.
    #[error("--cwd {dir:?}: {source}")]
    Cwd {
        /// The directory as given.
        dir: String,
        /// The failure.
        source: std::io::Error,
    },
    /// `--env` without `=`.
    #[error("--env {pair:?} must be KEY=VALUE")]
    EnvPair {
        /// The argument as given.
        pair: String,
    },
    /// `--restart` with an unknown policy.
    #[error("--restart {value:?}: use always, on-failure or never")]
    Restart {
        /// The value as given.
        value: String,
    },
    /// A duration or size option that does not parse.
    #[error("{option}: {reason}")]
    Value {
        /// The option.
        option: &'static str,
        /// What is wrong with its value, as the config files' parser says.
        reason: String,
    },
    /// `--kind` with an unknown kind.
    #[error("--kind {value:?}: use app, agent or adapter")]
    Kind {
        /// The value as given.
        value: String,
    },
    /// `startup --write` could not write the unit.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// A script that cannot be started as given (`start app.ts`).
    #[error(transparent)]
    Script(#[from] super::script::ScriptError),
    /// Arguments after `--` given with an app file.
    #[error("arguments after `--` are for a script or a program, not for the app file {file:?}; put them in the file (`args`)")]
    ArgsForAppFile {
        /// The file.
        file: String,
    },
    /// A path to start that is not a file.
    #[error("{target:?} is not a file; give the path of a script or an app file, or a program followed by `--` and its arguments")]
    NoSuchFile {
        /// The path as given.
        target: String,
    },
}
