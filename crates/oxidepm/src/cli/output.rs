//! Printing answers: tables for people, JSON for programs.
//!
//! In JSON mode an answer is printed through `serde_json::Value`, whose
//! objects have sorted keys: the bytes are those the daemon wrote.
//!
//! Text that apps control (log lines, command lines, environments, event
//! details) is escaped when it goes to a terminal ([`super::terminal`]).

mod show;
mod table;

pub(crate) use table::{bytes, or_dash, stdout_wants_color};

use super::terminal::escape_controls;
use crate::timefmt::short_duration;
use oxidepm_proto::{
    AppAction, AppInfo, AuditRecord, Counters, Defined, EventRecord, Identity, LanesReport,
    LogLine, LogStream, RoutesReport, Status, Stopped, Streamed,
};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;
use std::io::{self, Write};
use table::{status_style, table, Cell};

/// Prints answers in the chosen form. Every method returns the write's
/// error: a reader that closed the pipe (`| head -1`) ends the command
/// quietly ([`super::exit`]), never with a panic.
pub struct Printer {
    /// Print JSON instead of tables.
    pub json: bool,
    /// Show control characters in app-controlled text as escapes.
    pub escape: bool,
    /// Colour statuses (a terminal that wants colour; never in JSON).
    pub color: bool,
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

fn print_done<'a>(rows: impl Iterator<Item = Done<'a>>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    for d in rows {
        let status = d.status.map(Status::as_str).filter(|st| *st != d.what);
        let pid = d.pid.map(|p| format!("pid {p}"));
        let extra: Vec<String> = status.map(String::from).into_iter().chain(pid).collect();
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(" ({})", extra.join(", "))
        };
        writeln!(out, "{} [{}]: {}{extra}", or_dash(d.name), d.id, d.what)?;
    }
    out.flush()
}

impl Printer {
    /// JSON with `json`; else text, escaped when stdout is a terminal and
    /// coloured when that terminal wants colour (`no_color`: `--no-color`).
    pub fn new(json: bool, no_color: bool) -> Printer {
        use std::io::IsTerminal;
        Printer {
            json,
            escape: !json && io::stdout().is_terminal(),
            color: !json && stdout_wants_color(no_color),
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

    /// Writes JSON of a typed answer as one line.
    fn json_to<T: Serialize>(&self, out: &mut impl Write, t: &T) -> io::Result<()> {
        writeln!(out, "{}", to_value(t))?;
        out.flush()
    }

    /// Prints JSON of a typed answer.
    fn json_of<T: Serialize>(&self, t: &T) -> io::Result<()> {
        self.json_to(&mut io::stdout().lock(), t)
    }

    /// A status as a table cell, coloured when colour is on.
    fn status_cell(&self, status: &str, text: String) -> Cell {
        Cell {
            text,
            style: status_style(status),
        }
    }

    /// Prints the daemon's degraded-state warning on stderr, where it
    /// reaches a person without changing what a script reads on stdout:
    /// `{"warning": …}` in JSON mode, a `warning:` line otherwise.
    pub fn warning(&self, warning: Option<&str>) {
        let Some(w) = warning else { return };
        let mut err = io::stderr().lock();
        // A closed stderr loses the warning, nothing else.
        let _ = if self.json {
            writeln!(err, "{}", serde_json::json!({ "warning": w }))
        } else {
            writeln!(err, "oxidepm: warning: {}", escape_controls(w.as_bytes()))
        };
    }

    /// Prints `t` as JSON with `--json`, else the sentence `text`.
    pub fn said<T: Serialize>(&self, t: &T, text: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, &to_value(t));
        }
        writeln!(out, "{text}")
    }

