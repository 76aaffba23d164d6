//! The `wait` tool: until an app reaches a state, or a line matching a
//! pattern appears in its log after a moment. It looks once a second (a
//! daemon request each time, audited like any other), tells the client
//! how long it has waited with a progress notification each time, and
//! stops at once when the client cancels. On timeout it returns the app's
//! status and its last log lines: what a model needs to say why.

use super::bounds::Bounds;
use super::daemon::{Daemon, Failure};
use super::tools::{self, LogsArgs, Outcome, WaitArgs};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The longest wait, in seconds.
const MAX_WAIT: u64 = 600;
/// A wait's length when the call does not say, in seconds.
const DEFAULT_WAIT: u64 = 30;
/// Log lines returned with a timed-out wait.
const LAST_LINES: usize = 20;

/// What the wait is for, checked.
enum Goal {
    State(&'static str),
    Log {
        pattern: String,
        regex: bool,
        after: String,
    },
}

/// Runs a `wait` call.
pub async fn run(
    daemon: Arc<Daemon>,
    bounds: Bounds,
    args: Value,
    ct: CancellationToken,
    progress: Option<(Peer<RoleServer>, ProgressToken)>,
) -> Outcome {
    let a: WaitArgs = tools::parse("wait", args)?;
    let limit = a.timeout_secs.unwrap_or(DEFAULT_WAIT);
    if limit == 0 || limit > MAX_WAIT {
        return Err(Failure::bad(format!(
            "timeout_secs {limit}: wait from 1 to {MAX_WAIT} seconds (call again to wait longer)"
        )));
    }
    let goal = match a.until.as_str() {
        "online" => Goal::State("online"),
        "healthy" => Goal::State("healthy"),
        "exited" => Goal::State("exited"),
        "log" => Goal::Log {
            pattern: a
                .pattern
                .filter(|p| !p.is_empty())
                .ok_or_else(|| Failure::bad("`until: log` needs a `pattern`"))?,
            regex: a.regex,
            after: match a.after {
                Some(v) => v,
                None => crate::timefmt::rfc3339_ms(crate::timefmt::now_ms()),
            },
        },
        other => {
            return Err(Failure::bad(format!(
                "until {other:?}: use \"online\", \"healthy\", \"exited\" or \"log\""
            )))
        }
    };
    let goal = Arc::new(goal);
    let started = Instant::now();
    let app = a.app;
    let mut tick = 0u32;
    loop {
        let (g, name) = (goal.clone(), app.clone());
        let met = daemon
            .leased(move |d| reached(d, bounds, &name, &g))
            .await?;
        if let Some(found) = met {
            return Ok(json!({
                "reached": true,
                "waited_ms": started.elapsed().as_millis() as u64,
                "found": found,
            }));
        }
        let waited = started.elapsed();
        if waited >= Duration::from_secs(limit) {
            let name = app.clone();
            return daemon
                .leased(move |d| timed_out(d, bounds, &name, waited))
                .await;
        }
        tick += 1;
        if let Some((peer, token)) = &progress {
            let msg = format!(
                "waiting for {} to be {} ({} s)",
                app,
                a.until,
                waited.as_secs()
            );
            let p = ProgressNotificationParam::new(token.clone(), f64::from(tick))
                .with_total(limit as f64)
                .with_message(msg);
            // A client gone away ends the call through cancellation.
            let _ = peer.notify_progress(p).await;
        }
        tokio::select! {
            _ = ct.cancelled() => {
                return Err(Failure {
                    code: "E_CANCELLED".into(),
                    message: "the wait was cancelled by the client".into(),
                })
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// What shows the goal is reached, if it is.
fn reached(
    daemon: &Daemon,
    bounds: Bounds,
    app: &str,
    goal: &Goal,
) -> Result<Option<Value>, Failure> {
    match goal {
        Goal::State(want) => {
            let apps = tools::status(daemon, Some(app.to_string()), false)?;
            let a = &apps["apps"][0];
            let status = a["status"].as_str().unwrap_or_default();
            let ok = match *want {
                "online" => status == "online",
                "healthy" => a["health"].as_str() == Some("healthy"),
                _ => matches!(status, "stopped" | "errored"),
            };
            Ok(ok.then(|| a.clone()))
        }
        Goal::Log {
            pattern,
            regex,
            after,
        } => {
            let got = tools::logs(
                daemon,
                bounds,
                LogsArgs {
                    since: Some(after.clone()),
                    search: Some(pattern.clone()),
                    regex: *regex,
                    ..LogsArgs::tail(app, 1)
                },
            )?;
            Ok(got["lines"]
                .as_array()
                .and_then(|l| l.iter().find(|l| l["matched"] != false))
                .cloned())
        }
    }
}

/// The answer of a wait that timed out: the app's status and last lines.
fn timed_out(daemon: &Daemon, bounds: Bounds, app: &str, waited: Duration) -> Outcome {
    let status = tools::status(daemon, Some(app.to_string()), false)?;
    let last = tools::logs(daemon, bounds, LogsArgs::tail(app, LAST_LINES))?;
    Ok(json!({
        "reached": false,
        "timed_out": true,
        "waited_ms": waited.as_millis() as u64,
        "status": status["apps"][0],
        "last_lines": last["lines"],
    }))
}
