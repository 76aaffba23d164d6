//! Printing answers: tables for people, JSON for programs.
//!
//! In JSON mode an answer is printed through `serde_json::Value`, whose
//! objects have sorted keys: the bytes are those the daemon wrote.
//!
//! Text that apps control (log lines, command lines, environments, event
//! details) is escaped when it goes to a terminal ([`super::terminal`]).

use super::print_json;
use super::terminal::escape_controls;
use crate::timefmt::short_duration;
use oxidepm_proto::{
    AppAction, AppInfo, AuditRecord, Counters, Defined, EventRecord, Identity, LanesReport,
    LogLine, LogStream, RoutesReport, Status, Stopped, Streamed,
};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Display;
use std::io::Write;

/// Prints answers in the chosen form.
pub struct Printer {
    /// Print JSON instead of tables.
    pub json: bool,
    /// Show control characters in app-controlled text as escapes.
    pub escape: bool,
}

/// A table cell for a value that may be missing.
/// A value, or `-` when there is none.
pub(crate) fn or_dash<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// `512b`, `3.1mb`.
pub(crate) fn bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if f < K {
        format!("{n}b")
    } else if f < K * K {
        format!("{:.1}kb", f / K)
    } else if f < K * K * K {
        format!("{:.1}mb", f / K / K)
    } else {
        format!("{:.2}gb", f / K / K / K)
    }
}

/// Prints rows under a header, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |out: &mut std::io::StdoutLock, cells: Vec<String>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            l.push_str(c);
            if i + 1 < cells.len() {
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(&mut out, header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(&mut out, r.clone());
    }
}

fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or_default()
}

/// One line of what a request did to an app.
struct Done<'a> {
    name: Option<&'a str>,
    id: u64,
    what: &'a str,
    status: Option<Status>,
    pid: Option<u32>,
}

fn print_done<'a>(rows: impl Iterator<Item = Done<'a>>) {
    for d in rows {
        let status = d.status.map(Status::as_str).filter(|st| *st != d.what);
        let pid = d.pid.map(|p| format!("pid {p}"));
        let extra: Vec<String> = status.map(String::from).into_iter().chain(pid).collect();
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(" ({})", extra.join(", "))
        };
        println!("{} [{}]: {}{extra}", or_dash(d.name), d.id, d.what);
    }
}

/// `  key             value`, as `show` lists fields.
fn field(k: &str, v: impl Display) {
    println!("  {k:<15} {v}");
}

impl Printer {
    /// JSON with `json`; else text, escaped when stdout is a terminal.
    pub fn new(json: bool) -> Printer {
        use std::io::IsTerminal;
        Printer {
            json,
            escape: !json && std::io::stdout().is_terminal(),
        }
    }

