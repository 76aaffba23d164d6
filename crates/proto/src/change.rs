//! What differs between two specs of one app, field by field: what a
//! redefinition is refused for, or reports having applied.

use crate::app::AppSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;

/// Longest value shown in a change before it is cut.
const SHOWN_CHARS: usize = 80;

/// One field of an app's spec that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecChange {
    /// The field (`args`, `cwd`; `env.NAME` for one variable).
    pub field: String,
    /// Its value before, as compact JSON (`null` when unset); for an
    /// environment variable only whether it was set, never its value.
    pub before: String,
    /// Its value after, the same way.
    pub after: String,
}

impl fmt::Display for SpecChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} → {}", self.field, self.before, self.after)
    }
}

/// The fields in which `after` differs from `before`, by field name.
/// Environment variables are compared one by one and named without their
/// values: an error message must not carry a secret from either spec.
pub fn spec_changes(before: &AppSpec, after: &AppSpec) -> Vec<SpecChange> {
    let (Ok(Value::Object(b)), Ok(Value::Object(a))) =
        (serde_json::to_value(before), serde_json::to_value(after))
    else {
        return Vec::new();
    };
    let fields: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let mut out = Vec::new();
    for field in fields {
        let (x, y) = (
            b.get(field).unwrap_or(&Value::Null),
            a.get(field).unwrap_or(&Value::Null),
        );
        if x == y {
            continue;
        }
        if field == "env" {
            env_changes(&before.env, &after.env, &mut out);
            continue;
        }
        out.push(SpecChange {
            field: field.clone(),
            before: shown(x),
            after: shown(y),
        });
    }
    out
}

fn env_changes(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
    out: &mut Vec<SpecChange>,
) {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let state = |v: Option<&String>| if v.is_some() { "set" } else { "unset" };
    for name in names {
        let (x, y) = (before.get(name), after.get(name));
        if x == y {
            continue;
        }
        let (before, after) = match (x, y) {
            (Some(_), Some(_)) => ("a value".into(), "another value".into()),
            _ => (state(x).to_string(), state(y).to_string()),
        };
        out.push(SpecChange {
            field: format!("env.{name}"),
            before,
            after,
        });
    }
}

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= SHOWN_CHARS {
        return s;
    }
    let cut: String = s.chars().take(SHOWN_CHARS).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_the_fields_and_hide_env_values() {
        let mut a = AppSpec::new("app", "node", vec!["app.js".into()]);
        a.env.insert("TOKEN".into(), "s3cret".into());
        a.env.insert("GONE".into(), "x".into());
        let mut b = a.clone();
        assert!(spec_changes(&a, &b).is_empty());
        b.args = vec!["other.js".into()];
        b.cwd = Some("/srv".into());
        b.env.insert("TOKEN".into(), "n3w".into());
        b.env.remove("GONE");
        b.env.insert("NEW".into(), "y".into());
        let shown: Vec<String> = spec_changes(&a, &b).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            [
                r#"args: ["app.js"] → ["other.js"]"#,
                r#"cwd: null → "/srv""#,
                "env.GONE: set → unset",
                "env.NEW: unset → set",
                "env.TOKEN: a value → another value",
            ]
        );
        assert!(!shown.concat().contains("s3cret") && !shown.concat().contains("n3w"));
    }

    #[test]
    fn long_values_are_cut() {
        let a = AppSpec::new("app", "x", vec![]);
        let mut b = a.clone();
        b.args = vec!["y".repeat(500)];
        let c = &spec_changes(&a, &b)[0];
        assert!(c.after.chars().count() <= SHOWN_CHARS + 1 && c.after.ends_with('…'));
    }
}
