//! What the supervisor answers when a request cannot be carried out. Each
//! part of layer 1 has its own error for what it makes; these are the ones
//! that reach a request's caller. The daemon maps them to wire codes.

use super::control::DependencyError;
use super::deps::Cycle;
use super::spawn::SpawnError;
use super::validate::Invalid;
use crate::store::StoreError;

/// Why a selector (`name`, id, `all`, `@tag`, or a list of them) names no app.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// One part of a comma-separated list is empty.
    #[error("empty selector in {target:?}")]
    Empty {
        /// The whole selector.
        target: String,
    },
    /// `all`, with no app defined.
    #[error("no apps are defined")]
    NoApps,
    /// `@tag`, with no app carrying the tag.
    #[error("no app has the tag {tag:?}")]
    NoTag {
        /// The tag, without `@`.
        tag: String,
    },
    /// A name or id that no app has.
    #[error("no app named or numbered {selector:?}; see `oxidepm status`")]
    NoMatch {
        /// The part of the selector that matched nothing.
        selector: String,
    },
    /// A name that no app has, but a tag that apps carry (supervisorctl's
    /// `group:*`, pm2's namespace).
    #[error("no app is named {selector:?}, but apps are tagged {selector:?}: select them with `@{selector}`")]
    IsTag {
        /// The name given.
        selector: String,
    },
}

/// Why the supervisor refused or failed a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The selector names no app, or is malformed.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// A spec breaks a rule that every client must meet.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// No app has this id (it was deleted meanwhile).
    #[error("no app with id {id}")]
    NoSuchApp {
        /// The id asked for.
        id: u64,
    },
    /// The app's process could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The apps to start depend on each other in a cycle.
    #[error(transparent)]
    Cycle(#[from] Cycle),
    /// The app is still stopping.
    #[error("{app} is stopping; try again when it is stopped")]
    Stopping {
        /// The app's name.
        app: String,
    },
    /// A dependency failed in a way that waiting will not mend.
    #[error("cannot start {app}: {source}")]
    Dependency {
        /// The app that cannot start.
        app: String,
        /// What is wrong with its dependency.
        source: DependencyError,
    },
    /// The change could not be written to the state database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Apps exist with another spec, and the request may not change them.
    #[error("{}", super::define::redefinitions_text(.apps))]
    Redefined {
        /// The apps and what would change.
        apps: Vec<super::define::Redefinition>,
    },
    /// Apps of a request cannot start; nothing of the request is left.
    #[error("{}", super::define::failures_text(.failures, *.undone))]
    NotStarted {
        /// Every app that cannot start, with its cause.
        failures: Vec<super::define::StartFailure>,
        /// Whether changes were made and undone (a start failed), or
        /// nothing was changed (found by the checks before).
        undone: bool,
    },
}
