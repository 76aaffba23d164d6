//! The tools: each one's input schema and description (written for a
//! model: what it does, what it may refuse and why), and the daemon
//! request it makes. The daemon decides and audits; nothing here grants
//! or refuses anything.

use super::bounds::{self, Bounds};
use super::daemon::{Daemon, Failure};
use oxidepm_proto::{AppSpec, LogStream, Op, SignalName};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::Tool;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// Apps to list.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// An app's name or id, `@tag`, or `all`; every app you may read when absent.
    pub app: Option<String>,
}

/// One app (or a selector).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppArgs {
    /// An app's name or id, `@tag`, or `all`.
    pub app: String,
}

/// A signal to send.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalArgs {
    /// An app's name or id, `@tag`, or `all`.
    pub app: String,
    /// A signal's name (`HUP`, `SIGUSR1`) or number.
    pub signal: String,
}

/// Apps to define.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DefineArgs {
    /// App specs in the shape of an app file's JSON (`name`, `command`,
    /// `args`, `cwd`, `env`, `restart`, …).
    pub apps: Vec<serde_json::Map<String, Value>>,
}

/// Which log lines.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    /// An app's name or id, `@tag`; every app you may read when absent.
    pub app: Option<String>,
    /// The newest lines (or matches) to return, default 50, at most 2000.
    pub lines: Option<usize>,
    /// Only lines from then on: `10m`, `2h` ago, a date or an RFC 3339 time.
    pub since: Option<String>,
    /// Only lines up to then (same forms as `since`).
    pub until: Option<String>,
    /// `out` or `err`; both when absent.
    pub stream: Option<String>,
    /// Only lines holding this text, searched in every kept file, rotated ones too.
    pub search: Option<String>,
    /// `search` is a regular expression.
    #[serde(default)]
    pub regex: bool,
    /// Lines of context around each match (at most 10).
    #[serde(default)]
    pub context: u32,
}

impl LogsArgs {
    /// The last `lines` of `app`, both streams.
    pub fn tail(app: &str, lines: usize) -> LogsArgs {
        LogsArgs {
            app: Some(app.to_string()),
            lines: Some(lines),
            since: None,
            until: None,
            stream: None,
            search: None,
            regex: false,
            context: 0,
        }
    }
}

/// What to wait for.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// The app's name or id.
    pub app: String,
    /// `online`, `healthy`, `exited` (stopped or errored), or `log` (a line
    /// matching `pattern`).
    pub until: String,
    /// For `log`: the text (or, with `regex`, the regular expression) a line must hold.
    pub pattern: Option<String>,
    /// `pattern` is a regular expression.
    #[serde(default)]
    pub regex: bool,
    /// For `log`: only lines from this moment on (RFC 3339, or `10s`, `5m`
    /// ago); the moment of the call when absent.
    pub after: Option<String>,
    /// Seconds to wait, default 30, at most 600.
    pub timeout_secs: Option<u64>,
}

/// Recent events.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsArgs {
    /// Only this app's events.
    pub app: Option<String>,
    /// How many, newest last (default 50, at most 500).
    pub limit: Option<usize>,
    /// Only events from then on (`10m`, a date, an RFC 3339 time).
    pub since: Option<String>,
}

