//! Printing answers: tables for people, JSON for programs.

use super::print_json;
use crate::timefmt::short_duration;
use serde_json::Value;
use std::io::Write;

/// Prints answers in the chosen form.
pub struct Printer {
    /// Print JSON instead of tables.
    pub json: bool,
}

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    }
}

fn bytes(n: u64) -> String {
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

impl Printer {
    /// Prints any answer.
    pub fn value(&self, v: &Value) {
        if self.json {
            print_json(v);
        } else {
            match v {
                Value::Object(m) => {
                    for (k, v) in m {
                        let v = match v {
                            Value::String(s) => s.clone(),
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
    }

    /// Prints what a start/stop/restart/delete did.
    pub fn actions(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        for a in v.as_array().into_iter().flatten() {
            let what = a
                .get("action")
                .or_else(|| a.get("status"))
                .and_then(Value::as_str)
                .unwrap_or("done");
            let status = a
                .get("status")
                .and_then(Value::as_str)
                .filter(|st| *st != what);
            let pid = a
                .get("pid")
                .and_then(Value::as_u64)
                .map(|p| format!("pid {p}"));
            let extra: Vec<String> = status.map(String::from).into_iter().chain(pid).collect();
            let extra = if extra.is_empty() {
                String::new()
            } else {
                format!(" ({})", extra.join(", "))
            };
            println!("{} [{}]: {what}{extra}", s(a, "name"), s(a, "id"));
        }
    }

    /// Prints the app list.
    pub fn status(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        let rows: Vec<Vec<String>> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let mut status = s(a, "status");
                if let Some(h) = a.get("health").and_then(Value::as_str) {
                    status = format!("{status} ({h})");
                }
                vec![
                    s(a, "id"),
                    s(a, "name"),
                    s(a, "pid"),
                    status,
                    s(a, "restarts"),
                    a.get("uptime_ms")
                        .and_then(Value::as_u64)
                        .map(short_duration)
                        .unwrap_or_else(|| "-".into()),
                    a.get("cpu_percent")
                        .and_then(Value::as_f64)
                        .map(|c| format!("{c:.0}%"))
                        .unwrap_or_else(|| "-".into()),
                    a.get("memory_bytes")
                        .and_then(Value::as_u64)
                        .map(bytes)
                        .unwrap_or_else(|| "-".into()),
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
    pub fn show(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        for a in v.as_array().into_iter().flatten() {
            println!("{} [{}]", s(a, "name"), s(a, "id"));
            for k in [
                "status",
                "pid",
                "restarts",
                "last_exit_code",
                "health",
                "kind",
                "protected",
                "defined_by",
            ] {
                if let Some(x) = a.get(k).filter(|x| !x.is_null()) {
                    println!(
                        "  {k:<15} {}",
                        x.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| x.to_string())
                    );
                }
            }
            if let Some(t) = a
                .get("tags")
                .and_then(Value::as_array)
                .filter(|t| !t.is_empty())
            {
                let t: Vec<&str> = t.iter().filter_map(Value::as_str).collect();
                println!("  {:<15} {}", "tags", t.join(", "));
            }
            if let Some(spec) = a.get("spec") {
                let cmd: Vec<String> = std::iter::once(s(spec, "command"))
                    .chain(
                        spec.get("args")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|x| x.as_str().map(String::from)),
                    )
                    .collect();
                println!("  {:<15} {}", "command", cmd.join(" "));
                for k in [
                    "cwd",
                    "user",
                    "restart",
                    "restart_delay_ms",
                    "max_restarts",
                    "min_uptime_ms",
                    "kill_timeout_ms",
                    "stop_signal",
                    "max_memory_bytes",
                    "cron_restart",
                ] {
                    if let Some(x) = spec.get(k).filter(|x| !x.is_null()) {
                        println!(
                            "  {k:<15} {}",
                            x.as_str()
                                .map(String::from)
                                .unwrap_or_else(|| x.to_string())
                        );
                    }
                }
                if let Some(env) = spec.get("env").and_then(Value::as_object) {
                    for (k, v) in env {
                        println!("  env {k}={}", v.as_str().unwrap_or(""));
                    }
                }
            }
            if let Some(f) = a.get("log_files").and_then(Value::as_array) {
                for (i, p) in f.iter().enumerate() {
                    let label = if i == 0 { "out log" } else { "err log" };
                    println!("  {label:<15} {}", p.as_str().unwrap_or(""));
                }
            }
        }
    }

    /// Prints one streamed log line; false when stdout is closed.
    pub fn log_line(&self, out: &mut impl Write, item: &Value) -> bool {
        let r = if self.json {
            writeln!(out, "{item}")
        } else {
            let app = item.get("app").and_then(Value::as_str).unwrap_or("");
            let st = item.get("stream").and_then(Value::as_str).unwrap_or("");
            let line = item.get("line").and_then(Value::as_str).unwrap_or("");
            let tag = if st == "err" { "err" } else { "out" };
            writeln!(out, "{app}|{tag}| {line}")
        };
        r.and_then(|_| out.flush()).is_ok()
    }

    /// Prints lifecycle events.
    pub fn events(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        let rows: Vec<Vec<String>> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                vec![
                    s(e, "at"),
                    s(e, "app"),
                    s(e, "kind"),
                    s(e, "actor"),
                    s(e, "detail"),
                ]
            })
            .collect();
        table(&["at", "app", "event", "actor", "detail"], &rows);
    }

    /// Prints audit rows.
    pub fn audit(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        let rows: Vec<Vec<String>> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let apps: Vec<String> = e
                    .get("apps")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect();
                vec![
                    s(e, "at"),
                    s(e, "actor"),
                    s(e, "socket"),
                    s(e, "op"),
                    apps.join(","),
                    s(e, "outcome"),
                ]
            })
            .collect();
        table(&["at", "actor", "socket", "op", "apps", "outcome"], &rows);
    }

    /// Prints the caller's identity.
    pub fn whoami(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        println!(
            "{}:{} via {} socket, tier {}",
            s(v, "class"),
            s(v, "label"),
            s(v, "socket"),
            s(v, "tier")
        );
    }

    /// Prints the lanes, then the bridge's routes and counters.
    pub fn lanes(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        let agents = v.get("agents").and_then(Value::as_array);
        let mut rows = Vec::new();
        for a in agents.into_iter().flatten() {
            for st in a
                .get("streams")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                rows.push(vec![
                    s(a, "agent"),
                    s(a, "acl_user"),
                    s(st, "key"),
                    s(st, "length"),
                    s(st, "pending"),
                ]);
            }
        }
        if rows.is_empty() {
            println!("no agents; define one with `oxidepm start --kind agent --name <name> -- <command>`");
            return;
        }
        table(&["agent", "acl user", "stream", "length", "pending"], &rows);
        for a in agents.into_iter().flatten() {
            println!("{}: {}", s(a, "agent"), s(a, "socket"));
        }
        if let Some(b) = v.get("bridge") {
            println!();
            self.routes(b);
        }
    }

    /// Prints the routing table and the bridge's counters.
    pub fn routes(&self, v: &Value) {
        if self.json {
            return print_json(v);
        }
        let rows: Vec<Vec<String>> = v
            .get("routes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                let (k, m) = ["channel", "guild", "address"]
                    .iter()
                    .find_map(|k| r.get(*k).and_then(Value::as_str).map(|m| (*k, m)))
                    .unwrap_or(("-", "-"));
                vec![
                    s(r, "source"),
                    format!("{k}={m}"),
                    s(r, "agent"),
                    s(r, "origin"),
                ]
            })
            .collect();
        if rows.is_empty() {
            println!("no routes");
        } else {
            table(&["source", "match", "agent", "origin"], &rows);
        }
        println!("default agent: {}", s(v, "default_agent"));
        if let Some(c) = v.get("counters").and_then(Value::as_object) {
            let parts: Vec<String> = c.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!("counters: {}", parts.join(", "));
        }
    }
}
