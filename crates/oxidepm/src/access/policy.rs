//! Permission tiers: what each request needs, and who may touch protected
//! apps. Pure decisions, so they are tested without processes.

use super::reach::AppFacts;
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
    /// An adapter or an agent asked for apps that its grant does not cover.
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
    /// Some of the apps are protected and a person stopped them.
    StoppedByHuman {
        /// Those apps.
        apps: Vec<String>,
    },
    /// Only a human changes what an app is or whom it runs as.
    HumanOnlyChange {
        /// The app.
        app: String,
        /// What would change: "kind".
        field: &'static str,
    },
    /// A non-human's request would leave an app running as another uid
    /// than its own.
    RunsAsOther {
        /// The app and whom it would run as, as a person reads them (one
        /// string keeps every refusal small).
        what: String,
        /// The caller's own uid, when it is known.
        own: Option<u32>,
    },
    /// The snapshot a save would replace was saved by someone else.
    NotOwnSnapshot {
        /// The snapshot and who saved it, as a person reads them (one
        /// string keeps every refusal small).
        snapshot: String,
    },
    /// A resurrect would define again apps that someone else defined.
    DefinedByOther {
        /// Each app with who defined it.
        apps: Vec<(String, Actor)>,
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
            Reason::Protected { .. } | Reason::StoppedByHuman { .. } => RefusalKind::Protected,
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
            "outside its grant: {} (its grant in daemon.toml, [adapters.<name>] or [agents.<name>], covers {}); nothing was changed",
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
            is_are(apps)
        ),
        Reason::StoppedByHuman { apps } => format!(
            "{} protected and a person stopped {}: only a human may start {} again; nothing was changed",
            is_are(apps),
            if apps.len() == 1 { "it" } else { "them" },
            if apps.len() == 1 { "it" } else { "them" },
        ),
        Reason::HumanOnlyChange { app, field } => format!(
            "only a human may change the {field} of an existing app ({app}); nothing was changed"
        ),
        Reason::RunsAsOther { what, own } => match own {
            Some(own) => format!(
                "{what}, and the apps of a non-human run as its own uid ({own}) only: leave `user` out or name uid {own}; only a human defines or changes an app that runs as another user; nothing was changed"
            ),
            None => format!(
                "{what}, and the uid {actor} runs as is not known, so it defines no app; a human can; nothing was changed"
            ),
        },
        Reason::NotOwnSnapshot { snapshot } => format!(
            "snapshot {snapshot}: only a human or whoever saved it may replace it; save under another name; nothing was changed"
        ),
        Reason::DefinedByOther { apps } => format!(
            "{} no longer defined and only a human or {} definer may define {} again; nothing was changed",
            apps.iter()
                .map(|(n, by)| format!("{n} (defined by {by})"))
                .collect::<Vec<_>>()
                .join(", ")
                + if apps.len() == 1 { " is" } else { " are" },
            if apps.len() == 1 { "its" } else { "their" },
            if apps.len() == 1 { "it" } else { "them" },
        ),
    }
}

fn is_are(apps: &[String]) -> String {
    if apps.len() == 1 {
        format!("{} is", apps[0])
    } else {
        format!("{} are", apps.join(", "))
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
        | Op::Subscribe { .. }
        | Op::Lanes
        | Op::Routes
        | Op::Audit { .. } => Tier::Read,
        Op::Start { .. } | Op::Stop { .. } | Op::Restart { .. } => Tier::Control,
        // What restart does, to the same apps: the same tier.
        Op::Signal { .. } | Op::Reload { .. } | Op::Reset { .. } => Tier::Control,
        // Defines and deletes instances.
        Op::Scale { .. } => Tier::Manage,
        Op::Define { .. }
        | Op::Delete { .. }
        | Op::Flush { .. }
        | Op::Save { .. }
        | Op::Resurrect { .. } => Tier::Manage,
        Op::Kill
        | Op::RouteAdd { .. }
        | Op::RouteRm { .. }
        | Op::LanesRelease { .. }
        | Op::LanesMigrateKeys => Tier::Admin,
        // It can change the tiers, the grants and the protected apps: only
        // who could stop the daemon may make it read them again.
        Op::ReloadDaemonConfig => Tier::Admin,
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

/// Checks that an adapter or an agent touches only apps its grant names
/// (by name or `@tag`). `touched` holds each app's name and tags, as it is
/// and as the request would leave it; the whole request is refused if one
/// app is outside the grant.
pub fn check_scope(
    caller: &Caller,
    op: &'static str,
    touched: &[(String, Vec<String>)],
) -> Result<(), Refusal> {
    let Scope::Only(scope) = &caller.scope else {
        return Ok(());
    };
    let mut outside: Vec<String> = Vec::new();
    for (n, t) in touched {
        if !caller.scope.covers(n, t) && !outside.contains(n) {
            outside.push(n.clone());
        }
    }
    if outside.is_empty() {
        return Ok(());
    }
    let mut all: Vec<String> = Vec::new();
    for (n, _) in touched {
        if !all.contains(n) {
            all.push(n.clone());
        }
    }
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

/// Checks the apps a request would start against who stopped them: a
/// protected app (and every `system` app) that a person stopped is started
/// again by a human only. `all` names every app the request touches.
pub fn check_start(
    caller: &Caller,
    op: &'static str,
    all: &[String],
    started: &[AppFacts],
) -> Result<(), Refusal> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    let held: Vec<String> = started
        .iter()
        .filter(|a| a.protected && a.stopped_by == Some(Class::Human))
        .map(|a| a.name.clone())
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    Err(refuse(
        caller,
        op,
        all,
        Reason::StoppedByHuman { apps: held },
    ))
}

/// Checks a redefinition against what only a human may change: the
/// `kind` of an existing app (whom it runs as is [`check_run_as`]'s).
/// `changes` pairs each existing app with its new spec.
pub fn check_kind(caller: &Caller, changes: &[(&AppFacts, &AppSpec)]) -> Result<(), Refusal> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    for (before, after) in changes {
        if before.kind == after.kind {
            continue;
        }
        let field = "kind";
        return Err(refuse(
            caller,
            "define",
            std::slice::from_ref(&after.name),
            Reason::HumanOnlyChange {
                app: after.name.clone(),
                field,
            },
        ));
    }
    Ok(())
}

/// One app a request defines, changes or copies, with the uid it runs as
/// (or would): `None` when its user is not a user of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The app.
    pub app: String,
    /// Its `user`, as its spec names it (`None`: the daemon's, or for a
    /// new definition the definer's).
    pub user: Option<String>,
    /// The uid it runs as.
    pub uid: Option<u32>,
}

