//! A file's apps written back as an oxidepm TOML app file: every field that
//! differs from what the TOML loader would take by default, so that the
//! output loads back into the same specs, and a `#` comment for each note.

use super::{Loaded, Note};
use oxidepm_proto::app::defaults;
use oxidepm_proto::{AppKind, AppSpec, HealthProbe, HealthSpec, RestartPolicy};
use std::fmt::Write;
use std::path::Path;

/// Renders `loaded` as TOML; `source` is named in the header.
pub fn render(loaded: &Loaded, source: &Path) -> String {
    let mut out = String::new();
    comment(&mut out, &format!("oxidepm apps from {}", source.display()));
    for note in loaded.notes.iter().filter(|n| n.app.is_none()) {
        note_line(&mut out, note);
    }
    for app in &loaded.apps {
        out.push('\n');
        for note in loaded
            .notes
            .iter()
            .filter(|n| n.app.as_deref() == Some(&app.name))
        {
            note_line(&mut out, note);
        }
        render_app(&mut out, app);
    }
    out
}

fn comment(out: &mut String, text: &str) {
    // A comment ends at a line break, so none may be inside.
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let _ = writeln!(out, "# {text}");
}

fn note_line(out: &mut String, note: &Note) {
    comment(out, &format!("{}: {}", note.field, note.message));
}

/// A string as a TOML value, quoted and escaped by the toml crate.
fn string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A number of milliseconds or bytes: a TOML integer when it fits one.
fn number(n: u64) -> String {
    match i64::try_from(n) {
        Ok(i) => toml::Value::Integer(i).to_string(),
        Err(_) => string(&n.to_string()),
    }
}

/// A duration as the loader reads it back exactly: `"1m 30s"`, `"500ms"`.
fn duration(ms: u64) -> String {
    if ms == 0 {
        return "0".into();
    }
    string(&humantime::format_duration(std::time::Duration::from_millis(ms)).to_string())
}

/// A size in the largest binary unit that divides it: `"512M"`.
fn size(bytes: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return string(&format!("{}{unit}", bytes >> shift));
        }
    }
    number(bytes)
}

fn strings(items: &[String]) -> String {
    let array: toml::value::Array = items
        .iter()
        .map(|s| toml::Value::String(s.clone()))
        .collect();
    toml::Value::Array(array).to_string()
}

/// A key, bare when TOML allows it, quoted otherwise.
fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        k.to_string()
    } else {
        string(k)
    }
}

fn field(out: &mut String, name: &str, value: String) {
    let _ = writeln!(out, "{name} = {value}");
}

fn render_app(out: &mut String, app: &AppSpec) {
    let _ = writeln!(out, "[[apps]]");
    program(out, app);
    restarts(out, app);
    labels(out, app);
    if !app.env.is_empty() {
        let _ = writeln!(out, "[apps.env]");
        for (k, v) in &app.env {
            let _ = writeln!(out, "{} = {}", key(k), string(v));
        }
    }
    if let Some(h) = &app.health {
        health(out, h);
    }
}

/// What runs, where and as whom.
fn program(out: &mut String, app: &AppSpec) {
    field(out, "name", string(&app.name));
    field(out, "script", string(&app.command));
    // The loader would pick an interpreter from these extensions.
    let inferred = Path::new(&app.command)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "js" | "mjs" | "cjs" | "py"));
    if inferred {
        field(out, "interpreter", string("none"));
    }
    if !app.args.is_empty() {
        field(out, "args", strings(&app.args));
    }
    if let Some(cwd) = &app.cwd {
        field(out, "cwd", string(cwd));
    }
    if let Some(user) = &app.user {
        field(out, "user", string(user));
    }
}

/// The restart policy, the stop and the logs, where not the defaults.
fn restarts(out: &mut String, app: &AppSpec) {
    if app.restart != RestartPolicy::Always {
        field(out, "restart", string(app.restart.as_str()));
    }
    let ms = [
        ("restart_delay", app.restart_delay_ms, 0),
        (
            "exp_backoff_restart_delay",
            app.exp_backoff_ms,
            defaults::backoff_ms(),
        ),
        ("min_uptime", app.min_uptime_ms, defaults::min_uptime_ms()),
        (
            "kill_timeout",
            app.kill_timeout_ms,
            defaults::kill_timeout_ms(),
        ),
        ("log_max_size", app.log_max_bytes, defaults::log_max_bytes()),
    ];
    for (name, value, default) in ms {
        if value != default && name == "log_max_size" {
            field(out, name, size(value));
        } else if value != default {
            field(out, name, duration(value));
        }
    }
    if app.max_restarts != defaults::max_restarts() {
        field(out, "max_restarts", number(app.max_restarts.into()));
    }
    if app.log_keep != defaults::log_keep() {
        field(out, "log_files_kept", number(app.log_keep.into()));
    }
    if app.stop_signal != defaults::stop_signal() {
        field(out, "stop_signal", string(&app.stop_signal));
    }
    if let Some(bytes) = app.max_memory_bytes {
        field(out, "max_memory_restart", size(bytes));
    }
    if let Some(cron) = &app.cron_restart {
        field(out, "cron_restart", string(cron));
    }
    if let Some(w) = &app.watch {
        if w.paths.is_empty() {
            field(out, "watch", "true".into());
        } else {
            field(out, "watch", strings(&w.paths));
        }
        if !w.ignore.is_empty() {
            field(out, "ignore_watch", strings(&w.ignore));
        }
        if w.delay_ms != defaults::watch_delay_ms() {
            field(out, "watch_delay", number(w.delay_ms));
        }
    }
    if !app.log_timestamps {
        field(out, "time", "false".into());
    }
    if let Some(target) = app.log_target {
        field(out, "log_target", string(target.as_str()));
    }
}