    /// Prints an answer that is one object: `key: value` lines for people.
    pub fn value<T: Serialize>(&self, t: &T) -> io::Result<()> {
        let v = to_value(t);
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, &v);
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
                    writeln!(out, "{k}: {v}")?;
                }
            }
            other => writeln!(out, "{other}")?,
        }
        out.flush()
    }

    /// Prints what a start, restart, resurrect or delete did.
    pub fn actions(&self, rows: &[AppAction]) -> io::Result<()> {
        if self.json {
            return self.json_of(&rows);
        }
        print_done(rows.iter().map(|a| Done {
            name: Some(&a.name),
            id: a.id,
            what: a.action.as_str(),
            status: None,
            pid: a.pid,
        }))?;
        let mut out = io::stdout().lock();
        for a in rows {
            if let Some(note) = &a.note {
                writeln!(out, "{}: {note}", a.name)?;
            }
        }
        out.flush()
    }

    /// Prints what a define did; its warnings go to stderr.
    pub fn defined(&self, rows: &[Defined]) -> io::Result<()> {
        for w in rows.iter().flat_map(|r| &r.warnings) {
            let _ = writeln!(io::stderr(), "warning: {w}");
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
        }))?;
        // What a changed app's spec had, and has now.
        let mut out = io::stdout().lock();
        for r in rows.iter().filter(|r| !r.changes.is_empty()) {
            let name = r.name.as_deref().unwrap_or("?");
            for c in &r.changes {
                writeln!(out, "  {name}: {}", self.text(&c.to_string()))?;
            }
        }
        out.flush()
    }

    /// Prints what a stop did.
    pub fn stopped(&self, rows: &[Stopped]) -> io::Result<()> {
        if self.json {
            return self.json_of(&rows);
        }
        print_done(rows.iter().map(|a| Done {
            name: Some(&a.name),
            id: a.id,
            what: a.status.as_str(),
            status: Some(a.status),
            pid: None,
        }))
    }

    /// Prints the app list.
    pub fn status(&self, apps: &[AppInfo]) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, &apps);
        }
        if apps.is_empty() {
            writeln!(out, "no apps; start one with `oxidepm start -- <command>`")?;
            return out.flush();
        }
        let rows: Vec<Vec<Cell>> = apps
            .iter()
            .map(|a| {
                let mut status = a.status.as_str().to_string();
                if let Some(w) = &a.waiting {
                    status = waiting(w);
                }
                if let Some(h) = a.health {
                    status = format!("{status} ({})", h.as_str());
                }
                vec![
                    a.id.to_string().into(),
                    a.name.clone().into(),
                    or_dash(a.pid).into(),
                    self.status_cell(a.status.as_str(), status),
                    a.restarts.to_string().into(),
                    or_dash(a.uptime_ms.map(short_duration)).into(),
                    or_dash(a.cpu_percent.map(|c| format!("{:.0}%", f64::from(c)))).into(),
                    or_dash(a.memory_bytes.map(bytes)).into(),
                ]
            })
            .collect();
        table(
            &mut out,
            &["id", "name", "pid", "status", "↺", "uptime", "cpu", "mem"],
            rows,
            self.color,
        )?;
        out.flush()
    }

    /// Prints one streamed log line; false when stdout is closed. In JSON
    /// a stamped line's time is its own `at` field, the line without it;
    /// `bare` prints the line alone, without app, stream and time.
    pub fn log_line(&self, out: &mut impl Write, item: &LogLine, bare: bool) -> bool {
        let r = if self.json {
            let mut v = to_value(item);
            if let Some((at, rest)) = crate::timefmt::split_stamp(item.line.as_bytes()) {
                // Both halves are whole UTF-8: the stamp is ASCII.
                v["at"] = Value::String(String::from_utf8_lossy(at).into_owned());
                v["line"] = Value::String(String::from_utf8_lossy(rest).into_owned());
            }
            writeln!(out, "{v}")
        } else {
            let tag = match item.stream {
                LogStream::Err => "err",
                LogStream::Out => "out",
            };
            // Context around a match is marked as grep marks it: `-`.
            let bar = if item.matched == Some(false) {
                '-'
            } else {
                '|'
            };
            if bare {
                let line = match crate::timefmt::split_stamp(item.line.as_bytes()) {
                    Some((_, rest)) => String::from_utf8_lossy(rest),
                    None => item.line.as_str().into(),
                };
                writeln!(out, "{}", self.text(&line))
            } else {
                writeln!(out, "{}|{tag}{bar} {}", item.app, self.text(&item.line))
            }
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
    pub fn events(&self, events: &[EventRecord]) -> io::Result<()> {
        if self.json {
            return self.json_of(&events);
        }
        let rows: Vec<Vec<Cell>> = events
            .iter()
            .map(|e| {
                vec![
                    e.at.clone().into(),
                    e.app.clone().into(),
                    e.kind.to_string().into(),
                    e.actor.to_string().into(),
                    self.text(&e.detail).into_owned().into(),
                ]
            })
            .collect();
        let mut out = io::stdout().lock();
        table(
            &mut out,
            &["at", "app", "event", "actor", "detail"],
            rows,
            self.color,
        )?;
        out.flush()
    }

    /// Prints audit rows.
    pub fn audit(&self, records: &[AuditRecord]) -> io::Result<()> {
        if self.json {
            return self.json_of(&records);
        }
        let rows: Vec<Vec<Cell>> = records
            .iter()
            .map(|e| {
                vec![
                    e.at.clone().into(),
                    e.actor.to_string().into(),
                    e.socket.clone().into(),
                    match &e.via {
                        Some(via) => format!("{} via {via}", e.op),
                        None => e.op.clone(),
                    }
                    .into(),
                    e.apps.join(",").into(),
                    // A summary row says how many refusals it stands for.
                    if e.message.starts_with("… and ") {
                        format!("{} {}", e.outcome, e.message)
                    } else {
                        e.outcome.clone()
                    }
                    .into(),
                ]
            })
            .collect();
        let mut out = io::stdout().lock();
        table(
            &mut out,
            &["at", "actor", "socket", "op", "apps", "outcome"],
            rows,
            self.color,
        )?;
        out.flush()
    }

    /// Prints the caller's identity.
    pub fn whoami(&self, who: &Identity) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, who);
        }
        writeln!(
            out,
            "{}:{} via {} socket, tier {}",
            who.class, who.label, who.socket, who.tier
        )?;
        writeln!(out, "containment: {}", who.containment)?;
        out.flush()
    }

    /// Prints the lanes, then the bridge's routes and counters; warnings go
    /// to stderr.
    pub fn lanes(&self, report: &LanesReport) -> io::Result<()> {
        for w in &report.warnings {
            let _ = writeln!(io::stderr(), "warning: {w}");
        }
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, report);
        }
        if let Some(s) = &report.shared {
            writeln!(out, "shared redis {} as host {}", s.url, s.host_id)?;
            for n in &s.names {
                let lease = match (&n.host, n.lease_ms_left) {
                    (Some(h), Some(ms)) if ms > 0 => {
                        format!("held by {h}, lease ends in {} s", ms / 1000)
                    }
                    (Some(h), _) => format!("held by {h}, lease ended"),
                    (None, _) => "not held by anyone".to_string(),
                };
                writeln!(out, "  {}: {lease}", n.name)?;
            }
        }
        let mut rows = Vec::new();
        for a in &report.agents {
            for st in &a.streams {
                rows.push(vec![
                    a.agent.clone().into(),
                    a.acl_user.clone().into(),
                    st.key.clone().into(),
                    st.length.to_string().into(),
                    st.pending.to_string().into(),
                ]);
            }
        }
        if rows.is_empty() {
            writeln!(out, "no agents; define one with `oxidepm start --kind agent --name <name> -- <command>`")?;
            self.responder_lanes(&mut out, report)?;
            return out.flush();
        }
        table(
            &mut out,
            &["agent", "acl user", "stream", "length", "pending"],
            rows,
            self.color,
        )?;
        for a in &report.agents {
            writeln!(out, "{}: {}", a.agent, a.socket.display())?;
        }
        if let Some(m) = &report.memory {
            let bound = match m.used_percent() {
                Some(p) => format!("{} bytes of maxmemory {} ({p:.0}%)", m.used, m.maxmemory),
                None => format!("{} bytes (no maxmemory)", m.used),
            };
            let quota = m
                .agent_quota
                .map_or("no quota".to_string(), |q| format!("{q} bytes per agent"));
            writeln!(
                out,
                "redis memory: {bound}; outboxes: {} bytes together, {quota}",
                m.outbox_budget
            )?;
        }
        self.responder_lanes(&mut out, report)?;
        writeln!(out)?;
        drop(out);
        self.routes(&report.bridge)
    }

    /// The responder apps' lanes, after the agents'.
    fn responder_lanes(&self, out: &mut impl Write, report: &LanesReport) -> io::Result<()> {
        if report.responders.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        let rows = report
            .responders
            .iter()
            .map(|r| {
                vec![
                    r.responder.clone().into(),
                    r.acl_user.clone().into(),
                    r.requests.to_string().into(),
                    r.pending.to_string().into(),
                ]
            })
            .collect();
        table(
            out,
            &["responder", "acl user", "requests", "pending"],
            rows,
            self.color,
        )?;
        for r in &report.responders {
            writeln!(out, "{}: {}", r.responder, r.socket.display())?;
        }
        Ok(())
    }

    /// Prints the routing table and the bridge's counters.
    pub fn routes(&self, report: &RoutesReport) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, report);
        }
        let rows: Vec<Vec<Cell>> = report
            .routes
            .iter()
            .map(|r| {
                let (k, m) = r.matcher().unwrap_or(("-", "-"));
                vec![
                    r.source.clone().into(),
                    format!("{k}={m}").into(),
                    r.agent.clone().into(),
                    r.origin.as_str().to_string().into(),
                ]
            })
            .collect();
        if rows.is_empty() {
            writeln!(out, "no routes")?;
        } else {
            table(
                &mut out,
                &["source", "match", "agent", "origin"],
                rows,
                self.color,
            )?;
        }
        for r in &report.routes {
            if let Some(why) = &r.parked {
                let (k, m) = r.matcher().unwrap_or(("-", "-"));
                writeln!(out, "parked: {} {k}={m} -> {}: {why}", r.source, r.agent)?;
            }
        }
        writeln!(
            out,
            "default agent: {}",
            or_dash(report.default_agent.as_ref())
        )?;
        if !report.consult.is_empty() {
            let rules: Vec<String> = report
                .consult
                .iter()
                .map(|r| format!("{} -> {}", r.from, r.to))
                .collect();
            writeln!(out, "consult: {}", rules.join(", "))?;
        }
        if let Some(problem) = &report.problem {
            writeln!(out, "bridge: not running: {problem}")?;
        }
        if let Some(why) = &report.default_agent_parked {
            writeln!(out, "default agent parked: {why}")?;
        }
        if let Some(e) = &report.reload_error {
            writeln!(out, "bridge: its last reload failed: {e}")?;
        }
        if !report.sources.is_empty() {
            let states: Vec<String> = report
                .sources
                .iter()
                .map(|s| format!("{} {}", s.name, if s.up { "up" } else { "FAILED" }))
                .collect();
            writeln!(out, "sources: {}", states.join(", "))?;
        }
        for s in report.sources.iter().filter(|s| !s.up) {
            writeln!(
                out,
                "bridge: source {} stopped at {} (the others go on): {}",
                s.name,
                s.failed_at.as_deref().unwrap_or("?"),
                s.error.as_deref().unwrap_or("no reason recorded")
            )?;
        }
        let parts: Vec<String> = match &report.counters {
            None => return out.flush(),
            Some(Counters::Unread {}) => Vec::new(),
            Some(Counters::Read(c)) => c
                .entries()
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect(),
        };
        writeln!(out, "counters: {}", parts.join(", "))?;
        out.flush()
    }
}

/// How `status` and `show` say that an app waits to restart:
/// `waiting (restarting in 3.2 s after exit code 3)`.
pub fn waiting(w: &oxidepm_proto::Waiting) -> String {
    format!(
        "waiting (restarting in {:.1} s {})",
        w.due_in_ms as f64 / 1000.0,
        w.reason
    )
}