/// Checks that a non-human's request leaves every app it defines, changes
/// or copies running as the non-human's own uid (`caller.uid`): a grant
/// never gives more than who holds it, so root, another agent's uid, the
/// bridge's or a responder's need a human. `runs` holds each app as it is
/// (for a change) and as it would be.
pub fn check_run_as(caller: &Caller, op: &'static str, runs: &[RunAs]) -> Result<(), Refusal> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    let Some(bad) = runs
        .iter()
        .find(|r| caller.uid.is_none() || r.uid != caller.uid)
    else {
        return Ok(());
    };
    let runs_as = match (bad.uid, &bad.user) {
        (None, Some(u)) => format!("user {u:?}, which is no user of this host"),
        (None, None) => "a user that is not known".to_string(),
        (Some(0), _) => "root (uid 0)".to_string(),
        (Some(uid), Some(u)) if u.parse::<u32>().is_err() => format!("user {u:?} (uid {uid})"),
        (Some(uid), _) => format!("uid {uid}"),
    };
    let mut all: Vec<String> = Vec::new();
    for r in runs {
        if !all.contains(&r.app) {
            all.push(r.app.clone());
        }
    }
    Err(refuse(
        caller,
        op,
        &all,
        Reason::RunsAsOther {
            what: format!("{} would run as {runs_as}", bad.app),
            own: caller.uid,
        },
    ))
}

/// Checks that a save replaces no one else's snapshot: a non-human may
/// replace only a snapshot it saved itself. `replaces` is who saved the
/// snapshot of that name (`Some(None)`: unknown), `None` when there is none.
pub fn check_snapshot_owner(
    caller: &Caller,
    name: &str,
    replaces: Option<Option<&Actor>>,
    all: &[String],
) -> Result<(), Refusal> {
    let Some(saved_by) = replaces else {
        return Ok(());
    };
    if caller.actor.class == Class::Human || saved_by == Some(&caller.actor) {
        return Ok(());
    }
    Err(refuse(
        caller,
        "save",
        all,
        Reason::NotOwnSnapshot {
            snapshot: format!(
                "{name:?} was saved by {}",
                saved_by.map_or("an earlier oxidepm".into(), Actor::to_string)
            ),
        },
    ))
}

