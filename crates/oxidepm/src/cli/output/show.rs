//! `show`: one app in full, in human units, with its last log lines (as
//! `systemctl status` ends with the unit's last journal lines).

use super::table::status_style;
use super::Printer;
use oxidepm_proto::{AppInfo, LogLine, LogStream};
use std::fmt::Display;
use std::io::{self, Write};
use std::time::Duration;

/// `512 B`, `200 MiB`, `1.2 GiB`: binary units, one decimal past KiB.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut f = n as f64 / 1024.0;
    let mut unit = 0;
    while f >= 1024.0 && unit + 1 < UNITS.len() {
        f /= 1024.0;
        unit += 1;
    }
    let s = format!("{f:.1}");
    let s = s.strip_suffix(".0").unwrap_or(&s);
    format!("{s} {}", UNITS[unit])
}

/// `5s`, `1m 30s`, `250ms`: a duration as humantime writes it, to the
/// second once it is a second or more.
pub(crate) fn human_ms(ms: u64) -> String {
    let d = if ms >= 1000 {
        Duration::from_secs(ms / 1000)
    } else {
        Duration::from_millis(ms)
    };
    humantime::format_duration(d).to_string()
}

/// `  key             value`, as `show` lists fields.
fn field(out: &mut impl Write, k: &str, v: impl Display) -> io::Result<()> {
    writeln!(out, "  {k:<15} {v}")
}

impl Printer {
    /// Prints apps in full, each followed by its lines of `logs` (the
    /// last lines the caller asked for, already read).
    pub fn show(&self, apps: &[AppInfo], logs: &[LogLine]) -> io::Result<()> {
        let mut out = io::stdout().lock();
        if self.json {
            return self.json_to(&mut out, &apps);
        }
        for a in apps {
            self.show_one(&mut out, a)?;
            let lines: Vec<&LogLine> = logs.iter().filter(|l| l.app == a.name).collect();
            if !lines.is_empty() {
                writeln!(out)?;
                for l in lines {
                    let tag = match l.stream {
                        LogStream::Err => "err",
                        LogStream::Out => "out",
                    };
                    writeln!(out, "  {tag}| {}", self.text(&l.line))?;
                }
            }
        }
        out.flush()
    }

    fn show_one(&self, out: &mut impl Write, a: &AppInfo) -> io::Result<()> {
        writeln!(out, "{} [{}]", a.name, a.id)?;
        // An app waiting to restart says so, with the reason and time left.
        let (key, status) = match &a.waiting {
            Some(w) => ("waiting", super::waiting(w)),
            None => (a.status.as_str(), a.status.as_str().to_string()),
        };
        let shown = if self.color {
            let st = status_style(key);
            format!("{}{status}{}", st.render(), st.render_reset())
        } else {
            status
        };
        field(out, "status", shown)?;
        if let Some(p) = a.pid {
            field(out, "pid", p)?;
        }
        if let Some(up) = a.uptime_ms {
            let since = crate::timefmt::now_ms().saturating_sub(up as i64);
            let since = crate::timefmt::rfc3339_ms(since);
            field(out, "uptime", format!("{} (since {since})", human_ms(up)))?;
        }
        field(out, "restarts", a.restarts)?;
        if let Some(c) = a.last_exit_code {
            field(out, "last exit code", c)?;
        }
        if let Some(h) = a.health {
            field(out, "health", h.as_str())?;
        }
        if let Some(c) = a.cpu_percent {
            field(out, "cpu", format!("{:.0}%", f64::from(c)))?;
        }
        if let Some(m) = a.memory_bytes {
            field(out, "memory", human_bytes(m))?;
        }
        field(out, "kind", a.kind.as_str())?;
        field(out, "protected", a.protected)?;
        field(out, "defined_by", &a.defined_by)?;
        if let Some(c) = &a.containment {
            field(out, "containment", c)?;
        }
        if !a.tags.is_empty() {
            field(out, "tags", a.tags.join(", "))?;
        }
        if let Some(spec) = &a.spec {
            let cmd: Vec<&str> = std::iter::once(spec.command.as_str())
                .chain(spec.args.iter().map(String::as_str))
                .collect();
            field(out, "command", self.text(&cmd.join(" ")))?;
            if let Some(d) = &spec.cwd {
                field(out, "cwd", self.text(d))?;
            }
            if let Some(u) = &spec.user {
                field(out, "user", self.text(u))?;
            }
            field(out, "restart", spec.restart.as_str())?;
            field(out, "restart delay", human_ms(spec.restart_delay_ms))?;
            field(out, "max restarts", spec.max_restarts)?;
            field(out, "min uptime", human_ms(spec.min_uptime_ms))?;
            field(out, "kill timeout", human_ms(spec.kill_timeout_ms))?;
            field(out, "stop signal", &spec.stop_signal)?;
            if let Some(m) = spec.max_memory_bytes {
                field(out, "max memory", human_bytes(m))?;
            }
            if let Some(c) = &spec.cron_restart {
                field(out, "cron restart", c)?;
            }
            if let Some(w) = &spec.watch {
                let paths = if w.paths.is_empty() {
                    "the cwd".to_string()
                } else {
                    self.text(&w.paths.join(", ")).to_string()
                };
                let mut ignoring: Vec<&str> = oxidepm_proto::WATCH_ALWAYS_IGNORED.to_vec();
                ignoring.extend(w.ignore.iter().map(String::as_str));
                let ignoring = self.text(&ignoring.join(", ")).to_string();
                let delay = human_ms(w.delay_ms);
                field(
                    out,
                    "watch",
                    format!(
                        "{paths} (ignoring {ignoring}; restarts {delay} after the last change)"
                    ),
                )?;
            }
            for (k, v) in &spec.env {
                writeln!(out, "  env {}={}", self.text(k), self.text(v))?;
            }
        }
        if let Some([o, e]) = &a.log_files {
            field(out, "out log", o)?;
            field(out, "err log", e)?;
        }
        if let Some(n) = a.log_dropped_bytes.filter(|n| *n > 0) {
            field(out, "log lost", format!("{} ({n} bytes)", human_bytes(n)))?;
        }
        if a.log_pipes_kept == Some(false) {
            field(
                out,
                "log pipes",
                "not kept: the daemon is short of descriptors, so if this app's log writer \
                 dies the app dies at its next write; raise the daemon's open-file limit \
                 (ulimit -n, LimitNOFILE=) and restart the app",
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(200 * 1024 * 1024), "200 MiB");
        assert_eq!(human_bytes(1288490189), "1.2 GiB");
    }

    #[test]
    fn durations_in_seconds_past_one_second() {
        assert_eq!(human_ms(5000), "5s");
        assert_eq!(human_ms(90_500), "1m 30s");
        assert_eq!(human_ms(250), "250ms");
        assert_eq!(human_ms(0), "0s");
    }
}
