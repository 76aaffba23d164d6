//! `define`: apps created or changed, then started, all or nothing. One
//! rule for every client (the CLI, a raw protocol client, an agent through
//! its lane): an existing app is never redefined unless the request says
//! so, and a request whose apps cannot all start leaves nothing behind.

use super::control::{restart, start, stop};
use super::launchable::Unlaunchable;
use super::supervisor::{lock, Shared, Supervisor};
use super::validate::{self, Invalid};
use super::Error;
use oxidepm_proto::{spec_changes, Action, Actor, AppSpec, Defined, SpecChange, Status};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// An existing app that a request would define differently.
#[derive(Debug)]
pub struct Redefinition {
    /// The app.
    pub app: String,
    /// What would change.
    pub changes: Vec<SpecChange>,
}

/// An app of a request that cannot start, and why.
#[derive(Debug)]
pub struct StartFailure {
    /// The app.
    pub app: String,
    /// Why.
    pub cause: FailureCause,
}

/// Why an app of a request cannot start.
#[derive(Debug)]
pub enum FailureCause {
    /// Found before anything changed.
    Check(Unlaunchable),
    /// Its start failed.
    Start(Box<Error>),
}

impl fmt::Display for StartFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            FailureCause::Check(u) => write!(f, "app {:?}: {u}", self.app),
            FailureCause::Start(e) => {
                let text = e.to_string();
                // A spawn error names its app already; a storage error
                // has none to name.
                if self.app.is_empty() || text.contains(&format!("{:?}", self.app)) {
                    f.write_str(&text)
                } else {
                    write!(f, "app {:?}: {text}", self.app)
                }
            }
        }
    }
}

