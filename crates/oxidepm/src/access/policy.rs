//! Permission tiers: what each request needs, and who may touch protected
//! apps. Pure decisions, so they are tested without processes.

use super::{Caller, Scope};
use oxidepm_proto::{AppKind, AppSpec, Class, ErrorBody, ErrorCode, Op, Tier};

/// The tier a request needs.
pub fn required_tier(op: &Op) -> Tier {
    match op {
        Op::Ping
        | Op::Whoami
        | Op::Status
        | Op::Show { .. }
        | Op::Logs { .. }
        | Op::Events { .. }
        | Op::Lanes
        | Op::Routes
        | Op::Audit { .. } => Tier::Read,
        Op::Start { .. } | Op::Stop { .. } | Op::Restart { .. } => Tier::Control,
        Op::Define { .. }
        | Op::Delete { .. }
        | Op::Flush { .. }
        | Op::Save { .. }
        | Op::Resurrect { .. } => Tier::Manage,
        Op::Kill | Op::RouteAdd { .. } | Op::RouteRm { .. } => Tier::Admin,
    }
}

/// Whether a request only reads (logged at debug level, not audited).
pub fn is_read(op: &Op) -> bool {
    required_tier(op) == Tier::Read
}

fn denied(caller: &Caller, op: &str, apps: &[String], why: String) -> ErrorBody {
    let on = if apps.is_empty() {
        String::new()
    } else {
        format!(" {}", apps.join(", "))
    };
    ErrorBody::new(
        ErrorCode::PolicyDenied,
        format!("{} may not {op}{on}: {why}", caller.actor),
    )
}

/// Checks the caller's tier against the request.
pub fn check_tier(caller: &Caller, op: &Op, apps: &[String]) -> Result<(), ErrorBody> {
    let need = required_tier(op);
    if caller.tier < need {
        return Err(denied(
            caller,
            op.name(),
            apps,
            format!(
                "it needs the {need} tier and {} has {}",
                caller.actor, caller.tier
            ),
        ));
    }
    Ok(())
}

/// Checks a request that changes or runs apps against their protection:
/// a protected app (and every `system` app) is stopped, restarted, changed
/// or deleted by a human only. `touched` are the apps the request changes
/// with their protection. The whole request is refused if any app is.
pub fn check_protected(
    caller: &Caller,
    op: &str,
    touched: &[(String, bool)],
) -> Result<(), ErrorBody> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    let protected: Vec<&str> = touched
        .iter()
        .filter(|(_, p)| *p)
        .map(|(n, _)| n.as_str())
        .collect();
    if protected.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = touched.iter().map(|(n, _)| n.clone()).collect();
    Err(ErrorBody::new(
        ErrorCode::Protected,
        format!(
            "{} may not {op} {}: {} protected (only a human may stop, restart, change or delete a protected app); nothing was changed",
            caller.actor,
            all.join(", "),
            if protected.len() == 1 {
                format!("{} is", protected[0])
            } else {
                format!("{} are", protected.join(", "))
            }
        ),
    ))
}

/// Checks that an adapter touches only apps its grant names (by name or
/// `@tag`). `touched` holds each app's name and tags; the whole request is
/// refused if one app is outside the grant.
pub fn check_scope(
    caller: &Caller,
    op: &str,
    touched: &[(String, Vec<String>)],
) -> Result<(), ErrorBody> {
    let Scope::Only(scope) = &caller.scope else {
        return Ok(());
    };
    let allowed = |name: &str, tags: &[String]| {
        scope.iter().any(|s| match s.strip_prefix('@') {
            Some(tag) => tags.iter().any(|t| t == tag),
            None => s == name,
        })
    };
    let outside: Vec<String> = touched
        .iter()
        .filter(|(n, t)| !allowed(n, t))
        .map(|(n, _)| n.clone())
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = touched.iter().map(|(n, _)| n.clone()).collect();
    Err(denied(
        caller,
        op,
        &all,
        format!(
            "outside its grant: {} (the grant in daemon.toml covers {}); nothing was changed",
            outside.join(", "),
            if scope.is_empty() {
                "no apps".to_string()
            } else {
                scope.join(", ")
            }
        ),
    ))
}

/// Checks what a definition asks for: only a human defines agents,
/// adapters, protected apps; nobody defines `system` apps.
pub fn check_definition(caller: &Caller, specs: &[AppSpec]) -> Result<(), ErrorBody> {
    for s in specs {
        if s.kind == AppKind::System {
            return Err(denied(
                caller,
                "define",
                std::slice::from_ref(&s.name),
                "system apps are created by the daemon only".into(),
            ));
        }
        let special = match s.kind {
            AppKind::Agent => Some("an agent"),
            AppKind::Adapter => Some("an adapter"),
            _ if s.protected => Some("a protected app"),
            _ => None,
        };
        if let Some(what) = special {
            if caller.actor.class != Class::Human || caller.tier < Tier::Admin {
                return Err(denied(
                    caller,
                    "define",
                    std::slice::from_ref(&s.name),
                    format!("defining {what} needs a human with the admin tier"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::SocketKind;
    use oxidepm_proto::Actor;

    fn caller(class: Class, tier: Tier) -> Caller {
        Caller {
            actor: Actor::new(class, "x"),
            socket: SocketKind::Daemon,
            tier,
            scope: Scope::All,
        }
    }

    #[test]
    fn tiers() {
        let ai = caller(Class::Ai, Tier::Control);
        let stop = Op::Stop { target: "a".into() };
        assert!(check_tier(&ai, &stop, &[]).is_ok());
        let def = Op::Define { apps: vec![] };
        let e = check_tier(&ai, &def, &["web".into()]).unwrap_err();
        assert_eq!(e.code, ErrorCode::PolicyDenied);
        assert!(
            e.message.contains("ai:x") && e.message.contains("define") && e.message.contains("web")
        );
        assert!(check_tier(&ai, &Op::Kill, &[]).is_err());
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_tier(&human, &Op::Kill, &[]).is_ok());
    }

    #[test]
    fn protected_refused_whole() {
        let ai = caller(Class::Ai, Tier::Control);
        let apps = vec![("a".to_string(), false), ("db".to_string(), true)];
        let e = check_protected(&ai, "stop", &apps).unwrap_err();
        assert_eq!(e.code, ErrorCode::Protected);
        assert!(e.message.contains("db is protected"));
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_protected(&human, "stop", &apps).is_ok());
    }

    #[test]
    fn adapter_scope() {
        let mut c = caller(Class::Adapter, Tier::Control);
        c.scope = Scope::Only(vec!["web".into(), "@chat".into()]);
        let ok = vec![
            ("web".to_string(), vec![]),
            ("bot".to_string(), vec!["chat".to_string()]),
        ];
        assert!(check_scope(&c, "stop", &ok).is_ok());
        let bad = vec![("web".to_string(), vec![]), ("db".to_string(), vec![])];
        let e = check_scope(&c, "stop", &bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::PolicyDenied);
        assert!(e.message.contains("db") && e.message.contains("adapter:x"));
    }

    #[test]
    fn definitions() {
        let mut s = AppSpec::new("a", "x", vec![]);
        let ai = caller(Class::Ai, Tier::Admin);
        assert!(check_definition(&ai, std::slice::from_ref(&s)).is_ok());
        s.protected = true;
        assert!(check_definition(&ai, std::slice::from_ref(&s)).is_err());
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_definition(&human, std::slice::from_ref(&s)).is_ok());
        s.kind = AppKind::System;
        assert!(check_definition(&human, std::slice::from_ref(&s)).is_err());
    }
}