/// What the tools are, in the order `tools/list` gives them.
pub fn list() -> Vec<Tool> {
    let t = |name: &'static str, desc: &'static str, schema| Tool::new(name, desc, schema);
    vec![
        t("whoami", "Who the oxidepm daemon decided you are: actor (class:label), tier (read < control < manage < admin) and socket. Use it to tell a user why something was refused: the daemon decides from the connection, not from anything you claim.", schema_for_type::<Nothing>()),
        t("status", "List supervised apps: name, status, pid, restarts, uptime, cpu, memory, health, kind, protected, and `listening` (the TCP ports its processes listen on). Only apps you may read are listed.", schema_for_type::<StatusArgs>()),
        t("show", "Everything about one app: its spec (environment values are redacted for an AI), state and log files.", schema_for_type::<AppArgs>()),
        t("logs", "Read an app's log: the newest lines, a time window, one stream, or a search (plain text or a regex, with context lines) across every kept log file including rotated ones. The result is bounded in bytes: `truncated` says lines were left out; ask for fewer lines, a narrower window or a more precise search.", schema_for_type::<LogsArgs>()),
        t("start", "Start existing apps. Refused (E_POLICY_DENIED) when your tier is below control or the app is outside your grant; a protected app a person stopped cannot be started by an AI (E_PROTECTED).", schema_for_type::<AppArgs>()),
        t("stop", "Stop apps. Refused when your tier is below control, the app is outside your grant, or the app is protected (E_PROTECTED): an AI never stops a protected app.", schema_for_type::<AppArgs>()),
        t("restart", "Restart apps (stop, then start). Refused like stop: never a protected app, never outside your grant.", schema_for_type::<AppArgs>()),
        t("reload", "Reload apps without downtime where they support it (a new process before the old one stops). Refused like restart.", schema_for_type::<AppArgs>()),
        t("signal", "Send a signal (HUP, USR1, a number) to apps' processes. Refused like stop.", schema_for_type::<SignalArgs>()),
        t("reset", "Reset apps' restart counters and errored state. Refused when your tier is below control.", schema_for_type::<AppArgs>()),
        t("define", "Define (create or change) apps from specs in the app file's JSON shape. Needs the manage tier: with the default tiers an AI is refused (E_POLICY_DENIED) unless a person granted manage; repeat the refusal's text to the user.", schema_for_type::<DefineArgs>()),
        t("wait", "Wait until an app is online, healthy or exited, or until a line matching a pattern appears in its log after a moment. Sends progress notifications while it waits and stops at once when cancelled. On timeout (default 30 s, at most 600 s) returns the app's status and its last log lines, so you can see why.", schema_for_type::<WaitArgs>()),
        t("events", "Recent lifecycle events (started, stopped, exited, restarted, errored, …) with the actor that caused each.", schema_for_type::<EventsArgs>()),
        t("lane_read", "For an agent: read entries of your own inbox of a source (webhook, consult, …) through your own lane, waiting up to block_secs (at most 30) when it is empty; they are acknowledged unless ack is false (then read them again with pending). Refused outside an agent app (E_NO_LANE); the lane only ever reaches your own keys.", schema_for_type::<super::lane::LaneReadArgs>()),
        t("lane_send", "For an agent: write one entry into your own outbox of a source (consult: to and text, or to, re and text to answer; webhook: what its route needs); the bridge delivers it. Refused outside an agent app (E_NO_LANE), and by the lane past your quota.", schema_for_type::<super::lane::LaneSendArgs>()),
    ]
}

/// A tool's outcome: its structured result, or why it failed.
pub type Outcome = Result<Value, Failure>;

/// Parses `args` as `T`, saying what is wrong in a model's terms.
pub fn parse<T: for<'de> Deserialize<'de>>(tool: &str, args: Value) -> Result<T, Failure> {
    serde_json::from_value(args).map_err(|e| {
        Failure::bad(format!(
            "bad arguments for `{tool}`: {e}; see its input schema"
        ))
    })
}

/// Runs the blocking tool `name` (every tool but `wait`).
pub fn call(daemon: &Daemon, bounds: Bounds, name: &str, args: Value) -> Outcome {
    let op_on = |app: String, f: fn(String) -> Op| daemon.call(name, f(app));
    match name {
        "whoami" => {
            parse::<Nothing>(name, args)?;
            daemon.call(name, Op::Whoami)
        }
        "status" => status(daemon, parse::<StatusArgs>(name, args)?.app, true),
        "show" => {
            let a: AppArgs = parse(name, args)?;
            let apps = daemon.call(name, Op::Show { target: a.app })?;
            Ok(json!({ "apps": apps }))
        }
        "logs" => logs(daemon, bounds, parse(name, args)?),
        "start" => op_on(parse::<AppArgs>(name, args)?.app, |target| Op::Start {
            target,
        }),
        "stop" => op_on(parse::<AppArgs>(name, args)?.app, |target| Op::Stop {
            target,
        }),
        "restart" => op_on(parse::<AppArgs>(name, args)?.app, |target| Op::Restart {
            target,
        }),
        "reload" => op_on(parse::<AppArgs>(name, args)?.app, |target| Op::Reload {
            target,
        }),
        "reset" => op_on(parse::<AppArgs>(name, args)?.app, |target| Op::Reset {
            target,
        }),
        "signal" => {
            let a: SignalArgs = parse(name, args)?;
            let signal = match a.signal.parse::<u32>() {
                Ok(n) => SignalName::Number(n),
                Err(_) => SignalName::Name(a.signal),
            };
            daemon.call(
                name,
                Op::Signal {
                    target: a.app,
                    signal,
                },
            )
        }
        "define" => {
            let a: DefineArgs = parse(name, args)?;
            let mut apps = Vec::with_capacity(a.apps.len());
            for (i, spec) in a.apps.into_iter().enumerate() {
                let spec: AppSpec = serde_json::from_value(Value::Object(spec)).map_err(|e| {
                    Failure::bad(format!("app {i} of `define` is not an app spec: {e}"))
                })?;
                apps.push(spec);
            }
            daemon.call(name, Op::Define { apps, update: true })
        }
        "events" => {
            let a: EventsArgs = parse(name, args)?;
            let op = Op::Events {
                target: a.app,
                limit: a.limit.unwrap_or(50).min(500),
                since: when("since", a.since)?,
            };
            daemon.call(name, op)
        }
        "lane_read" => super::lane::read(bounds, parse(name, args)?),
        "lane_send" => super::lane::send(bounds, parse(name, args)?),
        other => Err(Failure::bad(format!(
            "no tool `{other}`: tools/list names the tools of this server"
        ))),
    }
    .map(object)
}