/// The message of [`Error::Redefined`].
pub(super) fn redefinitions_text(apps: &[Redefinition]) -> String {
    let changes = |r: &Redefinition| {
        let changes: Vec<String> = r.changes.iter().map(|c| c.to_string()).collect();
        changes.join("; ")
    };
    let one = |r: &Redefinition| format!("{:?} ({})", r.app, changes(r));
    match apps {
        [r] => format!(
            "app {:?} already exists with another spec ({}); start it under another name \
             (--name <other>) or apply the change (--update)",
            r.app,
            changes(r)
        ),
        _ => format!(
            "these apps already exist with another spec: {}; start them under other \
             names (--name) or apply the changes (--update)",
            apps.iter().map(one).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The message of [`Error::NotStarted`].
pub(super) fn failures_text(failures: &[StartFailure], undone: bool) -> String {
    let head = if undone {
        "the request was undone (the apps it started are stopped, the ones it created \
         removed, the ones it changed given their old spec back)"
    } else {
        "nothing was started or changed"
    };
    let lines: Vec<String> = failures.iter().map(|f| format!("\n  {f}")).collect();
    match failures.len() {
        1 => format!("{head}: {}", failures[0]),
        n => format!("{head}; {n} apps cannot start:{}", lines.concat()),
    }
}

/// How one app of the request was defined, and how to undo it.
struct Step {
    id: u64,
    action: Action,
    /// Its spec before, when the request changed it.
    old: Option<AppSpec>,
    changes: Vec<SpecChange>,
    /// Whether it ran (or was starting) before the request.
    was_running: bool,
    /// Its spec as the request left it: an undo touches it only while it
    /// still has this one.
    left: AppSpec,
}

/// Defines apps (creating or changing them), then starts those that have
/// `autostart`; a changed app that was running is restarted with its new
/// spec. An existing app whose spec differs is changed only with `update`
/// (else the request is refused with what differs). Everything that can
/// be checked is checked before anything changes, naming every app at
/// fault; a start that fails anyway undoes the whole request.
pub async fn define(
    shared: &Shared,
    specs: Vec<AppSpec>,
    actor: &Actor,
    update: bool,
) -> Result<Vec<Defined>, Error> {
    check_names(&specs)?;
    let plan = {
        let _batch = Supervisor::batch(shared);
        let mut s = lock(shared);
        // Checked under the lock the changes are made under: no other
        // request can define these names in between.
        s.check_agent_uids(&specs)?;
        let existing: Vec<&AppSpec> = s.apps().map(|a| &a.spec).collect();
        validate::check_graph(&existing, &specs)?;
        // Each spec finds its app by name once (a scan of every app per
        // spec made a file of 10,000 apps cost 10,000² comparisons).
        let ids: Ids = s.apps().map(|a| (a.spec.name.to_string(), a.id)).collect();
        refuse_redefinitions(&s, &ids, &specs, update)?;
        preflight(&s, &ids, &specs)?;
        let mut plan = Plan::default();
        for spec in specs {
            if let Err(e) = plan.define_one(&mut s, &ids, spec, actor) {
                plan.failed = Some(e);
                break;
            }
        }
        plan
    };
    let Plan {
        steps,
        to_restart,
        to_start,
        failed,
    } = plan;
    if let Some(e) = failed {
        // The state could not be written: what was defined so far goes.
        undo(shared, &steps, actor).await;
        return Err(e);
    }
    let mut failed = None;
    if !to_restart.is_empty() {
        failed = restart(shared, &to_restart, actor).await.err();
    }
    if failed.is_none() {
        failed = start(shared, &to_start, actor).await.err();
    }
    if let Some(first) = failed {
        let order: Vec<u64> = to_restart.iter().chain(&to_start).copied().collect();
        let failures = every_failure(shared, &order, actor, first).await;
        undo(shared, &steps, actor).await;
        return Err(Error::NotStarted {
            failures,
            undone: true,
        });
    }
    let s = lock(shared);
    Ok(steps.into_iter().map(|step| step.defined(&s)).collect())
}

/// The ids of the apps defined before a request, by name.
type Ids = HashMap<String, u64>;

/// The app named `name` before the request, if any.
fn named<'a>(s: &'a Supervisor, ids: &Ids, name: &str) -> Option<&'a super::app::App> {
    ids.get(name).and_then(|id| s.app(*id))
}

/// Refuses a request that is not valid by itself: a bad spec, or a name
/// given twice.
fn check_names(specs: &[AppSpec]) -> Result<(), Error> {
    let mut seen = HashSet::new();
    for spec in specs {
        validate::check_spec(spec)?;
        if !seen.insert(spec.name.clone()) {
            return Err(Invalid::DefinedTwice {
                app: spec.name.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// What a request defined so far, and what it still has to start.
#[derive(Default)]
struct Plan {
    steps: Vec<Step>,
    to_restart: Vec<u64>,
    to_start: Vec<u64>,
    /// The state write that failed, which ends the request.
    failed: Option<Error>,
}

impl Plan {
    /// Creates or changes the app of `spec`; a changed app that was
    /// running is to restart, one with `autostart` to start.
    fn define_one(
        &mut self,
        s: &mut Supervisor,
        ids: &Ids,
        spec: AppSpec,
        actor: &Actor,
    ) -> Result<(), Error> {
        let existing = named(s, ids, &spec.name);
        let was_running =
            existing.is_some_and(|a| a.is_running() || a.rt.status == Status::Starting);
        let autostart = spec.autostart;
        let left = spec.clone();
        let mut step = Step {
            id: 0,
            action: Action::Unchanged,
            old: None,
            changes: Vec::new(),
            was_running,
            left,
        };
        match existing.map(|a| (a.id, a.spec.clone())) {
            None => {
                step.id = s.insert(spec, actor)?;
                step.action = Action::Created;
            }
            Some((id, old)) if old == spec => step.id = id,
            Some((id, old)) => {
                let changes = spec_changes(&old, &spec);
                let detail: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
                s.replace_spec_noting(id, spec, actor, &detail.join("; "))?;
                if was_running {
                    self.to_restart.push(id);
                }
                step.id = id;
                step.action = Action::Changed;
                step.old = Some(old);
                step.changes = changes;
            }
        }
        if autostart && !self.to_restart.contains(&step.id) {
            self.to_start.push(step.id);
        }
        self.steps.push(step);
        Ok(())
    }
}

impl Step {
    /// What the answer says of this app.
    fn defined(self, s: &Supervisor) -> Defined {
        let a = s.app(self.id);
        Defined {
            action: self.action,
            id: self.id,
            name: a.map(|a| a.spec.name.clone()),
            pid: a.and_then(|a| a.rt.pid),
            status: a.map(|a| a.rt.status),
            warnings: Vec::new(),
            changes: self.changes,
        }
    }
}

/// Refuses, without `update`, every app that exists with another spec.
fn refuse_redefinitions(
    s: &Supervisor,
    ids: &Ids,
    specs: &[AppSpec],
    update: bool,
) -> Result<(), Error> {
    if update {
        return Ok(());
    }
    let apps: Vec<Redefinition> = specs
        .iter()
        .filter_map(|spec| {
            let old = &named(s, ids, &spec.name)?.spec;
            (old != spec).then(|| Redefinition {
                app: spec.name.clone(),
                changes: spec_changes(old, spec),
            })
        })
        .collect();
    if apps.is_empty() {
        Ok(())
    } else {
        Err(Error::Redefined { apps })
    }
}

/// Checks every app the request would start (with `autostart`, or running
/// and changed) and refuses the request naming each one that cannot.
fn preflight(s: &Supervisor, ids: &Ids, specs: &[AppSpec]) -> Result<(), Error> {
    let failures: Vec<StartFailure> = specs
        .iter()
        .filter(|spec| {
            let existing = named(s, ids, &spec.name);
            match existing {
                None => spec.autostart,
                Some(a) if a.spec == **spec => spec.autostart && !a.is_running(),
                Some(a) => spec.autostart || a.is_running(),
            }
        })
        .filter_map(|spec| {
            s.check_launchable(spec).err().map(|u| StartFailure {
                app: spec.name.clone(),
                cause: FailureCause::Check(u),
            })
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::NotStarted {
            failures,
            undone: false,
        })
    }
}

/// Every app of `order` that cannot start: the one `first` names, and any
/// other left stopped by it, tried on its own (a start stops at its first
/// failure).
async fn every_failure(
    shared: &Shared,
    order: &[u64],
    actor: &Actor,
    first: Error,
) -> Vec<StartFailure> {
    let first_app = failed_app(&first);
    let mut failures = vec![StartFailure {
        app: first_app.clone().unwrap_or_default(),
        cause: FailureCause::Start(Box::new(first)),
    }];
    for &id in order {
        let (name, running) = {
            let s = lock(shared);
            let Some(a) = s.app(id) else { continue };
            let up = a.is_running() || a.rt.status == Status::Starting;
            (a.spec.name.clone(), up)
        };
        if running || first_app.as_ref() == Some(&name) {
            continue;
        }
        if let Err(e) = start(shared, &[id], actor).await {
            failures.push(StartFailure {
                app: failed_app(&e).unwrap_or(name),
                cause: FailureCause::Start(Box::new(e)),
            });
        }
    }
    failures
}

/// The app a start's error is about, when it says.
fn failed_app(e: &Error) -> Option<String> {
    use super::spawn::SpawnError as S;
    match e {
        Error::Spawn(
            S::ProgramNotFound { app, .. }
            | S::NotExecutable { app, .. }
            | S::NoCwd { app, .. }
            | S::CwdDenied { app, .. }
            | S::NoInterpreter { app, .. }
            | S::Exec { app, .. }
            | S::LogWriter { app, .. }
            | S::Cgroup { app, .. }
            | S::NotRoot { app, .. },
        )
        | Error::Stopping { app }
        | Error::Dependency { app, .. } => Some(app.clone()),
        _ => None,
    }
}

/// Puts back what the request changed: what it started is stopped, what
/// it created removed, what it changed given its old spec (and started
/// again when it ran before). An app another request has redefined since
/// (the request waited, unlocked, for a stop) is that request's now: it is
/// left as it is, whoever made it.
async fn undo(shared: &Shared, steps: &[Step], actor: &Actor) {
    let steps: Vec<&Step> = {
        let s = lock(shared);
        steps
            .iter()
            .filter(|st| {
                let ours = still_ours(&s, st);
                if !ours {
                    log::warn!(
                        "app {} was redefined by another request while this one ran; \
                         its undo leaves it as it is",
                        st.id
                    );
                }
                ours
            })
            .collect()
    };
    let ids: Vec<u64> = steps
        .iter()
        .filter(|st| st.action != Action::Unchanged || !st.was_running)
        .map(|st| st.id)
        .collect();
    stop(shared, &ids, actor, false).await;
    let why = "undone: the request that defined it could not start all its apps";
    let mut restore = Vec::new();
    {
        let mut s = lock(shared);
        // Checked again under the lock the undo writes under: the stop
        // above waited unlocked.
        for st in steps {
            if !still_ours(&s, st) {
                continue;
            }
            let result = match (&st.action, &st.old) {
                (Action::Created, _) => s.remove_noting(st.id, actor, why),
                (Action::Changed, Some(old)) => {
                    if st.was_running {
                        restore.push(st.id);
                    }
                    s.replace_spec_noting(st.id, old.clone(), actor, why)
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                log::error!("cannot undo the definition of app {}: {e}", st.id);
            }
        }
    }
    if !restore.is_empty() {
        if let Err(e) = start(shared, &restore, actor).await {
            log::error!("cannot start again an app whose change was undone: {e}");
        }
    }
}

/// Whether app `st.id` still has the spec the request left it with.
fn still_ours(s: &Supervisor, st: &Step) -> bool {
    s.app(st.id).is_some_and(|a| a.spec == st.left)
}