    /// App-controlled text as it may be printed.
    fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.escape {
            escape_controls(s.as_bytes())
        } else {
            Cow::Borrowed(s)
        }
    }

    /// Prints JSON of a typed answer.
    fn json_of<T: Serialize>(&self, t: &T) {
        print_json(&to_value(t));
    }

    /// Prints the daemon's degraded-state warning on stderr, where it
    /// reaches a person without changing what a script reads on stdout:
    /// `{"warning": …}` in JSON mode, a `warning:` line otherwise.
    pub fn warning(&self, warning: Option<&str>) {
        let Some(w) = warning else { return };
        if self.json {
            eprintln!("{}", serde_json::json!({ "warning": w }));
        } else {
            eprintln!("oxidepm: warning: {}", escape_controls(w.as_bytes()));
        }
    }

    /// Prints an answer that is one object: `key: value` lines for people.
    pub fn value<T: Serialize>(&self, t: &T) {
        let v = to_value(t);
        if self.json {
            return print_json(&v);
        }
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let v = match v {
                        Value::String(s) => s,
                        Value::Array(a) => a
                            .iter()
                            .map(|x| {
                                x.as_str()
                                    .map(String::from)
                                    .unwrap_or_else(|| x.to_string())
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                        other => other.to_string(),
                    };
                    println!("{k}: {v}");
                }
            }
            other => println!("{other}"),
        }
    }

    /// Prints what a start, restart, resurrect or delete did.
    pub fn actions(&self, rows: &[AppAction]) {
        if self.json {
            return self.json_of(&rows);
        }
        print_done(rows.iter().map(|a| Done {
            name: Some(&a.name),
            id: a.id,
            what: a.action.as_str(),
            status: None,
            pid: a.pid,
        }));
        for a in rows {
            if let Some(note) = &a.note {
                println!("{}: {note}", a.name);
            }
        }
    }

    /// Prints what a define did; its warnings go to stderr.
    pub fn defined(&self, rows: &[Defined]) {
        for w in rows.iter().flat_map(|r| &r.warnings) {
            eprintln!("warning: {w}");
        }
        if self.json {
            return self.json_of(&rows);
        }
        print_done(rows.iter().map(|a| Done {
            name: a.name.as_deref(),
            id: a.id,
            what: a.action.as_str(),
            status: a.status,
            pid: a.pid,
        }));
        // What a changed app's spec had, and has now.
        for r in rows.iter().filter(|r| !r.changes.is_empty()) {
            let name = r.name.as_deref().unwrap_or("?");
            for c in &r.changes {
                println!("  {name}: {}", self.text(&c.to_string()));
            }
        }
    }

    /// Prints what a stop did.
    pub fn stopped(&self, rows: &[Stopped]) {
        if self.json {
            return self.json_of(&rows);
        }
        print_done(rows.iter().map(|a| Done {
            name: Some(&a.name),
            id: a.id,
            what: a.status.as_str(),
            status: Some(a.status),
            pid: None,
        }));
    }

    /// Prints the app list.
    pub fn status(&self, apps: &[AppInfo]) {
        if self.json {
            return self.json_of(&apps);
        }
        let rows: Vec<Vec<String>> = apps
            .iter()
            .map(|a| {
                let mut status = a.status.as_str().to_string();
                if let Some(h) = a.health {
                    status = format!("{status} ({})", h.as_str());
                }
                vec![
                    a.id.to_string(),
                    a.name.clone(),
                    or_dash(a.pid),
                    status,
                    a.restarts.to_string(),
                    or_dash(a.uptime_ms.map(short_duration)),
                    or_dash(a.cpu_percent.map(|c| format!("{:.0}%", f64::from(c)))),
                    or_dash(a.memory_bytes.map(bytes)),
                ]
            })
            .collect();
        if rows.is_empty() {
            println!("no apps; start one with `oxidepm start -- <command>`");
            return;
        }
        table(
            &["id", "name", "pid", "status", "↺", "uptime", "cpu", "mem"],
            &rows,
        );
    }

    /// Prints apps in full.
    pub fn show(&self, apps: &[AppInfo]) {
        if self.json {
            return self.json_of(&apps);
        }
        for a in apps {
            println!("{} [{}]", a.name, a.id);
            field("status", a.status.as_str());
            if let Some(p) = a.pid {
                field("pid", p);
            }
            field("restarts", a.restarts);
            if let Some(c) = a.last_exit_code {
                field("last_exit_code", c);
            }
            if let Some(h) = a.health {
                field("health", h.as_str());
            }
            field("kind", a.kind.as_str());
            field("protected", a.protected);
            field("defined_by", &a.defined_by);
            if let Some(c) = &a.containment {
                field("containment", c);
            }
            if !a.tags.is_empty() {
                field("tags", a.tags.join(", "));
            }
            if let Some(spec) = &a.spec {
                let cmd: Vec<&str> = std::iter::once(spec.command.as_str())
                    .chain(spec.args.iter().map(String::as_str))
                    .collect();
                field("command", self.text(&cmd.join(" ")));
                if let Some(d) = &spec.cwd {
                    field("cwd", self.text(d));
                }
                if let Some(u) = &spec.user {
                    field("user", self.text(u));
                }
                field("restart", spec.restart.as_str());
                field("restart_delay_ms", spec.restart_delay_ms);
                field("max_restarts", spec.max_restarts);
                field("min_uptime_ms", spec.min_uptime_ms);
                field("kill_timeout_ms", spec.kill_timeout_ms);
                field("stop_signal", &spec.stop_signal);
                if let Some(m) = spec.max_memory_bytes {
                    field("max_memory_bytes", m);
                }
                if let Some(c) = &spec.cron_restart {
                    field("cron_restart", c);
                }
                for (k, v) in &spec.env {
                    println!("  env {}={}", self.text(k), self.text(v));
                }
            }
            if let Some([out, err]) = &a.log_files {
                field("out log", out);
                field("err log", err);
            }
            if let Some(n) = a.log_dropped_bytes.filter(|n| *n > 0) {
                field("log bytes dropped", n);
            }
        }
    }

    /// Prints one streamed log line; false when stdout is closed.
    pub fn log_line(&self, out: &mut impl Write, item: &LogLine) -> bool {
        let r = if self.json {
            writeln!(out, "{}", to_value(item))
        } else {
            let tag = match item.stream {
                LogStream::Err => "err",
                LogStream::Out => "out",
            };
            writeln!(out, "{}|{tag}| {}", item.app, self.text(&item.line))
        };
        r.and_then(|_| out.flush()).is_ok()
    }

    /// Prints one record of `events --follow`; false when stdout is closed.
    pub fn streamed(&self, out: &mut impl Write, item: &Streamed) -> bool {
        let r = if self.json {
            writeln!(out, "{}", to_value(item))
        } else {
            match item {
                Streamed::Subscribed(_) => Ok(()),
                Streamed::Event(e) => writeln!(
                    out,
                    "{} {} {} by {}{}{}",
                    e.at,
                    e.app,
                    e.kind,
                    e.actor,
                    if e.detail.is_empty() { "" } else { ": " },
                    self.text(&e.detail)
                ),
                Streamed::Refusal(a) => writeln!(
                    out,
                    "{} refused {} by {} via {}: {}",
                    a.at,
                    a.op,
                    a.actor,
                    a.socket,
                    self.text(&a.message)
                ),
                Streamed::Missed(n) => writeln!(
                    out,
                    "… {n} events missed here (this terminal did not read fast enough)"
                ),
            }
        };
        r.and_then(|_| out.flush()).is_ok()
    }

    /// Prints lifecycle events.
    pub fn events(&self, events: &[EventRecord]) {
        if self.json {
            return self.json_of(&events);
        }
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                vec![
                    e.at.clone(),
                    e.app.clone(),
                    e.kind.to_string(),
                    e.actor.to_string(),
                    self.text(&e.detail).into_owned(),
                ]
            })
            .collect();
        table(&["at", "app", "event", "actor", "detail"], &rows);
    }

    /// Prints audit rows.
    pub fn audit(&self, records: &[AuditRecord]) {
        if self.json {
            return self.json_of(&records);
        }
        let rows: Vec<Vec<String>> = records
            .iter()
            .map(|e| {
                vec![
                    e.at.clone(),
                    e.actor.to_string(),
                    e.socket.clone(),
                    e.op.clone(),
                    e.apps.join(","),
                    // A summary row says how many refusals it stands for.
                    if e.message.starts_with("… and ") {
                        format!("{} {}", e.outcome, e.message)
                    } else {
                        e.outcome.clone()
                    },
                ]
            })
            .collect();
        table(&["at", "actor", "socket", "op", "apps", "outcome"], &rows);
    }

    /// Prints the caller's identity.
    pub fn whoami(&self, who: &Identity) {
        if self.json {
            return self.json_of(who);
        }
        println!(
            "{}:{} via {} socket, tier {}",
            who.class, who.label, who.socket, who.tier
        );
        println!("containment: {}", who.containment);
    }

    /// Prints the lanes, then the bridge's routes and counters; warnings go
    /// to stderr.
    pub fn lanes(&self, report: &LanesReport) {
        for w in &report.warnings {
            eprintln!("warning: {w}");
        }
        if self.json {
            return self.json_of(report);
        }
        let mut rows = Vec::new();
        for a in &report.agents {
            for st in &a.streams {
                rows.push(vec![
                    a.agent.clone(),
                    a.acl_user.clone(),
                    st.key.clone(),
                    st.length.to_string(),
                    st.pending.to_string(),
                ]);
            }
        }
        if rows.is_empty() {
            println!("no agents; define one with `oxidepm start --kind agent --name <name> -- <command>`");
            return;
        }
        table(&["agent", "acl user", "stream", "length", "pending"], &rows);
        for a in &report.agents {
            println!("{}: {}", a.agent, a.socket.display());
        }
        println!();
        self.routes(&report.bridge);
    }

    /// Prints the routing table and the bridge's counters.
    pub fn routes(&self, report: &RoutesReport) {
        if self.json {
            return self.json_of(report);
        }
        let rows: Vec<Vec<String>> = report
            .routes
            .iter()
            .map(|r| {
                let (k, m) = r.matcher().unwrap_or(("-", "-"));
                vec![
                    r.source.clone(),
                    format!("{k}={m}"),
                    r.agent.clone(),
                    r.origin.as_str().to_string(),
                ]
            })
            .collect();
        if rows.is_empty() {
            println!("no routes");
        } else {
            table(&["source", "match", "agent", "origin"], &rows);
        }
        for r in &report.routes {
            if let Some(why) = &r.parked {
                let (k, m) = r.matcher().unwrap_or(("-", "-"));
                println!("parked: {} {k}={m} -> {}: {why}", r.source, r.agent);
            }
        }
        println!("default agent: {}", or_dash(report.default_agent.as_ref()));
        if let Some(problem) = &report.problem {
            println!("bridge: not running: {problem}");
        }
        if let Some(why) = &report.default_agent_parked {
            println!("default agent parked: {why}");
        }
        if let Some(e) = &report.reload_error {
            println!("bridge: its last reload failed: {e}");
        }
        let parts: Vec<String> = match &report.counters {
            None => return,
            Some(Counters::Unread {}) => Vec::new(),
            Some(Counters::Read(c)) => c
                .entries()
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect(),
        };
        println!("counters: {}", parts.join(", "));
    }
}
