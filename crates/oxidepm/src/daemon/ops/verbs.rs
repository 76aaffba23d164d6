//! The daily verbs: signal, reset, reload and scale.

use crate::daemon::errors::{OpError, ScaleError};
use crate::daemon::Daemon;
use crate::supervise::{control, lock, verbs};
use oxidepm_proto::{
    instance_of, instance_spec, Action, Actor, AppAction, AppKind, Reloaded, ResetDone, SignalName,
    Signalled, MAX_INSTANCES,
};

impl Daemon {
    /// `signal`: to the main process of each selected app.
    pub(super) fn signal(
        &self,
        target: &str,
        signal: &SignalName,
        actor: &Actor,
    ) -> Result<Vec<Signalled>, OpError> {
        let sig = verbs::parse_signal(signal)?;
        let ids = lock(&self.sup).resolve(target)?;
        Ok(verbs::signal(&self.sup, &ids, sig, actor)?)
    }

    /// `reset`: restart counters zeroed, `errored` made `stopped`.
    pub(super) fn reset(&self, target: &str, actor: &Actor) -> Result<Vec<ResetDone>, OpError> {
        let ids = lock(&self.sup).resolve(target)?;
        Ok(verbs::reset(&self.sup, &ids, actor))
    }

    /// `reload`: zero-downtime where a health check can tell.
    pub(super) async fn reload(
        &self,
        target: &str,
        actor: &Actor,
    ) -> Result<Vec<Reloaded>, OpError> {
        let ids = lock(&self.sup).resolve(target)?;
        Ok(verbs::reload(&self.sup, &ids, actor).await?)
    }

    /// `scale`: instances `<name>-0` … `<name>-N-1` of one spec; new ones
    /// are copies of the lowest-numbered one, the highest go first.
    pub(super) async fn scale(
        &self,
        target: &str,
        n: u32,
        actor: &Actor,
    ) -> Result<Vec<AppAction>, OpError> {
        let base = target.trim_start_matches('@').to_string();
        if n > MAX_INSTANCES {
            return Err(ScaleError::TooMany { asked: n }.into());
        }
        if n == 0 {
            return Err(ScaleError::Zero { target: base }.into());
        }
        let (template, running, have, extra) = {
            let s = lock(&self.sup);
            // The apps the gate checked, as it selected them: a group's
            // instances that `target` does not select (an app named `web`
            // beside the instances `web-0` …) are never touched.
            let mut group: Vec<(u32, u64)> = s
                .resolve(target)?
                .iter()
                .filter_map(|id| s.app(*id))
                .filter_map(|a| match instance_of(&a.spec) {
                    Some((b, i)) if b == base => Some((i, a.id)),
                    _ => None,
                })
                .collect();
            group.sort_unstable();
            let Some(first) = group.first().and_then(|(_, id)| s.app(*id)) else {
                return Err(ScaleError::NotAGroup { app: base }.into());
            };
            if first.spec.kind != AppKind::App {
                return Err(ScaleError::Kind {
                    app: first.spec.name.clone(),
                    kind: first.spec.kind.as_str(),
                }
                .into());
            }
            let running = group
                .iter()
                .any(|(_, id)| s.app(*id).is_some_and(|a| a.rt.desired_running));
            let have: Vec<u32> = group.iter().map(|(i, _)| *i).collect();
            // Highest first, so a scale down keeps the low numbers.
            let extra: Vec<u64> = group
                .iter()
                .rev()
                .filter(|(i, _)| *i >= n)
                .map(|(_, id)| *id)
                .collect();
            // Never redefine an app of that name that is not an instance.
            for i in (0..n).filter(|i| !have.contains(i)) {
                let name = oxidepm_proto::instance_name(&base, i);
                if s.apps().any(|a| a.spec.name == name) {
                    return Err(ScaleError::NameTaken { name, base }.into());
                }
            }
            (first.spec.clone(), running, have, extra)
        };
        let mut out = Vec::new();
        let specs: Vec<_> = (0..n)
            .filter(|i| !have.contains(i))
            .map(|i| {
                let mut s = instance_spec(&template, &base, i);
                s.autostart = running || template.autostart;
                s
            })
            .collect();
        if !specs.is_empty() {
            for d in self.define(specs, true, actor).await? {
                out.push(AppAction {
                    action: if d.pid.is_some() {
                        Action::Started
                    } else {
                        Action::Created
                    },
                    id: d.id,
                    name: d.name.unwrap_or_default(),
                    note: None,
                    pid: d.pid,
                });
            }
        }
        if !extra.is_empty() {
            out.extend(control::delete(&self.sup, &extra, actor).await?);
        }
        Ok(out)
    }
}
