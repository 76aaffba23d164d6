//! What a request reaches: every app it reads, changes or starts, as the
//! apps are before it and as it would leave them. The gate weighs all of
//! them, so that no path (a redefinition, a dependency brought along, a
//! snapshot, a request without a selector) acts on an app nobody checked.

use super::Scope;
use crate::store::DEFAULT_SNAPSHOT;
use crate::supervise::SelectError;
use oxidepm_proto::{Actor, AppKind, AppSpec, Class, Op};

/// What the gate weighs about one app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFacts {
    /// The app's name.
    pub name: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Whether only a human may stop, restart, change or delete it.
    pub protected: bool,
    /// Its kind.
    pub kind: AppKind,
    /// The user it runs as, when its spec names one.
    pub user: Option<String>,
    /// Class of whoever stopped it by request, until it starts again.
    pub stopped_by: Option<Class>,
    /// The apps it depends on.
    pub depends_on: Vec<String>,
    /// Whether a process of it is (or may be) alive.
    pub running: bool,
    /// Whether starting an app that depends on it starts it too.
    pub idle: bool,
    /// Whether it is in the running set (what `save` records).
    pub desired: bool,
}

/// A saved snapshot, as the gate weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFacts {
    /// Who saved it; `None` when that is not known (an older snapshot).
    pub saved_by: Option<Actor>,
    /// Its apps with who defined them (empty when it cannot be read: the
    /// operation then fails with the store's error).
    pub apps: Vec<(AppSpec, Actor)>,
}

/// What authorizing a request needs to know of the daemon's apps.
pub trait AppIndex {
    /// The apps a selector names, in id order, or why it names none.
    fn select(&self, target: &str) -> Result<Vec<AppFacts>, SelectError>;
    /// The app named `name`, if one is defined.
    fn named(&self, name: &str) -> Option<AppFacts>;
    /// Every app, in id order.
    fn all(&self) -> Vec<AppFacts>;
    /// The snapshot named `name`, if there is one.
    fn snapshot(&self, name: &str) -> Option<SnapshotFacts>;
    /// The uid an app whose spec names `user` runs as (the daemon's when
    /// it names none); `None` when it is no user of this host.
    fn uid_of(&self, user: Option<&str>) -> Option<u32>;
}

/// Everything a request reaches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Existing apps it reads or changes, as they are now.
    pub before: Vec<AppFacts>,
    /// Apps as it leaves them: name and tags of each spec a `define`
    /// writes and of each app a `resurrect` defines again.
    pub after: Vec<(String, Vec<String>)>,
    /// Existing apps it starts: those it names, and what they depend on
    /// that is not running (a start brings those along).
    pub started: Vec<AppFacts>,
    /// For a request without a selector from a caller with a grant: the
    /// apps it is narrowed to ("the apps in my grant").
    pub only: Option<Vec<String>>,
    /// Apps a `resurrect` defines again, with who defined them.
    pub recreated: Vec<(AppSpec, Actor)>,
    /// The snapshot a `save` replaces, when there is one.
    pub replaces: Option<SnapshotFacts>,
}

