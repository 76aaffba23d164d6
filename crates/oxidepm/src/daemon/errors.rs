//! The one place where the errors of the daemon's layers become the wire's
//! [`ErrorBody`]: each error keeps its message, and its kind decides the
//! stable code a client sees.

use crate::access::gate::AuthorizeError;
use crate::access::policy::{Refusal, RefusalKind};
use crate::store::StoreError;
use crate::supervise::{self, SelectError};
use oxidepm_proto::{ErrorBody, ErrorCode};

fn body(code: ErrorCode, e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(code, e.to_string())
}

fn select_code(e: &SelectError) -> ErrorCode {
    match e {
        SelectError::Empty { .. } => ErrorCode::BadRequest,
        SelectError::NoApps | SelectError::NoTag { .. } | SelectError::NoMatch { .. } => {
            ErrorCode::NotFound
        }
    }
}

impl From<SelectError> for ErrorBody {
    fn from(e: SelectError) -> ErrorBody {
        body(select_code(&e), e)
    }
}

impl From<StoreError> for ErrorBody {
    fn from(e: StoreError) -> ErrorBody {
        body(ErrorCode::Internal, e)
    }
}

impl From<supervise::Error> for ErrorBody {
    fn from(e: supervise::Error) -> ErrorBody {
        use supervise::Error as E;
        let code = match &e {
            E::Select(s) => select_code(s),
            E::Invalid(_) => ErrorCode::BadRequest,
            E::NoSuchApp { .. } => ErrorCode::NotFound,
            E::Spawn(_) => ErrorCode::Spawn,
            E::Cycle(_) | E::Stopping { .. } | E::Dependency { .. } => ErrorCode::Conflict,
            E::Store(_) => ErrorCode::Internal,
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
        };
        let define = Op::Define { apps: vec![] };
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
}
