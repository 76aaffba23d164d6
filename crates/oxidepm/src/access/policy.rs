//! Permission tiers: what each request needs, and who may touch protected
//! apps. Pure decisions, so they are tested without processes.

use super::{Caller, Scope};
use oxidepm_proto::{Actor, AppKind, AppSpec, Class, Op, Tier};

/// Whether a refusal is about the actor's rights or about an app's
/// protection (clients see `E_POLICY_DENIED` or `E_PROTECTED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The actor's tier or grant does not allow the request.
    Denied,
    /// The request would change a protected app, and the actor is not a human.
    Protected,
}

/// Why the rules refuse a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The request needs a higher tier than the actor has.
    Tier {
        /// The tier the request needs.
        need: Tier,
        /// The actor's tier.
        has: Tier,
    },
    /// An adapter asked for apps that its grant does not cover.
    OutsideGrant {
        /// The apps outside the grant.
        outside: Vec<String>,
        /// What the grant covers (names and `@tags`).
        grant: Vec<String>,
    },
    /// Only the daemon creates `system` apps.
    SystemApp,
    /// Defining an agent, an adapter or a protected app needs a human admin.
    NeedsHumanAdmin {
        /// What was being defined: "an agent", "an adapter", "a protected app".
        what: &'static str,
    },
    /// Some of the apps are protected.
    Protected {
        /// The protected ones among the request's apps.
        apps: Vec<String>,
    },
}

/// A request the rules refuse, with what a person needs to act: who asked,
/// what they asked, the apps it touched, and why. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{actor} may not {request}{}: {}", on(.apps), explain(.reason, .actor))]
pub struct Refusal {
    /// Who asked.
    pub actor: Actor,
    /// The request, as its operation's name (`define`, `stop`, `change`, …).
    pub request: &'static str,
    /// Every app the request touched (a request is refused whole).
    pub apps: Vec<String>,
    /// Why it is refused.
    pub reason: Reason,
}

impl Refusal {
    /// Whether it is a denial of the actor's rights or a protected app.
    pub fn kind(&self) -> RefusalKind {
        match self.reason {
            Reason::Protected { .. } => RefusalKind::Protected,
            _ => RefusalKind::Denied,
        }
    }
}

fn on(apps: &[String]) -> String {
    if apps.is_empty() {
        String::new()
    } else {
        format!(" {}", apps.join(", "))
    }
}

fn explain(reason: &Reason, actor: &Actor) -> String {
    match reason {
        Reason::Tier { need, has } => format!("it needs the {need} tier and {actor} has {has}"),
        Reason::OutsideGrant { outside, grant } => format!(
            "outside its grant: {} (the grant in daemon.toml covers {}); nothing was changed",
            outside.join(", "),
            if grant.is_empty() {
                "no apps".to_string()
            } else {
                grant.join(", ")
            }
        ),
        Reason::SystemApp => "system apps are created by the daemon only".into(),
        Reason::NeedsHumanAdmin { what } => {
            format!("defining {what} needs a human with the admin tier")
        }
        Reason::Protected { apps } => format!(
            "{} protected (only a human may stop, restart, change or delete a protected app); nothing was changed",
            if apps.len() == 1 {
                format!("{} is", apps[0])
            } else {
                format!("{} are", apps.join(", "))
            }
        ),
    }
}

fn refuse(caller: &Caller, request: &'static str, apps: &[String], reason: Reason) -> Refusal {
    Refusal {
        actor: caller.actor.clone(),
        request,
        apps: apps.to_vec(),
        reason,
    }
}

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

/// Checks the caller's tier against the request.
pub fn check_tier(caller: &Caller, op: &Op, apps: &[String]) -> Result<(), Refusal> {
    let need = required_tier(op);
    if caller.tier < need {
        return Err(refuse(
            caller,
            op.name(),
            apps,
            Reason::Tier {
                need,
                has: caller.tier,
            },
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
    op: &'static str,
    touched: &[(String, bool)],
) -> Result<(), Refusal> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    let protected: Vec<String> = touched
        .iter()
        .filter(|(_, p)| *p)
        .map(|(n, _)| n.clone())
        .collect();
    if protected.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = touched.iter().map(|(n, _)| n.clone()).collect();
    Err(refuse(
        caller,
        op,
        &all,
        Reason::Protected { apps: protected },
    ))
}

/// Checks that an adapter touches only apps its grant names (by name or
/// `@tag`). `touched` holds each app's name and tags; the whole request is
/// refused if one app is outside the grant.
pub fn check_scope(
    caller: &Caller,
    op: &'static str,
    touched: &[(String, Vec<String>)],
) -> Result<(), Refusal> {
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
    Err(refuse(
        caller,
        op,
        &all,
        Reason::OutsideGrant {
            outside,
            grant: scope.clone(),
        },
    ))
}

/// Checks what a definition asks for: only a human defines agents,
/// adapters, protected apps; nobody defines `system` apps.
pub fn check_definition(caller: &Caller, specs: &[AppSpec]) -> Result<(), Refusal> {
    for s in specs {
        if s.kind == AppKind::System {
            return Err(refuse(
                caller,
                "define",
                std::slice::from_ref(&s.name),
                Reason::SystemApp,
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
                return Err(refuse(
                    caller,
                    "define",
                    std::slice::from_ref(&s.name),
                    Reason::NeedsHumanAdmin { what },
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
        assert_eq!(e.kind(), RefusalKind::Denied);
        let message = e.to_string();
        assert!(message.contains("ai:x") && message.contains("define") && message.contains("web"));
        assert!(check_tier(&ai, &Op::Kill, &[]).is_err());
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_tier(&human, &Op::Kill, &[]).is_ok());
    }

    #[test]
    fn protected_refused_whole() {
        let ai = caller(Class::Ai, Tier::Control);
        let apps = vec![("a".to_string(), false), ("db".to_string(), true)];
        let e = check_protected(&ai, "stop", &apps).unwrap_err();
        assert_eq!(e.kind(), RefusalKind::Protected);
        assert!(e.to_string().contains("db is protected"));
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
        assert_eq!(e.kind(), RefusalKind::Denied);
        let message = e.to_string();
        assert!(message.contains("db") && message.contains("adapter:x"));
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