/// Tags, kind, protection, autostart and dependencies.
fn labels(out: &mut String, app: &AppSpec) {
    if !app.tags.is_empty() {
        field(out, "tags", strings(&app.tags));
    }
    if app.kind != AppKind::App {
        field(out, "kind", string(app.kind.as_str()));
    }
    if app.protected {
        field(out, "protected", "true".into());
    }
    if !app.autostart {
        field(out, "autostart", "false".into());
    }
    if !app.depends_on.is_empty() {
        let entries: Vec<String> = app
            .depends_on
            .iter()
            .map(|d| {
                let condition = match d.condition {
                    oxidepm_proto::DependencyCondition::Started => "started",
                    oxidepm_proto::DependencyCondition::Healthy => "healthy",
                    oxidepm_proto::DependencyCondition::Completed => "completed",
                };
                format!(
                    "{{ app = {}, condition = {} }}",
                    string(&d.app),
                    string(condition)
                )
            })
            .collect();
        field(out, "depends_on", format!("[{}]", entries.join(", ")));
    }
}

/// `[apps.health]`: every field, defaults too.
fn health(out: &mut String, h: &HealthSpec) {
    let _ = writeln!(out, "[apps.health]");
    let _ = match &h.probe {
        HealthProbe::Http(url) => writeln!(out, "http = {}", string(url)),
        HealthProbe::Tcp(addr) => writeln!(out, "tcp = {}", string(addr)),
        HealthProbe::Command(cmd) => writeln!(out, "command = {}", strings(cmd)),
    };
    if let Some(status) = h.expect_status {
        let _ = writeln!(out, "expect_status = {status}");
    }
    let _ = writeln!(out, "interval = {}", duration(h.interval_ms));
    let _ = writeln!(out, "timeout = {}", duration(h.timeout_ms));
    let _ = writeln!(out, "retries = {}", h.retries);
    let _ = writeln!(out, "start_period = {}", duration(h.start_period_ms));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::appfile::{load_with, LoadOptions};

    #[test]
    fn the_native_formats_load_back() {
        let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/appfile/testdata");
        for file in [
            "three.toml",
            "three.yaml",
            "three.json",
            "ecosystem.config.json",
        ] {
            let path = testdata.join(file);
            let loaded = load_with(&path, &LoadOptions::default()).unwrap();
            let text = render(&loaded, &path);
            let dir = tempfile::tempdir().unwrap();
            let toml = dir.path().join("apps.toml");
            std::fs::write(&toml, &text).unwrap();
            let back = load_with(&toml, &LoadOptions::default()).unwrap();
            assert_eq!(back.apps, loaded.apps, "{file}:\n{text}");
        }
    }

    #[test]
    fn odd_values_load_back() {
        let mut app = AppSpec::new(
            "web",
            "/srv/app/server.py",
            vec!["a \"b\"\n".into(), "".into()],
        );
        app.cwd = Some("/srv/my app".into());
        app.env.insert("A.B".into(), "x = \"y\"\\ \n z".into());
        app.env.insert("PLAIN".into(), String::new());
        app.restart = RestartPolicy::OnFailure;
        app.kill_timeout_ms = 0;
        app.restart_delay_ms = 1_501;
        app.min_uptime_ms = 7 * 24 * 3600 * 1000;
        app.log_max_bytes = (3 << 20) + 1;
        app.max_memory_bytes = Some(1536 << 20);
        app.tags = vec!["t".into()];
        app.autostart = false;
        app.depends_on = vec![oxidepm_proto::Dependency {
            app: "db".into(),
            condition: oxidepm_proto::DependencyCondition::Healthy,
        }];
        app.health = Some(oxidepm_proto::HealthSpec {
            probe: HealthProbe::Command(vec!["true".into()]),
            expect_status: None,
            interval_ms: 1000,
            timeout_ms: 500,
            retries: 3,
            start_period_ms: 0,
        });
        let mut db = AppSpec::new("db", "redis-server", vec![]);
        db.cwd = Some("/".into());
        let loaded = Loaded {
            apps: vec![db, app],
            notes: vec![Note {
                app: Some("web".into()),
                field: "x".into(),
                message: "two\nlines".into(),
            }],
        };
        let text = render(&loaded, Path::new("/etc/x.conf"));
        assert!(
            text.contains("# x: two lines\n[[apps]]\nname = \"web\""),
            "{text}"
        );
        assert!(text.contains("restart_delay = \"1s 501ms\""), "{text}");
        assert!(text.contains("max_memory_restart = \"1536M\""), "{text}");
        assert!(text.contains("log_max_size = 3145729"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("apps.toml");
        std::fs::write(&file, &text).unwrap();
        let back = load_with(&file, &LoadOptions::default()).unwrap();
        assert_eq!(back.apps, loaded.apps, "{text}");
    }
}
