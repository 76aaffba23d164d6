//! The one place where the errors of the daemon's layers become the wire's
//! [`ErrorBody`]: each error keeps its message, and its kind decides the
//! stable code a client sees.

use crate::access::gate::AuthorizeError;
use crate::access::policy::{Refusal, RefusalKind};
use crate::lanes;
use crate::store::StoreError;
use crate::supervise::{self, SelectError};
use oxidepm_proto::{ErrorBody, ErrorCode, Route, MAX_INSTANCES};
use std::path::PathBuf;

/// Why an operation failed: an error of the layer that refused or failed
/// it, or one of the daemon's own.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The gate refused the request, or its selector names no app.
    #[error(transparent)]
    Authorize(#[from] AuthorizeError),
    /// The selector names no app.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The supervisor refused or failed the change.
    #[error(transparent)]
    Supervise(#[from] supervise::Error),
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lanes could not be brought up, read or changed.
    #[error(transparent)]
    Lanes(#[from] lanes::Error),
    /// `define` with an empty list.
    #[error("no apps to define")]
    NothingToDefine,
    /// `kill` through an agent's lane.
    #[error("kill is only available on the daemon's sockets")]
    KillOffSocket,
    /// `subscribe` through an agent's lane.
    #[error("subscribe is only available on the daemon's sockets; poll `events` through the lane")]
    SubscribeOffSocket,
    /// daemon.toml was reloaded while a subscription was open.
    #[error("daemon.toml was reloaded, and the grants this subscription was opened under may have changed; subscribe again")]
    ConfigReloaded,
    /// `subscribe` with an event kind this daemon does not know.
    #[error("unknown event kind {kind:?}; the kinds are: {known}")]
    BadKind {
        /// The kind as given.
        kind: String,
        /// The kinds there are.
        known: String,
    },
    /// `subscribe` to refusals by a caller below the admin tier.
    #[error("refusals are streamed to admins only ({actor} has tier {tier}); subscribe without the `refusal` kind")]
    RefusalsForAdmins {
        /// Who asked.
        actor: oxidepm_proto::Actor,
        /// Its tier.
        tier: oxidepm_proto::Tier,
    },
    /// Every subscriber slot is taken.
    #[error(transparent)]
    SubscribersFull(#[from] crate::bus::Full),
    /// `audit --since` with a time that does not parse.
    #[error("--since {since:?} is not an RFC 3339 time such as 2026-01-31T12:00:00Z")]
    BadSince {
        /// The time as given.
        since: String,
    },
    /// `logs --grep` with a pattern that cannot be searched with.
    #[error("logs --grep: {0}")]
    BadPattern(String),
    /// A snapshot name that breaks the label rule.
    #[error("snapshot name {name:?} must be 1 to 32 of A-Z a-z 0-9 . _ -")]
    BadSnapshotName {
        /// The name as given.
        name: String,
    },
    /// No snapshot has this name.
    #[error("no snapshot named {name:?}; make one with `oxidepm save`")]
    NoSnapshot {
        /// The name.
        name: String,
    },
    /// The snapshot holds no app.
    #[error("snapshot {name:?} holds no apps; nothing was changed")]
    EmptySnapshot {
        /// The name.
        name: String,
    },
    /// The route to add is there already.
    #[error("route {} is already there", .route.describe())]
    RouteExists {
        /// The route.
        route: Box<Route>,
    },
    /// The route to remove comes from daemon.toml.
    #[error("route {} is defined in daemon.toml; remove it there and restart the daemon", .route.describe())]
    RouteInConfig {
        /// The route.
        route: Box<Route>,
    },
    /// No runtime route is equal to the one to remove.
    #[error("no runtime route {}; see `oxidepm route list`", .route.describe())]
    NoSuchRoute {
        /// The route.
        route: Box<Route>,
    },
    /// A log file could not be emptied.
    #[error("cannot flush {}: {source}", path.display())]
    Flush {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The answer could not be written as JSON.
    #[error("cannot write the answer: {0}")]
    Answer(#[source] serde_json::Error),
    /// The change was made in memory but a write it caused to state.db
    /// failed and is not on disk yet.
    #[error(
        "{op}: the change was made but could not be saved, so a daemon restart now would \
         undo it; the daemon keeps it in memory and writes it again until it succeeds \
         (`oxidepm ping` says when). {state}"
    )]
    Unsaved {
        /// The operation.
        op: &'static str,
        /// The degraded-state warning: what failed and what to do.
        state: String,
    },
    /// The actor has read more log bytes lately than its share.
    #[error("{actor} has read more logs than its share (daemon.toml logs_read_mib_per_sec); retry in {:.1} s, or ask for fewer lines", wait.as_secs_f64())]
    RateLimited {
        /// Who asked.
        actor: String,
        /// When it may read again.
        wait: std::time::Duration,
    },
    /// `signal`, `reset` or `reload` refused or failed.
    #[error(transparent)]
    Verb(#[from] supervise::verbs::VerbError),
    /// `scale` refused.
    #[error(transparent)]
    Scale(#[from] ScaleError),
    /// `reload-daemon-config` found daemon.toml unusable; nothing changed.
    #[error("{0}; the daemon keeps the configuration it had, nothing was changed")]
    Config(#[source] super::config::ConfigError),
}

impl OpError {
    /// The refusal behind this error, when the gate refused the request.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            OpError::Authorize(AuthorizeError::Refused(r)) => Some(r),
            _ => None,
        }
    }
}

fn body(code: ErrorCode, e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(code, e.to_string())
}

fn select_code(e: &SelectError) -> ErrorCode {
    match e {
        SelectError::Empty { .. } => ErrorCode::BadRequest,
        SelectError::NoApps
        | SelectError::NoTag { .. }
        | SelectError::NoMatch { .. }
        | SelectError::IsTag { .. } => ErrorCode::NotFound,
    }
}

/// Why a `scale` was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// More instances than the bound.
    #[error("{asked} instances asked for; at most {MAX_INSTANCES} are allowed")]
    TooMany {
        /// How many were asked for.
        asked: u32,
    },
    /// Zero instances.
    #[error("scale to 0 would forget the app's spec; use `oxidepm stop {target}` or `oxidepm delete {target}`")]
    Zero {
        /// The group.
        target: String,
    },
    /// A single app, not a group of instances.
    #[error("{app} is one app, not a group of instances: delete it and start it again with `instances = N` in an app file (apps {app}-0 … {app}-N-1), or run more apps under other names")]
    NotAGroup {
        /// The app.
        app: String,
    },
    /// An instance's name is taken by an app outside the group.
    #[error("{name} is the name of an app that is not an instance of {base}; rename or delete it before scaling {base} past it")]
    NameTaken {
        /// The name.
        name: String,
        /// The group.
        base: String,
    },
    /// Agents, adapters and system apps are one of a kind.
    #[error("{app} is of kind {kind}, which has one instance only (each agent has its own lane)")]
    Kind {
        /// The app.
        app: String,
        /// Its kind.
        kind: &'static str,
    },
}

impl From<SelectError> for ErrorBody {
    fn from(e: SelectError) -> ErrorBody {
        body(select_code(&e), e)
    }
}

impl From<StoreError> for ErrorBody {
    fn from(e: StoreError) -> ErrorBody {
        use StoreError as E;
        match e {
            // Writing or reading the file failed: nothing was changed, and
            // the same request succeeds once the file can be written.
            E::Open { .. } | E::Prepare { .. } | E::Sql(_) => ErrorBody::new(
                ErrorCode::Storage,
                format!(
                    "{e}; the change that needed it was not made (`oxidepm status` shows \
                     what was). Free disk space or make state.db writable (permissions, \
                     chattr -i), then try again"
                ),
            ),
            E::ReadOnly { .. }
            | E::Corrupt { .. }
            | E::Restore { .. }
            | E::Rewrite { .. }
            | E::Backup { .. } => body(ErrorCode::Storage, e),
            E::Spec { .. } | E::Encode(_) | E::Snapshot { .. } | E::Route { .. } => {
                body(ErrorCode::Internal, e)
            }
        }
    }
}

impl From<supervise::Error> for ErrorBody {
    fn from(e: supervise::Error) -> ErrorBody {
        use supervise::Error as E;
        let e = match e {
            E::Store(s) => return s.into(),
            other => other,
        };
        let code = match &e {
            E::Select(s) => select_code(s),
            E::Invalid(_) => ErrorCode::BadRequest,
            E::NoSuchApp { .. } => ErrorCode::NotFound,
            E::Spawn(_) => ErrorCode::Spawn,
            E::Cycle(_) | E::Stopping { .. } | E::Dependency { .. } => ErrorCode::Conflict,
            E::Store(_) => ErrorCode::Storage,
            E::Redefined { .. } => ErrorCode::Conflict,
            E::NotStarted { .. } => ErrorCode::Spawn,
        };
        body(code, e)
    }
}

impl From<Refusal> for ErrorBody {
    fn from(e: Refusal) -> ErrorBody {
        let code = match e.kind() {
            RefusalKind::Denied => ErrorCode::PolicyDenied,
            RefusalKind::Protected => ErrorCode::Protected,
        };
        body(code, e)
    }
}

impl From<AuthorizeError> for ErrorBody {
    fn from(e: AuthorizeError) -> ErrorBody {
        match e {
            AuthorizeError::Select(e) => e.into(),
            AuthorizeError::Refused(e) => e.into(),
        }
    }
}

impl From<lanes::Error> for ErrorBody {
    fn from(e: lanes::Error) -> ErrorBody {
        use lanes::Error as E;
        let code = match e {
            E::Supervise(e) => return e.into(),
            E::BadName(_)
            | E::ResponderName(_)
            | E::OwnUser(_)
            | E::BadRoute(_)
            | E::UnknownSource { .. }
            | E::RequestNotJson(_)
            | E::NotARequest(_) => ErrorCode::BadRequest,
            E::NoSuchAgent { .. } => ErrorCode::NotFound,
            E::RouteConflict { .. } | E::NameTaken { .. } | E::ReleaseOwn { .. } => {
                ErrorCode::Conflict
            }
            E::NoRegistry | E::NothingToMigrate => ErrorCode::BadRequest,
            // Everything else is the lanes' machinery failing, not the
            // request: the same request may succeed once it is fixed.
            E::NoRedisServer
            | E::NoProxyProgram
            | E::Dirs(_)
            | E::Passwords(_)
            | E::RedisConf(_)
            | E::ProxyConf(_)
            | E::BridgeConf(_)
            | E::SourceToken { .. }
            | E::NotSetUp(_)
            | E::AdminCredential(_)
            | E::Connect(_)
            | E::Redis { .. }
            | E::RouteAgent { .. }
            | E::DaemonStopping
            | E::DaemonTimeout => ErrorCode::Unavailable,
            E::EntryNotText { .. } => ErrorCode::BadRequest,
            E::OpsTimeout { .. } => ErrorCode::Timeout,
            E::ReplyTooLarge { .. } => ErrorCode::TooLarge,
        };
        body(code, e)
    }
}

impl From<OpError> for ErrorBody {
    fn from(e: OpError) -> ErrorBody {
        use OpError as E;
        let code = match e {
            E::Authorize(e) => return e.into(),
            E::Select(e) => return e.into(),
            E::Supervise(e) => return e.into(),
            E::Store(e) => return e.into(),
            E::Lanes(e) => return e.into(),
            E::NothingToDefine
            | E::KillOffSocket
            | E::SubscribeOffSocket
            | E::BadKind { .. }
            | E::BadSince { .. }
            | E::BadPattern(_)
            | E::BadSnapshotName { .. } => ErrorCode::BadRequest,
            E::Config(_) => ErrorCode::BadRequest,
            E::NoSnapshot { .. } | E::NoSuchRoute { .. } => ErrorCode::NotFound,
            E::EmptySnapshot { .. } | E::RouteExists { .. } | E::RouteInConfig { .. } => {
                ErrorCode::Conflict
            }
            E::Flush { .. } | E::Answer(_) => ErrorCode::Internal,
            E::RateLimited { .. } => ErrorCode::RateLimited,
            E::RefusalsForAdmins { .. } => ErrorCode::PolicyDenied,
            E::SubscribersFull(_) => ErrorCode::Unavailable,
            E::ConfigReloaded => ErrorCode::Unavailable,
            E::Unsaved { .. } => ErrorCode::Storage,
            E::Verb(e) => return verb_body(e),
            E::Scale(_) => ErrorCode::BadRequest,
        };
        body(code, e)
    }
}

fn verb_body(e: supervise::verbs::VerbError) -> ErrorBody {
    use supervise::verbs::VerbError as V;
    let code = match e {
        V::Supervise(e) => return e.into(),
        V::UnknownSignal { .. } => ErrorCode::BadRequest,
        V::NotRunning { .. }
        | V::ReloadBusy { .. }
        | V::ReloadFailed { .. }
        | V::ReloadInterrupted { .. } => ErrorCode::Conflict,
        V::Gone { .. } => ErrorCode::NotFound,
        V::SignalFailed { .. } => ErrorCode::Spawn,
    };
    body(code, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::control::DependencyError;
    use crate::supervise::validate::Invalid;

    fn wire(e: impl Into<ErrorBody>) -> (ErrorCode, String) {
        let b = e.into();
        (b.code, b.message)
    }

    #[test]
    fn selectors() {
        let empty = SelectError::Empty {
            target: "web,".into(),
        };
        assert_eq!(
            wire(empty),
            (ErrorCode::BadRequest, "empty selector in \"web,\"".into())
        );
        let none = supervise::Error::from(SelectError::NoMatch {
            selector: "x".into(),
        });
        assert_eq!(
            wire(none),
            (
                ErrorCode::NotFound,
                "no app named or numbered \"x\"; see `oxidepm status`".into()
            )
        );
    }

    #[test]
    fn supervisor_refusals() {
        let twice = supervise::Error::from(Invalid::DefinedTwice { app: "a".into() });
        assert_eq!(
            wire(twice),
            (
                ErrorCode::BadRequest,
                "app \"a\" is defined twice in one request".into()
            )
        );
        let dep = supervise::Error::Dependency {
            app: "web".into(),
            source: DependencyError::Failed {
                dependency: "init".into(),
                code: 3,
            },
        };
        assert_eq!(
            wire(dep),
            (
                ErrorCode::Conflict,
                "cannot start web: dependency \"init\" exited with code 3".into()
            )
        );
        let gone = supervise::Error::NoSuchApp { id: 4 };
        assert_eq!(wire(gone), (ErrorCode::NotFound, "no app with id 4".into()));
    }

    #[test]
    fn refusals() {
        use crate::access::{policy, Caller, Scope, SocketKind};
        use oxidepm_proto::{Actor, Class, Op, Tier};
        let ai = Caller {
            actor: Actor::new(Class::Ai, "x"),
            socket: SocketKind::Agent,
            tier: Tier::Control,
            scope: Scope::All,
            uid: Some(1001),
            via: None,
        };
        let define = Op::Define {
            apps: vec![],
            update: true,
        };
        let denied = policy::check_tier(&ai, &define, &["web".into()]).unwrap_err();
        assert_eq!(
            wire(denied),
            (
                ErrorCode::PolicyDenied,
                "ai:x may not define web: it needs the manage tier and ai:x has control".into()
            )
        );
        let apps = [("a".to_string(), false), ("db".to_string(), true)];
        let protected = policy::check_protected(&ai, "stop", &apps).unwrap_err();
        assert_eq!(
            wire(AuthorizeError::from(protected)),
            (
                ErrorCode::Protected,
                "ai:x may not stop a, db: db is protected (only a human may stop, restart, \
                 change or delete a protected app); nothing was changed"
                    .into()
            )
        );
    }

    #[test]
    fn lanes() {
        let none = lanes::Error::NoSuchAgent {
            agent: "bob".into(),
        };
        assert_eq!(
            wire(none),
            (
                ErrorCode::NotFound,
                "no agent named \"bob\"; define it first".into()
            )
        );
        let source = lanes::Error::UnknownSource {
            family: "irc".into(),
            sources: vec!["webhook".into(), "email".into()],
        };
        assert_eq!(
            wire(source),
            (
                ErrorCode::BadRequest,
                "\"irc\" is not a source of the lanes (webhook, email); add it to [lanes] \
                 sources in daemon.toml"
                    .into()
            )
        );
        assert_eq!(
            wire(lanes::Error::DaemonStopping),
            (ErrorCode::Unavailable, "the daemon is stopping".into())
        );
    }
}