/// A time as the daemon takes it (`10m` ago, a date, an RFC 3339 time).
pub fn when(field: &str, value: Option<String>) -> Result<Option<String>, Failure> {
    value
        .map(|v| {
            crate::cli::when::parse_at(&v, crate::timefmt::now_ms()).ok_or_else(|| {
                Failure::bad(format!(
                    "{field} {v:?} is not a time: use `10m`, `2h`, `1d` (ago), a date (2026-11-30, UTC) or an RFC 3339 time"
                ))
            })
        })
        .transpose()
}

/// `status`, all apps or a selector's; with `ports`, each with the TCP
/// ports its processes listen on (`listening`, when this user can see
/// them), looked up for the selected apps only.
pub fn status(daemon: &Daemon, app: Option<String>, ports: bool) -> Outcome {
    let all = daemon.call("status", Op::Status)?;
    let all = match all {
        Value::Array(list) => list,
        other => return Ok(json!({ "apps": other })),
    };
    let mut apps: Vec<Value> = match app.filter(|a| a != "all") {
        None => all,
        Some(sel) => {
            let tag = sel.strip_prefix('@');
            let picked: Vec<Value> = all
                .into_iter()
                .filter(|a| match tag {
                    Some(tag) => a["tags"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t == tag)),
                    None => {
                        a["name"] == sel.as_str()
                            || sel.parse::<u64>().is_ok_and(|id| a["id"] == id)
                    }
                })
                .collect();
            if picked.is_empty() {
                return Err(Failure {
                    code: "E_NOT_FOUND".into(),
                    message: format!("no app matches {sel:?} among the apps you may read; `status` with no app lists them"),
                });
            }
            picked
        }
    };
    // What is not there says nothing: a model reads every byte of a list
    // of many apps, as tokens.
    for a in apps.iter_mut().filter_map(Value::as_object_mut) {
        let empty = |k: &str, v: &Value| {
            v.is_null() || (k == "tags" && v.as_array().is_some_and(Vec::is_empty))
        };
        a.retain(|k, v| !empty(k, v));
    }
    if ports {
        let pid = |a: &Value| a["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
        let pids: Vec<u32> = apps.iter().filter_map(pid).collect();
        let found = super::ports::of(&pids);
        for a in apps.iter_mut() {
            if let Some(p) = pid(a).and_then(|p| found.get(&p)) {
                a["listening"] = json!(p);
            }
        }
    }
    Ok(json!({ "apps": apps }))
}

/// `logs`: the daemon's tail or search, cut to the result bound.
pub fn logs(daemon: &Daemon, bounds: Bounds, a: LogsArgs) -> Outcome {
    let stream = match a.stream.as_deref() {
        None => None,
        Some("out") => Some(LogStream::Out),
        Some("err") => Some(LogStream::Err),
        Some(s) => {
            return Err(Failure::bad(format!(
                "stream {s:?}: use \"out\" or \"err\""
            )))
        }
    };
    let wanted = a.lines.unwrap_or(bounds::DEFAULT_LINES);
    let op = Op::Logs {
        target: a.app.unwrap_or_default(),
        lines: wanted.clamp(1, bounds::MAX_LINES),
        follow: false,
        stream,
        since: when("since", a.since)?,
        until: when("until", a.until)?,
        grep: a.search,
        regex: a.regex,
        context: a.context.min(10),
    };
    let mut lines = Vec::new();
    let mut kept = 0usize;
    let mut cut = false;
    let mut c = daemon.client("logs")?;
    let done: Value = c
        .call_stream(op, |item| {
            // Held lines stay within twice the result bound while they
            // come in; the bound proper is applied once all are read.
            kept += bounds::json_len(&item);
            lines.push(item);
            while kept > 2 * bounds.result_bytes && !lines.is_empty() {
                kept -= bounds::json_len(&lines.remove(0));
                cut = true;
            }
            true
        })
        .map_err(super::daemon::failure)?;
    daemon.give_back(c);
    let daemon_cut = done["truncated"].as_bool().unwrap_or(false);
    cut |= bounds::keep_newest(&mut lines, 512, bounds.result_bytes);
    let hint = (cut || daemon_cut).then_some(
        "some lines were left out (the result is bounded in bytes, the daemon's search in matches): \
         ask for fewer `lines`, a narrower `since`/`until`, one `stream` or a more precise `search`",
    );
    Ok(json!({
        "lines": lines,
        "truncated": cut || daemon_cut,
        "more": hint,
    }))
}

/// A structured result is an object: a bare answer is wrapped.
fn object(v: Value) -> Value {
    match v {
        Value::Object(_) => v,
        Value::Array(_) => json!({ "items": v }),
        other => json!({ "result": other }),
    }
}
