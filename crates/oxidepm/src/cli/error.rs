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
    /// A read command found no daemon; none is started for a read.
    #[error("no daemon is running (start one with `oxidepm ping` or any start command)")]
    NotRunning,
    /// Writing the answer failed (a closed pipe ends the command quietly).
    #[error("cannot write the answer: {0}")]
    Output(#[from] std::io::Error),
}

/// A command that is wrong as given, found before any request is sent.
/// It is reported as `oxidepm: <what> — <what to do>` with exit status 2,
/// as clap reports a usage error (`{"code": "E_USAGE", …}` with --json),
/// never dressed as an answer of the daemon.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// `start` with nothing to start.
    #[error("nothing to start: give a config file, an app to start, or a command after `--`")]
    NothingToStart,
    /// Options that define an app, given with a selector.
    #[error("{target:?} is not a file — options such as --name define a new app: give its command after `--`")]
    NotAFile {
        /// The selector as given.
        target: String,
    },
    /// A config file or env file that cannot be used.
    #[error(transparent)]
    AppFile(#[from] AppFileError),
    /// `--cwd` names a directory that cannot be resolved.
    #[error("--cwd {dir:?}: {source} — give a directory that exists")]
    Cwd {
        /// The directory as given.
        dir: String,
        /// The failure.
        source: std::io::Error,
    },
    /// `--env` without `=`.
    #[error("--env {pair:?} has no `=` — write it as KEY=VALUE")]
    EnvPair {
        /// The argument as given.
        pair: String,
    },
    /// `--restart` with an unknown policy.
    #[error("--restart {value:?} is not a restart policy — use always, on-failure or never")]
    Restart {
        /// The value as given.
        value: String,
    },
    /// A duration or size option that does not parse.
    #[error("{option}: {reason} — see `oxidepm start --help`")]
    Value {
        /// The option.
        option: &'static str,
        /// What is wrong with its value, as the config files' parser says.
        reason: String,
    },
    /// `--kind` with an unknown kind.
    #[error("--kind {value:?} is not a kind — use app, agent, adapter or responder")]
    Kind {
        /// The value as given.
        value: String,
    },
    /// `startup --write` could not write the unit.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// Two `--env <name>` sections asked for one file.
    #[error("--env {first:?} and --env {second:?}: a file's apps take one env_<name> section; give one name (and KEY=VALUE pairs as needed)")]
    EnvNames {
        /// The first name given.
        first: String,
        /// The second.
        second: String,
    },
    /// `--only` without a config file to choose apps from.
    #[error("--only chooses apps of a config file; give the file (oxidepm start ecosystem.config.js --only {only})")]
    OnlyWithoutFile {
        /// The names as given, comma-separated.
        only: String,
    },
    /// `stop`/`restart`/`delete` of an app file that defines no app.
    #[error("{file} defines no app — name the apps to act on instead")]
    EmptyFile {
        /// The file as given.
        file: String,
    },
    /// A time option that names no time.
    #[error("{option} {value:?} is not a time — use a duration ago (10m, 1h, 2d), today, yesterday, now, a date (2026-11-30) or an RFC 3339 time (2026-11-30T10:00:00Z)")]
    When {
        /// The option.
        option: &'static str,
        /// The value as given.
        value: String,
    },
    /// `-i N` with an app file.
    #[error("-i/--instances is for a script or a program; in an app file set `instances = N` on the app")]
    InstancesOfFile,
    /// `-i N` with existing apps.
    #[error(
        "-i/--instances defines new instances; for existing apps use `oxidepm scale <name> N`"
    )]
    InstancesOfExisting,
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