/// Checks the apps a resurrect defines again: a non-human brings back only
/// apps it defined itself (a re-created app keeps its definer, and with it
/// the trust of its process tree), and nothing it could not define.
pub fn check_recreate(caller: &Caller, recreated: &[(AppSpec, Actor)]) -> Result<(), Refusal> {
    if caller.actor.class == Class::Human {
        return Ok(());
    }
    let others: Vec<(String, Actor)> = recreated
        .iter()
        .filter(|(_, by)| *by != caller.actor)
        .map(|(s, by)| (s.name.clone(), by.clone()))
        .collect();
    if !others.is_empty() {
        let names: Vec<String> = others.iter().map(|(n, _)| n.clone()).collect();
        return Err(refuse(
            caller,
            "resurrect",
            &names,
            Reason::DefinedByOther { apps: others },
        ));
    }
    let specs: Vec<AppSpec> = recreated.iter().map(|(s, _)| s.clone()).collect();
    check_definition(caller, &specs)
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
            AppKind::Responder => Some("a responder"),
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
            uid: (class != Class::Human).then_some(1001),
            via: None,
        }
    }

    fn run(app: &str, user: Option<&str>, uid: Option<u32>) -> RunAs {
        RunAs {
            app: app.into(),
            user: user.map(Into::into),
            uid,
        }
    }

    #[test]
    fn a_non_human_s_apps_run_as_itself_only() {
        let ai = caller(Class::Ai, Tier::Manage);
        let own = [
            run("bot", None, Some(1001)),
            run("bot2", Some("alice"), Some(1001)),
        ];
        assert!(check_run_as(&ai, "define", &own).is_ok());
        for (other, says) in [
            (run("web", None, Some(0)), "root (uid 0)"),
            (
                run("web", Some("bob"), Some(1002)),
                "user \"bob\" (uid 1002)",
            ),
            (run("web", Some("1002"), Some(1002)), "uid 1002"),
            (
                run("web", Some("nobody-here"), None),
                "no user of this host",
            ),
        ] {
            let runs = [own[0].clone(), other];
            let e = check_run_as(&ai, "define", &runs).unwrap_err();
            assert_eq!(e.kind(), RefusalKind::Denied);
            assert_eq!(e.apps, ["bot", "web"]);
            let m = e.to_string();
            assert!(m.contains(says) && m.contains("own uid (1001)"), "{m}");
        }
        // Whoever is not known to be a uid defines nothing.
        let mut unknown = caller(Class::Adapter, Tier::Manage);
        unknown.uid = None;
        let e = check_run_as(&unknown, "define", &own).unwrap_err();
        assert!(e.to_string().contains("is not known"), "{e}");
        // A person gives an app any user.
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_run_as(&human, "define", &[run("web", None, Some(0))]).is_ok());
    }

    #[test]
    fn tiers() {
        let ai = caller(Class::Ai, Tier::Control);
        let stop = Op::Stop { target: "a".into() };
        assert!(check_tier(&ai, &stop, &[]).is_ok());
        let def = Op::Define {
            apps: vec![],
            update: true,
        };
        let e = check_tier(&ai, &def, &["web".into()]).unwrap_err();
        assert_eq!(e.kind(), RefusalKind::Denied);
        let message = e.to_string();
        assert!(message.contains("ai:x") && message.contains("define") && message.contains("web"));
        assert!(check_tier(&ai, &Op::Kill, &[]).is_err());
        let human = caller(Class::Human, Tier::Admin);
        assert!(check_tier(&human, &Op::Kill, &[]).is_ok());
        // The daily verbs: what restart needs, and scale what define needs.
        let target = || "web".to_string();
        for op in [
            Op::Reload { target: target() },
            Op::Reset { target: target() },
            Op::Signal {
                target: target(),
                signal: oxidepm_proto::SignalName::Name("USR1".into()),
            },
        ] {
            assert_eq!(required_tier(&op), Tier::Control, "{}", op.name());
            assert!(check_tier(&ai, &op, &[]).is_ok());
        }
        let scale = Op::Scale {
            target: target(),
            instances: 3,
        };
        assert_eq!(required_tier(&scale), Tier::Manage);
        assert!(check_tier(&ai, &scale, &[]).is_err());
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
    fn what_only_a_human_may_do_again() {
        let ai = caller(Class::Ai, Tier::Manage);
        let human = caller(Class::Human, Tier::Admin);
        let mut db = crate::access::reach::tests::app("db", &[]);
        db.protected = true;
        db.stopped_by = Some(Class::Human);
        let all = vec!["db".to_string()];
        let e = check_start(&ai, "start", &all, std::slice::from_ref(&db)).unwrap_err();
        assert_eq!(e.kind(), RefusalKind::Protected);
        assert!(e.to_string().contains("a person stopped it"), "{e}");
        assert!(check_start(&human, "start", &all, std::slice::from_ref(&db)).is_ok());
        let mut spec = AppSpec::new("db", "x", vec![]);
        spec.kind = AppKind::Agent;
        let e = check_kind(&ai, &[(&db, &spec)]).unwrap_err();
        assert!(e.to_string().contains("kind"), "{e}");
        assert!(check_kind(&human, &[(&db, &spec)]).is_ok());
        spec.kind = AppKind::App;
        spec.user = Some("root".into());
        assert!(
            check_kind(&ai, &[(&db, &spec)]).is_ok(),
            "the user is check_run_as's"
        );
        let someone = Actor::new(Class::Human, "cli");
        assert!(check_snapshot_owner(&ai, "default", Some(Some(&someone)), &all).is_err());
        assert!(check_snapshot_owner(&ai, "default", Some(None), &all).is_err());
        assert!(check_snapshot_owner(&ai, "default", Some(Some(&ai.actor)), &all).is_ok());
        assert!(check_snapshot_owner(&ai, "default", None, &all).is_ok());
        assert!(check_snapshot_owner(&human, "default", Some(None), &all).is_ok());
        let e = check_recreate(&ai, &[(spec.clone(), someone)]).unwrap_err();
        assert!(e.to_string().contains("defined by human:cli"), "{e}");
        assert!(check_recreate(&ai, &[(spec, ai.actor.clone())]).is_ok());
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
