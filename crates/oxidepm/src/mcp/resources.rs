//! Resources: each app's log (`oxidepm://apps/<name>/log`) and the event
//! stream (`oxidepm://events`). The list is the apps the daemon lets the
//! caller read, so it reflects the caller's rights; a read is the same
//! audited request as the `logs` and `events` tools.

use super::bounds::Bounds;
use super::daemon::{Daemon, Failure};
use super::tools::{self, LogsArgs};
use oxidepm_proto::Op;
use rmcp::model::{Resource, ResourceContents};
use serde_json::Value;

/// The event stream's URI.
pub const EVENTS: &str = "oxidepm://events";
/// Log lines a read of a log resource returns.
const LOG_LINES: usize = 200;

/// The resources the caller may read.
pub fn list(daemon: &Daemon) -> Result<Vec<Resource>, Failure> {
    let apps = tools::status(daemon, None, false)?;
    let mut out = vec![Resource::new(EVENTS, "events")
        .with_description("Recent lifecycle events of the apps you may read, with their actors")];
    for a in apps["apps"].as_array().into_iter().flatten() {
        let Some(name) = a["name"].as_str() else {
            continue;
        };
        out.push(
            Resource::new(format!("oxidepm://apps/{name}/log"), format!("{name} log"))
                .with_description(format!("The last {LOG_LINES} lines of {name}'s log")),
        );
    }
    Ok(out)
}

/// The app a log resource's URI names.
pub fn app_of(uri: &str) -> Option<&str> {
    uri.strip_prefix("oxidepm://apps/")?
        .strip_suffix("/log")
        .filter(|n| !n.is_empty() && !n.contains('/'))
}

/// Reads the resource at `uri` as text.
pub fn read(daemon: &Daemon, bounds: Bounds, uri: &str) -> Result<ResourceContents, Failure> {
    let text = if uri == EVENTS {
        let op = Op::Events {
            target: None,
            limit: 100,
            since: None,
        };
        let events = daemon.call("resource", op)?;
        let rows: Vec<String> = events
            .as_array()
            .into_iter()
            .flatten()
            .map(Value::to_string)
            .collect();
        rows.join("\n")
    } else if let Some(app) = app_of(uri) {
        let got = tools::logs(daemon, bounds, LogsArgs::tail(app, LOG_LINES))?;
        let lines: Vec<&str> = got["lines"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["line"].as_str())
            .collect();
        lines.join("\n")
    } else {
        return Err(Failure {
            code: "E_NOT_FOUND".into(),
            message: format!(
                "no resource {uri:?}: resources/list names them (oxidepm://events, oxidepm://apps/<name>/log)"
            ),
        });
    };
    Ok(ResourceContents::text(text, uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_uris_name_one_app() {
        assert_eq!(app_of("oxidepm://apps/web/log"), Some("web"));
        assert_eq!(app_of("oxidepm://apps//log"), None);
        assert_eq!(app_of("oxidepm://apps/a/b/log"), None);
        assert_eq!(app_of("oxidepm://events"), None);
    }
}
