//! The answers of the daily verbs (`signal`, `reset`, `reload`), and the
//! instances of an app (`scale`, `instances = N`).

use crate::app::Status;
use serde::{Deserialize, Serialize};

/// One app in the answer to `signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signalled {
    /// The app's id.
    pub id: u64,
    /// The app's name.
    pub name: String,
    /// The process the signal was sent to.
    pub pid: u32,
    /// The signal, by its full name (`SIGUSR1`).
    pub signal: String,
}

/// One app in the answer to `reset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetDone {
    /// The app's id.
    pub id: u64,
    /// The app's name.
    pub name: String,
    /// The restart count before the reset.
    pub restarts_before: u64,
    /// Its status after the reset (`errored` became `stopped`).
    pub status: Status,
}

/// How an app was reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReloadHow {
    /// A new process became healthy before the old one was stopped.
    #[serde(rename = "reloaded")]
    Reloaded,
    /// No health check: stopped, then started again.
    #[serde(rename = "restarted (no health check: not zero-downtime)")]
    Restarted,
    /// It was not running: started.
    #[serde(rename = "started")]
    Started,
}

impl ReloadHow {
    /// As written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadHow::Reloaded => "reloaded",
            ReloadHow::Restarted => "restarted (no health check: not zero-downtime)",
            ReloadHow::Started => "started",
        }
    }
}

/// One app in the answer to `reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// What was done.
    pub how: ReloadHow,
    /// The app's id.
    pub id: u64,
    /// The app's name.
    pub name: String,
    /// The process that was replaced, if one ran.
    pub old_pid: Option<u32>,
    /// The process that runs now.
    pub pid: Option<u32>,
}

/// The most instances `scale` and `instances = N` make of one app.
pub const MAX_INSTANCES: u32 = 256;

/// The variable that tells an instance its number (`0` … `N-1`), as pm2's
/// `NODE_APP_INSTANCE`.
pub const INSTANCE_VAR: &str = "OXIDEPM_INSTANCE";

/// The name of instance `i` of `base`: `<base>-<i>`.
pub fn instance_name(base: &str, i: u32) -> String {
    format!("{base}-{i}")
}

/// Instance `i` of the app `spec` describes, named after `base`: its name
/// is `<base>-<i>`, [`INSTANCE_VAR`] is `i`, and it carries the tag
/// `base`, so that `@base` selects every instance.
pub fn instance_spec(spec: &crate::app::AppSpec, base: &str, i: u32) -> crate::app::AppSpec {
    let mut s = spec.clone();
    s.name = instance_name(base, i);
    s.env.insert(INSTANCE_VAR.to_string(), i.to_string());
    if !s.tags.iter().any(|t| t == base) {
        s.tags.push(base.to_string());
    }
    s
}

/// The group and number of an instance: `Some(("web", 2))` for an app
/// named `web-2` whose [`INSTANCE_VAR`] is `2`; `None` for any other app.
pub fn instance_of(spec: &crate::app::AppSpec) -> Option<(&str, u32)> {
    let i: u32 = spec.env.get(INSTANCE_VAR)?.parse().ok()?;
    let base = spec.name.strip_suffix(&format!("-{i}"))?;
    (!base.is_empty()).then_some((base, i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::AppSpec;
    use crate::wire::{Op, Request, SignalName};

    #[test]
    fn an_instance_knows_its_group_and_number() {
        let mut web = AppSpec::new("web", "node", vec!["app.js".into()]);
        web.tags = vec!["front".into()];
        let third = instance_spec(&web, "web", 2);
        assert_eq!(third.name, "web-2");
        assert_eq!(third.env.get(INSTANCE_VAR).map(String::as_str), Some("2"));
        assert_eq!(third.tags, ["front", "web"]);
        assert_eq!(instance_of(&third), Some(("web", 2)));
        assert_eq!(
            instance_of(&instance_spec(&third, "web", 0)),
            Some(("web", 0))
        );
        // A name that looks like an instance is not one without the variable,
        // nor with a variable that does not match it.
        assert_eq!(instance_of(&AppSpec::new("web-2", "x", vec![])), None);
        let mut odd = third.clone();
        odd.name = "web-3".into();
        assert_eq!(instance_of(&odd), None);
        odd.name = "-2".into();
        assert_eq!(instance_of(&odd), None);
    }

    #[test]
    fn the_verbs_on_the_wire() {
        let r: Request =
            serde_json::from_str(r#"{"op":"signal","target":"web","signal":"USR1"}"#).unwrap();
        assert!(matches!(r.op, Op::Signal { signal: SignalName::Name(ref s), .. } if s == "USR1"));
        let r: Request =
            serde_json::from_str(r#"{"op":"signal","target":"web","signal":10}"#).unwrap();
        assert!(matches!(
            r.op,
            Op::Signal {
                signal: SignalName::Number(10),
                ..
            }
        ));
        assert_eq!(r.op.name(), "signal");
        let r: Request =
            serde_json::from_str(r#"{"op":"scale","target":"web","instances":3}"#).unwrap();
        assert_eq!(r.op.name(), "scale");
        for op in ["reload", "reset"] {
            let r: Request =
                serde_json::from_str(&format!(r#"{{"op":"{op}","target":"web"}}"#)).unwrap();
            assert_eq!(r.op.name(), op);
        }
        for how in [
            ReloadHow::Reloaded,
            ReloadHow::Restarted,
            ReloadHow::Started,
        ] {
            assert_eq!(serde_json::to_value(how).unwrap(), how.as_str());
        }
    }
}