impl Plan {
    /// Every app it reaches, by name, each once, in the order found.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let all = self
            .before
            .iter()
            .map(|a| &a.name)
            .chain(self.after.iter().map(|(n, _)| n))
            .chain(self.started.iter().map(|a| &a.name));
        for n in all {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Every app it reaches with its tags, before and after, for the
    /// grant: an app must be inside it as it is and as it would be.
    pub fn scoped(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        let all = self
            .before
            .iter()
            .chain(self.started.iter())
            .map(|a| (a.name.clone(), a.tags.clone()))
            .chain(self.after.iter().cloned());
        for entry in all {
            if !out.contains(&entry) {
                out.push(entry);
            }
        }
        out
    }
}

/// What `op` reaches, with `scope` narrowing the requests that name no app.
pub fn plan<A: AppIndex + ?Sized>(apps: &A, scope: &Scope, op: &Op) -> Result<Plan, SelectError> {
    let mut p = Plan::default();
    match op {
        // No target: every app inside the caller's scope, as for events.
        Op::Logs { target, .. } if target.is_empty() => narrow(&mut p, scope, apps.all()),
        Op::Show { target }
        | Op::Stop { target }
        | Op::Delete { target }
        | Op::Logs { target, .. }
        | Op::Events {
            target: Some(target),
            ..
        }
        | Op::Subscribe {
            target: Some(target),
            ..
        }
        | Op::Flush {
            target: Some(target),
        } => p.before = apps.select(target)?,
        Op::Signal { target, .. } | Op::Reset { target } => p.before = apps.select(target)?,
        Op::Scale { target, instances } => {
            p.before = apps.select(target)?;
            let base = target.trim_start_matches('@');
            // The instances a scale up defines, as the lowest-numbered one
            // (the copy the daemon makes) is.
            let number = |name: &str| -> Option<u32> {
                name.strip_prefix(base)?.strip_prefix('-')?.parse().ok()
            };
            let tags = p
                .before
                .iter()
                .filter_map(|a| number(&a.name).map(|i| (i, a)))
                .min_by_key(|(i, _)| *i)
                .map(|(_, a)| a.tags.clone())
                .unwrap_or_default();
            for i in 0..(*instances).min(oxidepm_proto::MAX_INSTANCES) {
                let name = oxidepm_proto::instance_name(base, i);
                if !p.before.iter().any(|a| a.name == name) {
                    p.after.push((name, tags.clone()));
                }
            }
        }
        Op::Start { target } | Op::Restart { target } | Op::Reload { target } => {
            p.before = apps.select(target)?;
            let roots: Vec<String> = p.before.iter().map(|a| a.name.clone()).collect();
            p.started = starts(apps, &roots, &[]);
        }
        Op::Flush { target: None } => narrow(&mut p, scope, apps.all()),
        Op::Events { target: None, .. } | Op::Subscribe { target: None, .. } => {
            // Every app's events for a caller without a grant: nothing to
            // weigh, and nothing worth naming in the audit.
            if matches!(scope, Scope::Only(_)) {
                narrow(&mut p, scope, apps.all());
            }
        }
        Op::Save { name } => {
            let running = apps.all().into_iter().filter(|a| a.desired).collect();
            narrow(&mut p, scope, running);
            p.replaces = apps.snapshot(name.as_deref().unwrap_or(DEFAULT_SNAPSHOT));
        }
        Op::Resurrect { name } => resurrect(&mut p, apps, scope, name.as_deref()),
        Op::Define { apps: specs, .. } => {
            let mut roots = Vec::new();
            for spec in specs {
                let existing = apps.named(&spec.name);
                // A running app whose spec changes is restarted.
                if spec.autostart || existing.as_ref().is_some_and(|a| a.running) {
                    roots.push(spec.name.clone());
                }
                p.before.extend(existing);
                p.after.push((spec.name.clone(), spec.tags.clone()));
            }
            p.started = starts(apps, &roots, specs);
        }
        _ => {}
    }
    Ok(p)
}

/// `before` = `all` inside `scope`; a grant narrows the request to them.
fn narrow(p: &mut Plan, scope: &Scope, all: Vec<AppFacts>) {
    p.before = all
        .into_iter()
        .filter(|a| scope.covers(&a.name, &a.tags))
        .collect();
    if matches!(scope, Scope::Only(_)) {
        p.only = Some(p.before.iter().map(|a| a.name.clone()).collect());
    }
}

/// A snapshot's apps inside `scope` (as they are when they exist, as
/// saved when they are gone): those that exist are started, the others
/// defined again and started.
fn resurrect<A: AppIndex + ?Sized>(p: &mut Plan, apps: &A, scope: &Scope, name: Option<&str>) {
    let Some(snap) = apps.snapshot(name.unwrap_or(DEFAULT_SNAPSHOT)) else {
        return;
    };
    let mut chosen = Vec::new();
    for (spec, defined_by) in snap.apps {
        let existing = apps.named(&spec.name);
        let covered = match &existing {
            Some(a) => scope.covers(&a.name, &a.tags),
            None => scope.covers(&spec.name, &spec.tags),
        };
        if !covered {
            continue;
        }
        chosen.push(spec.name.clone());
        match existing {
            Some(a) => p.before.push(a),
            None => {
                p.after.push((spec.name.clone(), spec.tags.clone()));
                p.recreated.push((spec, defined_by));
            }
        }
    }
    let specs: Vec<AppSpec> = p.recreated.iter().map(|(s, _)| s.clone()).collect();
    p.started = starts(apps, &chosen, &specs);
    if matches!(scope, Scope::Only(_)) {
        p.only = Some(chosen);
    }
}

/// The existing apps that starting `roots` starts: the roots, and,
/// transitively, the dependencies that are idle (as `control::launch`
/// brings them along). `specs` are definitions of the same request, whose
/// dependencies are the ones that count.
fn starts<A: AppIndex + ?Sized>(apps: &A, roots: &[String], specs: &[AppSpec]) -> Vec<AppFacts> {
    let spec = |name: &str| specs.iter().find(|s| s.name == name);
    let mut seen: Vec<String> = Vec::new();
    let mut queue: Vec<String> = roots.to_vec();
    let mut out = Vec::new();
    while let Some(name) = queue.pop() {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let facts = apps.named(&name);
        let deps: Vec<String> = match spec(&name) {
            Some(s) => s.depends_on.iter().map(|d| d.app.clone()).collect(),
            None => facts
                .as_ref()
                .map(|a| a.depends_on.clone())
                .unwrap_or_default(),
        };
        out.extend(facts);
        for d in deps {
            let comes_along = spec(&d).is_some() || apps.named(&d).is_some_and(|a| a.idle);
            if comes_along {
                queue.push(d);
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use oxidepm_proto::Dependency;

    /// Apps in memory, and one snapshot named `default`.
    pub(crate) struct Apps(pub Vec<AppFacts>, pub Option<SnapshotFacts>);

    impl AppIndex for Apps {
        fn select(&self, target: &str) -> Result<Vec<AppFacts>, SelectError> {
            let found: Vec<AppFacts> = self
                .0
                .iter()
                .filter(|a| match target.strip_prefix('@') {
                    Some(tag) => a.tags.iter().any(|t| t == tag),
                    None => target == "all" || a.name == target,
                })
                .cloned()
                .collect();
            if found.is_empty() {
                return Err(SelectError::NoMatch {
                    selector: target.into(),
                });
            }
            Ok(found)
        }
        fn named(&self, name: &str) -> Option<AppFacts> {
            self.0.iter().find(|a| a.name == name).cloned()
        }
        fn all(&self) -> Vec<AppFacts> {
            self.0.clone()
        }
        fn snapshot(&self, name: &str) -> Option<SnapshotFacts> {
            (name == DEFAULT_SNAPSHOT).then(|| self.1.clone()).flatten()
        }
        /// The daemon is root; `alice` is 1001, `bob` 1002, `bridge` 999.
        fn uid_of(&self, user: Option<&str>) -> Option<u32> {
            match user {
                None | Some("root") => Some(0),
                Some("alice") => Some(1001),
                Some("bob") => Some(1002),
                Some("bridge") => Some(999),
                Some(u) => u.parse().ok(),
            }
        }
    }

    /// A running, unprotected app with `tags`.
    pub(crate) fn app(name: &str, tags: &[&str]) -> AppFacts {
        AppFacts {
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            protected: false,
            kind: AppKind::App,
            user: None,
            stopped_by: None,
            depends_on: vec![],
            running: true,
            idle: false,
            desired: true,
        }
    }

    fn stopped(mut a: AppFacts) -> AppFacts {
        a.running = false;
        a.idle = true;
        a.desired = false;
        a
    }

    fn names(p: &Plan) -> Vec<String> {
        let mut n = p.names();
        n.sort();
        n
    }

    #[test]
    fn a_start_reaches_the_idle_dependencies_it_brings_along() {
        let mut web = stopped(app("web", &["bots"]));
        web.depends_on = vec!["db".into(), "cache".into()];
        let mut db = stopped(app("db", &[]));
        db.depends_on = vec!["disk".into()];
        let apps = Apps(
            vec![web, db, app("cache", &[]), stopped(app("disk", &[]))],
            None,
        );
        let op = Op::Start {
            target: "web".into(),
        };
        let p = plan(&apps, &Scope::All, &op).unwrap();
        assert_eq!(names(&p), ["db", "disk", "web"], "cache is running");
        assert!(p.scoped().iter().any(|(n, _)| n == "disk"));
    }

    #[test]
    fn a_redefinition_reaches_the_app_before_and_after() {
        let apps = Apps(vec![app("web", &[])], None);
        let mut spec = AppSpec::new("web", "evil", vec![]);
        spec.tags = vec!["bots".into()];
        spec.depends_on = vec![Dependency {
            app: "db".into(),
            condition: Default::default(),
        }];
        let op = Op::Define {
            apps: vec![spec],
            update: true,
        };
        let p = plan(&apps, &Scope::All, &op).unwrap();
        assert_eq!(p.before[0].tags, Vec::<String>::new());
        assert_eq!(p.after, [("web".to_string(), vec!["bots".to_string()])]);
        let scoped = p.scoped();
        assert!(scoped.contains(&("web".into(), vec![])));
        assert!(scoped.contains(&("web".into(), vec!["bots".into()])));
    }

    #[test]
    fn requests_without_a_selector_are_narrowed_to_a_grant() {
        let mut idle = stopped(app("old", &["bots"]));
        idle.desired = false;
        let apps = Apps(vec![app("web", &[]), app("bot", &["bots"]), idle], None);
        let grant = Scope::Only(vec!["@bots".into()]);
        for op in [
            Op::Flush { target: None },
            Op::Events {
                target: None,
                limit: 5,
                since: None,
            },
        ] {
            let p = plan(&apps, &grant, &op).unwrap();
            assert_eq!(p.only, Some(vec!["bot".to_string(), "old".to_string()]));
        }
        let p = plan(&apps, &grant, &Op::Save { name: None }).unwrap();
        assert_eq!(p.only, Some(vec!["bot".to_string()]), "running set only");
        let p = plan(&apps, &Scope::All, &Op::Flush { target: None }).unwrap();
        assert_eq!((p.only, p.before.len()), (None, 3));
    }

    #[test]
    fn a_resurrect_reaches_the_snapshot_apps_inside_the_grant() {
        let human = Actor::new(Class::Human, "cli");
        let mut gone = AppSpec::new("gone", "x", vec![]);
        gone.tags = vec!["bots".into()];
        let snap = SnapshotFacts {
            saved_by: Some(human.clone()),
            apps: vec![
                (AppSpec::new("web", "x", vec![]), human.clone()),
                (AppSpec::new("bot", "x", vec![]), human.clone()),
                (gone, human.clone()),
            ],
        };
        let apps = Apps(
            vec![stopped(app("web", &[])), stopped(app("bot", &["bots"]))],
            Some(snap),
        );
        let grant = Scope::Only(vec!["@bots".into()]);
        let p = plan(&apps, &grant, &Op::Resurrect { name: None }).unwrap();
        assert_eq!(p.only, Some(vec!["bot".to_string(), "gone".to_string()]));
        assert_eq!(p.recreated.len(), 1);
        assert_eq!(p.recreated[0].1, human);
        let p = plan(&apps, &Scope::All, &Op::Resurrect { name: None }).unwrap();
        assert_eq!(names(&p), ["bot", "gone", "web"]);
        assert_eq!(p.only, None);
    }
}
