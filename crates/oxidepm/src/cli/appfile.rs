//! App config files (TOML, YAML, JSON): parsing them into validated [`AppSpec`]s.
//!
//! A file holds a list of apps: `[[apps]]` tables in TOML; in YAML and JSON an
//! object with an `apps` list (pm2's ecosystem shape) or a bare list. Field
//! names are pm2's wherever pm2 has one, so a pm2 `ecosystem.config.json` or
//! `.yaml` loads as it is. pm2 fields that only make sense in pm2 (watching,
//! cluster mode, log formatting, keymetrics, `deploy`) are accepted and change
//! nothing; pm2's `env_<name>` sections (`env_production`, ...) are accepted but
//! **not applied**: only `env` (and `env_file`) reach the app. pm2 fields whose
//! meaning oxidepm cannot honour (`instances` > 1, cluster `exec_mode`,
//! `watch: true`, log and pid file paths, ...) are errors that say what to do,
//! and so is any unknown field. In YAML, anchors may live under top-level
//! `x-*` keys, and merge keys (`<<: *anchor`) are applied.
//!
//! Every error names the file, the line and column when the format's parser
//! knows them, the app and the field, and nothing is returned unless the
//! whole file is valid.

mod de;
mod fields;
mod nested;
mod resolve;
mod text;
mod values;

pub use text::{parse_duration_ms, parse_size};

use oxidepm_proto::AppSpec;
use serde::de::DeserializeSeed;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Config file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TOML, with `[[apps]]` tables.
    Toml,
    /// YAML, pm2's ecosystem shape or a list of apps.
    Yaml,
    /// JSON, pm2's ecosystem shape or a list of apps.
    Json,
}

impl Format {
    /// The format of a file, from its extension (`ecosystem.config.json` is JSON).
    pub fn from_path(p: &Path) -> Option<Format> {
        let extension = p.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "toml" => Some(Format::Toml),
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// Why an app file (or env file) was refused: where, and what to do.
#[derive(Debug)]
pub struct AppFileError {
    path: PathBuf,
    line: Option<usize>,
    column: Option<usize>,
    message: String,
}

impl AppFileError {
    fn new(path: &Path, message: impl Into<String>) -> AppFileError {
        AppFileError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// The file at fault.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The 1-based line at fault, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The 1-based column at fault, when known.
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// The message without the location.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for AppFileError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for AppFileError {}

/// Loads every app of a config file, resolved and validated, or a clear error.
pub fn load(path: &Path) -> Result<Vec<AppSpec>, AppFileError> {
    let Some(format) = Format::from_path(path) else {
        let name = path.to_string_lossy();
        let message = if [".js", ".cjs", ".mjs"].iter().any(|e| name.ends_with(e)) {
            "JavaScript config files cannot be read; write the object that the file exports \
             as JSON in ecosystem.config.json, or use TOML or YAML"
        } else {
            "unknown config file type; name it *.toml, *.yaml, *.yml or *.json"
        };
        return Err(AppFileError::new(path, message));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| AppFileError::new(path, format!("cannot read: {e}")))?;
    parse(&text, format, path)
}

/// Parses the text of a config file; `origin` is its path (for messages and as the base of relative paths).
pub fn parse(text: &str, format: Format, origin: &Path) -> Result<Vec<AppSpec>, AppFileError> {
    let base = base_dir(origin)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(no_apps(origin, format));
    }
    let ctx = de::Ctx::new(&base);
    let parsed = match format {
        Format::Toml => de::Root(&ctx)
            .deserialize(toml::Deserializer::new(text))
            .map_err(|e| {
                let (line, column) = e.span().map(|s| line_column(text, s.start)).unzip();
                (e.message().to_string(), line, column)
            }),
        Format::Json => {
            let mut json = serde_json::Deserializer::from_str(text);
            de::Root(&ctx)
                .deserialize(&mut json)
                .and_then(|apps| json.end().map(|()| apps))
                .map_err(|e| {
                    let message = e.to_string();
                    if e.line() == 0 {
                        return (message, None, None);
                    }
                    let suffix = format!(" at line {} column {}", e.line(), e.column());
                    let message = message.strip_suffix(&suffix).unwrap_or(&message);
                    (message.to_string(), Some(e.line()), Some(e.column()))
                })
        }
        // serde_yaml_ng applies merge keys only when building a Value, which
        // has no locations: a file with `<<: *anchor` gets errors without lines.
        Format::Yaml if text.contains("<<") => serde_yaml_ng::from_str(text)
            .and_then(|mut value: serde_yaml_ng::Value| {
                value.apply_merge()?;
                de::Root(&ctx).deserialize(value)
            })
            .map_err(yaml_error),
        Format::Yaml => de::Root(&ctx)
            .deserialize(serde_yaml_ng::Deserializer::from_str(text))
            .map_err(yaml_error),
    };
    match parsed {
        Ok(apps) if apps.is_empty() => Err(no_apps(origin, format)),
        Ok(apps) => Ok(apps),
        Err((message, line, column)) => {
            let mut context = String::new();
            if let Some(index) = ctx.app.get() {
                let known = ctx.app_name.borrow().clone();
                match known.or_else(|| app_name_at(text, format, index)) {
                    Some(name) => context.push_str(&format!("app {name:?}: ")),
                    None => context.push_str(&format!("app #{}: ", index + 1)),
                }
            }
            let field = ctx.field.borrow().join(".");
            if !field.is_empty() {
                context.push_str(&format!("field {field:?}: "));
            }
            Err(AppFileError {
                path: origin.to_path_buf(),
                line,
                column,
                message: context + &message,
            })
        }
    }
}

/// Reads an env file of KEY=VALUE lines (comments with #, optional quotes, optional `export `).
///
/// Values are taken literally: `$VAR` is not expanded. In double quotes,
/// `\n`, `\t`, `\"` and `\\` are escapes and a value may span lines.
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>, AppFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AppFileError::new(path, format!("cannot read: {e}")))?;
    text::parse_env(&text).map_err(|(line, message)| AppFileError {
        line: Some(line),
        ..AppFileError::new(path, message)
    })
}

fn no_apps(origin: &Path, format: Format) -> AppFileError {
    AppFileError::new(
        origin,
        match format {
            Format::Toml => "no apps in this file; add an [[apps]] table with a script",
            _ => "no apps in this file; add an \"apps\" list with at least one app",
        },
    )
}

/// The absolute directory of the file, which relative paths start from.
fn base_dir(origin: &Path) -> Result<PathBuf, AppFileError> {
    let parent = origin.parent().unwrap_or(Path::new(""));
    let dir = if parent.is_absolute() {
        parent.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| {
                AppFileError::new(origin, format!("cannot get the current directory: {e}"))
            })?
            .join(parent)
    };
    let dir: PathBuf = dir.components().collect();
    if dir.to_str().is_none() {
        return Err(AppFileError::new(
            origin,
            "the file's directory is not valid UTF-8; move the file elsewhere",
        ));
    }
    Ok(dir)
}

/// The message, line and column of a YAML error.
fn yaml_error(e: serde_yaml_ng::Error) -> (String, Option<usize>, Option<usize>) {
    let mut message = e.to_string();
    let location = e.location();
    if let Some(l) = &location {
        let at = format!(" at line {} column {}", l.line(), l.column());
        message = message.replacen(&at, "", 1);
    }
    (
        strip_yaml_path(&message).to_string(),
        location.as_ref().map(|l| l.line()),
        location.as_ref().map(|l| l.column()),
    )
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

/// Drops the `apps[0].field: ` path that serde_yaml_ng puts before messages,
/// since the error names the app and field itself.
fn strip_yaml_path(message: &str) -> &str {
    match message.split_once(": ") {
        Some((path, rest))
            if !path.contains(char::is_whitespace)
                && (path.starts_with("apps") || path.starts_with('[')) =>
        {
            rest
        }
        _ => message,
    }
}

/// The name of app `index`, read leniently, for messages about an app whose
/// error came before its `name` was read.
fn app_name_at(text: &str, format: Format, index: usize) -> Option<String> {
    let value: serde_json::Value = match format {
        Format::Toml => toml::from_str(text).ok()?,
        Format::Yaml => serde_yaml_ng::from_str(text).ok()?,
        Format::Json => serde_json::from_str(text).ok()?,
    };
    let apps = value.get("apps").unwrap_or(&value).as_array()?;
    let app = apps.get(index)?;
    if let Some(name) = app.get("name").and_then(|n| n.as_str()) {
        return Some(name.to_string());
    }
    let script = app.get("script")?.as_str()?;
    Some(Path::new(script).file_stem()?.to_str()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxidepm_proto::{AppKind, DependencyCondition, RestartPolicy};

    fn parse_ok(text: &str, format: Format) -> Vec<AppSpec> {
        match parse(text, format, Path::new("/srv/demo/apps.conf")) {
            Ok(apps) => apps,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn parse_err(text: &str, format: Format) -> String {
        let origin = match format {
            Format::Toml => "/srv/demo/apps.toml",
            Format::Yaml => "/srv/demo/apps.yaml",
            Format::Json => "/srv/demo/apps.json",
        };
        match parse(text, format, Path::new(origin)) {
            Ok(apps) => panic!("expected an error, got {apps:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn toml_app(fields: &str) -> String {
        format!("[[apps]]\nname = \"web\"\nscript = \"server\"\n{fields}\n")
    }

    const THREE_TOML: &str = include_str!("appfile/testdata/three.toml");

    const THREE_YAML: &str = include_str!("appfile/testdata/three.yaml");

    const THREE_JSON: &str = include_str!("appfile/testdata/three.json");

    #[test]
    fn the_three_formats_give_the_same_apps() {
        let toml = parse_ok(THREE_TOML, Format::Toml);
        assert_eq!(toml, parse_ok(THREE_YAML, Format::Yaml));
        assert_eq!(toml, parse_ok(THREE_JSON, Format::Json));

        let web = &toml[0];
        assert_eq!(web.command, "node");
        assert_eq!(
            web.args,
            [
                "/srv/demo/web/server.js",
                "--port",
                "8080",
                "--title",
                "a b"
            ]
        );
        assert_eq!(web.cwd.as_deref(), Some("/srv/demo/web"));
        assert_eq!(web.env["PORT"], "8080");
        assert_eq!(web.env["DEBUG"], "true");
        assert_eq!(web.max_memory_bytes, Some(200 << 20));
        assert_eq!(web.min_uptime_ms, 5000);
        assert_eq!(web.kill_timeout_ms, 3000);
        assert_eq!(web.stop_signal, "SIGINT");
        assert_eq!(web.cron_restart.as_deref(), Some("0 3 * * *"));
        assert_eq!(web.tags, ["front", "http", "shop"]);
        let health = web.health.as_ref().unwrap();
        assert_eq!(health.expect_status, Some(200));
        assert_eq!(
            (
                health.interval_ms,
                health.timeout_ms,
                health.retries,
                health.start_period_ms
            ),
            (10_000, 2000, 3, 0)
        );

        let worker = &toml[1];
        assert_eq!(worker.command, "/usr/bin/worker");
        assert_eq!(worker.args, ["--queue", "jobs", "3"]);
        assert_eq!(worker.cwd.as_deref(), Some("/srv/demo"));
        assert_eq!(worker.restart, RestartPolicy::OnFailure);
        assert_eq!(
            (
                worker.restart_delay_ms,
                worker.exp_backoff_ms,
                worker.max_restarts
            ),
            (1000, 250, 5)
        );
        assert!(!worker.log_timestamps);
        assert_eq!((worker.log_max_bytes, worker.log_keep), (10 << 20, 3));
        assert_eq!(worker.user.as_deref(), Some("www-data"));
        assert_eq!(worker.depends_on[0].condition, DependencyCondition::Started);
        assert_eq!(worker.depends_on[1].app, "db");
        assert_eq!(worker.depends_on[1].condition, DependencyCondition::Healthy);

        let cleanup = &toml[2];
        assert_eq!(cleanup.name, "cleanup");
        assert_eq!(cleanup.command, "python3");
        assert_eq!(cleanup.args, ["-u", "/srv/demo/jobs/cleanup.py"]);
        assert_eq!(cleanup.restart, RestartPolicy::Never);
        assert_eq!(cleanup.kind, AppKind::Agent);
        assert!(cleanup.protected && !cleanup.autostart);
        assert_eq!(cleanup.health.as_ref().unwrap().retries, 5);
    }

    #[test]
    fn defaults_come_from_app_spec() {
        let apps = parse_ok(
            "[[apps]]\nscript = \"/bin/sleep\"\nargs = \"60\"\n",
            Format::Toml,
        );
        let mut expected = AppSpec::new("sleep", "/bin/sleep", vec!["60".into()]);
        expected.cwd = Some("/srv/demo".into());
        assert_eq!(apps, [expected]);
    }

    #[test]
    fn a_pm2_ecosystem_file_loads_as_it_is() {
        let text = include_str!("appfile/testdata/ecosystem.config.json");
        let apps = parse_ok(text, Format::Json);
        let api = &apps[0];
        assert_eq!(api.command, "node");
        assert_eq!(
            api.args,
            [
                "--max-old-space-size=4096",
                "/var/www/api/dist/index.js",
                "--color"
            ]
        );
        assert_eq!(api.cwd.as_deref(), Some("/var/www/api"));
        assert_eq!(api.env.len(), 2, "env_production is not applied");
        assert_eq!(api.env["NODE_ENV"], "development");
        assert_eq!(api.max_memory_bytes, Some(1 << 30));
        assert_eq!(api.restart, RestartPolicy::Always);
        assert_eq!((api.restart_delay_ms, api.kill_timeout_ms), (4000, 1600));
        assert_eq!(api.tags, ["backend"]);
        let next = &apps[1];
        assert_eq!(
            (next.command.as_str(), next.args.as_slice()),
            ("npm", &["start".to_string()][..])
        );
        assert_eq!(next.user.as_deref(), Some("deploy"));
    }

    #[test]
    fn unknown_fields_name_file_line_app_and_field() {
        let toml = "[[apps]]\nname = \"web\"\nscirpt = \"server\"\n";
        let e = parse_err(toml, Format::Toml);
        assert!(
            e.starts_with("/srv/demo/apps.toml:3:1: app \"web\": unknown field \"scirpt\" (did you mean \"script\"?); expected one of name, script, args,"),
            "{e}"
        );

        let yaml = "apps:\n  - name: web\n    script: server\n    colour: red\n";
        let e = parse_err(yaml, Format::Yaml);
        assert!(
            e.starts_with(
                "/srv/demo/apps.yaml:4:5: app \"web\": unknown field \"colour\"; expected one of"
            ),
            "{e}"
        );

        let json = "{\"apps\": [\n {\"script\": \"a\"},\n {\"name\": \"b\",\n  \"bogus\": 1, \"script\": \"b\"}]}";
        let e = parse_err(json, Format::Json);
        assert!(
            e.starts_with("/srv/demo/apps.json:4:9: app \"b\": unknown field \"bogus\""),
            "{e}"
        );

        // Before the name is read, the app is still named.
        let e = parse_err(
            "[[apps]]\nbogus = 1\nname = \"late\"\nscript = \"x\"\n",
            Format::Toml,
        );
        assert!(e.contains("app \"late\": unknown field \"bogus\""), "{e}");
        let e = parse_err("[[apps]]\nbogus = 1\n", Format::Toml);
        assert!(e.contains(":2:1: app #1: unknown field"), "{e}");

        let e = parse_err("app = []\n", Format::Toml);
        assert!(
            e.contains("unknown top-level key \"app\" (did you mean \"apps\"?)"),
            "{e}"
        );
        let e = parse_err(
            "[[apps]]\nname = \"w\"\nscript = \"x\"\nhealth = { tcp = \"h:1\", intervl = 5 }\n",
            Format::Toml,
        );
        assert!(e.contains(":4:"), "{e}");
        assert!(e.contains("app \"w\": field \"health\": unknown health field \"intervl\" (did you mean \"interval\"?)"), "{e}");
    }

    #[test]
    fn value_errors_point_at_the_value() {
        let e = parse_err(&toml_app("min_uptime = \"5 parsecs\""), Format::Toml);
        assert!(
            e.starts_with("/srv/demo/apps.toml:4:14: app \"web\": field \"min_uptime\": invalid duration \"5 parsecs\""),
            "{e}"
        );
        let e = parse_err(
            "apps:\n- name: web\n  script: x\n  max_memory_restart: 12Q\n",
            Format::Yaml,
        );
        assert!(e.starts_with("/srv/demo/apps.yaml:4:23: app \"web\": field \"max_memory_restart\": invalid size \"12Q\""), "{e}");
        let e = parse_err(
            "[{\"name\": \"web\", \"script\": \"x\",\n \"autorestart\": \"yes\"}]",
            Format::Json,
        );
        assert!(e.starts_with("/srv/demo/apps.json:2:"), "{e}");
        assert!(e.contains("app \"web\": field \"autorestart\": invalid type: string \"yes\", expected true or false"), "{e}");
        let e = parse_err(&toml_app("kill_timeout = -5"), Format::Toml);
        assert!(e.contains("field \"kill_timeout\": -5 is negative"), "{e}");
        let e = parse_err(&toml_app("restart_delay = \"30d\""), Format::Toml);
        assert!(e.contains("is too large; the maximum is 7days"), "{e}");
        let e = parse_err(&toml_app("max_memory_restart = 1000"), Format::Toml);
        assert!(
            e.contains("1000 bytes is too small; the minimum is 1M"),
            "{e}"
        );
        let e = parse_err(&toml_app("log_files_kept = \"3\""), Format::Toml);
        assert!(e.contains("expected a whole number"), "{e}");
        let e = parse_err(&toml_app("stop_signal = \"SIGFOO\""), Format::Toml);
        assert!(e.contains("unknown signal \"SIGFOO\""), "{e}");
        let e = parse_err(&toml_app("tags = [\"a b\"]"), Format::Toml);
        assert!(e.contains("invalid tag \"a b\""), "{e}");
        let e = parse_err(&toml_app("kind = \"system\""), Format::Toml);
        assert!(e.contains("reserved for the daemon"), "{e}");
        let e = parse_err(&toml_app("cron_restart = \"daily\""), Format::Toml);
        assert!(e.contains("has 1 fields"), "{e}");
        let e = parse_err(&toml_app("args = \"'unclosed\""), Format::Toml);
        assert!(e.contains("unclosed '"), "{e}");
        let e = parse_err(
            "{\"apps\": [{\"script\": \"x\", \"name\": \"a\"}]} x",
            Format::Json,
        );
        assert!(
            e.starts_with("/srv/demo/apps.json:1:42: trailing characters"),
            "{e}"
        );
    }

    #[test]
    fn health_checks_are_validated() {
        let cases = [
            (
                "health = { expect_status = 200 }",
                "needs one of http, tcp or command",
            ),
            (
                "health = { http = \"http://h/\", tcp = \"h:1\" }",
                "not http and tcp",
            ),
            (
                "health = { tcp = \"h:1\", expect_status = 200 }",
                "expect_status applies only to http",
            ),
            (
                "health = { http = \"https://h/\" }",
                "https is not supported",
            ),
            ("health = { tcp = \"localhost\" }", "use \"host:port\""),
            ("health = { tcp = \"h:0\" }", "use \"host:port\""),
            ("health = { command = [] }", "the health command is empty"),
            ("health = { command = \"curl -f x\" }", "expected a list"),
            (
                "health = { http = \"http://h/\", expect_status = 700 }",
                "700 is too large",
            ),
            (
                "health = { http = \"http://h/\", interval = \"10ms\" }",
                "minimum is 100ms",
            ),
            (
                "health = { http = \"http://h/\", retries = 0 }",
                "0 is too small",
            ),
            (
                "health = { http = \"http://h/\", path = \"/x\" }",
                "unknown health field \"path\"",
            ),
        ];
        for (fields, expected) in cases {
            let e = parse_err(&toml_app(fields), Format::Toml);
            assert!(e.contains("field \"health"), "{fields}: {e}");
            assert!(e.contains(expected), "{fields}: {e}");
        }
        let apps = parse_ok(
            &toml_app(
                "health = { tcp = \"[::1]:5432\", timeout = \"1s\", start_period = \"30s\" }",
            ),
            Format::Toml,
        );
        let health = apps[0].health.as_ref().unwrap();
        assert_eq!(health.tcp.as_deref(), Some("[::1]:5432"));
        assert_eq!(
            (
                health.interval_ms,
                health.timeout_ms,
                health.start_period_ms
            ),
            (5000, 1000, 30_000)
        );
    }

    #[test]
    fn interpreters_are_inferred_as_pm2_does() {
        let cases = [
            ("script = \"app.js\"", "node", vec!["/srv/demo/app.js"]),
            (
                "script = \"app.mjs\"\nargs = [\"-v\"]",
                "node",
                vec!["/srv/demo/app.mjs", "-v"],
            ),
            (
                "script = \"lib/app.cjs\"",
                "node",
                vec!["/srv/demo/lib/app.cjs"],
            ),
            (
                "script = \"main.py\"\nnode_args = \"-X dev\"",
                "python3",
                vec!["-X", "dev", "/srv/demo/main.py"],
            ),
            (
                "script = \"run.rb\"\ninterpreter = \"ruby\"",
                "ruby",
                vec!["/srv/demo/run.rb"],
            ),
            (
                "script = \"app.js\"\ninterpreter = \"./bin/bun\"",
                "/srv/demo/bin/bun",
                vec!["/srv/demo/app.js"],
            ),
            (
                "script = \"app.js\"\ninterpreter = \"none\"",
                "app.js",
                vec![],
            ),
            ("script = \"./bin/server\"", "/srv/demo/bin/server", vec![]),
            ("script = \"redis-server\"", "redis-server", vec![]),
            ("script = \"/opt/x/run.sh\"", "/opt/x/run.sh", vec![]),
        ];
        for (fields, command, args) in cases {
            let apps = parse_ok(&format!("[[apps]]\nname = \"a\"\n{fields}\n"), Format::Toml);
            assert_eq!(apps[0].command, command, "{fields}");
            assert_eq!(apps[0].args, args, "{fields}");
        }
        let e = parse_err(
            "[[apps]]\nscript = \"server\"\ninterpreter_args = [\"-x\"]\n",
            Format::Toml,
        );
        assert!(
            e.contains("\"interpreter_args\" is set but \"server\" runs without an interpreter"),
            "{e}"
        );
    }

    #[test]
    fn relative_paths_start_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("srv");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("tool"), "").unwrap();
        let text = "[[apps]]\nscript = \"tool\"\ncwd = \"srv/./\"\n\n[[apps]]\nscript = \"tool\"\nname = \"t2\"\ncwd = \"../elsewhere\"\n";
        let apps = parse(text, Format::Toml, &dir.path().join("apps.toml")).unwrap();
        let root = dir.path().to_str().unwrap();
        assert_eq!(apps[0].cwd, Some(format!("{root}/srv")));
        // A bare script found in the app's directory is that file, as in pm2.
        assert_eq!(apps[0].command, format!("{root}/srv/tool"));
        assert_eq!(apps[1].cwd, Some(format!("{root}/../elsewhere")));
        assert_eq!(apps[1].command, "tool");

        // A relative origin is taken from the current directory.
        let apps = parse_ok("[[apps]]\nscript = \"x\"\n", Format::Toml);
        assert_eq!(apps[0].cwd.as_deref(), Some("/srv/demo"));
        let here = std::env::current_dir().unwrap();
        let apps = parse(
            "[[apps]]\nscript = \"x\"\ncwd = \"sub\"\n",
            Format::Toml,
            Path::new("apps.toml"),
        )
        .unwrap();
        assert_eq!(
            apps[0].cwd,
            Some(here.join("sub").to_string_lossy().into_owned())
        );
    }

    #[test]
    fn env_files_merge_under_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "# settings\nexport A=from-file\nB = 'single # kept'\nC=\"line1\\nline2\"\nD=plain # comment\nE=\"multi\nline\"\n\nF=\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("local.env"), "D=local\n").unwrap();
        let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = [\".env\", \"local.env\"]\nenv = { A = \"from-env\" }\n";
        let apps = parse(text, Format::Toml, &dir.path().join("apps.toml")).unwrap();
        let env = &apps[0].env;
        assert_eq!(env["A"], "from-env");
        assert_eq!(env["B"], "single # kept");
        assert_eq!(env["C"], "line1\nline2");
        assert_eq!(env["D"], "local");
        assert_eq!(env["E"], "multi\nline");
        assert_eq!(env["F"], "");
        assert_eq!(env.len(), 6);

        std::fs::write(dir.path().join("bad.env"), "A=1\nnot a line\n").unwrap();
        let e = read_env_file(&dir.path().join("bad.env")).unwrap_err();
        assert_eq!(e.line(), Some(2));
        assert!(
            e.to_string()
                .ends_with("bad.env:2: expected KEY=VALUE, found \"not a line\""),
            "{e}"
        );
        let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = \"bad.env\"\n";
        let e = parse(text, Format::Toml, &dir.path().join("apps.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("apps.toml:4:12: app \"a\": field \"env_file\": cannot load env file: "),
            "{e}"
        );
        assert!(e.contains("bad.env:2: expected KEY=VALUE"), "{e}");
        let text = "[[apps]]\nname = \"a\"\nscript = \"x\"\nenv_file = \"missing.env\"\n";
        let e = parse(text, Format::Toml, &dir.path().join("apps.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.env: cannot read"), "{e}");
    }

    #[test]
    fn pm2_fields_that_cannot_be_honoured_are_refused() {
        let cases = [
            (
                "instances = 4",
                "instances > 1 (cluster mode) is not supported; define one app per instance",
            ),
            ("instances = \"max\"", "cluster mode"),
            ("instances = 0", "cluster mode"),
            ("exec_mode = \"cluster\"", "cluster mode"),
            ("watch = true", "watch is not supported"),
            ("watch = [\"src\"]", "watch is not supported"),
            (
                "out_file = \"/var/log/web.log\"",
                "oxidepm keeps logs under $OXIDEPM_HOME/logs",
            ),
            ("error_file = \"/dev/null\"", "$OXIDEPM_HOME/logs"),
            ("pid_file = \"/run/web.pid\"", "tracks pids itself"),
            ("gid = \"www\"", "set \"user\""),
            ("stop_exit_codes = [0]", "on-failure"),
            ("shutdown_with_message = true", "stopped with a signal"),
            (
                "autorestart = false\nrestart = \"always\"",
                "conflicts with \"restart\" = \"always\"",
            ),
            ("autorestart = true\nrestart = \"never\"", "conflicts"),
            (
                "user = \"a\"\nuid = \"b\"",
                "\"user\" and \"uid\" are the same field; keep one",
            ),
            ("depends_on = [\"web\"]", "lists \"web\", the app itself"),
            ("depends_on = [\"db\", { app = \"db\" }]", "listed twice"),
            (
                "depends_on = [{ condition = \"healthy\" }]",
                "needs \"app\"",
            ),
            (
                "depends_on = [{ app = \"db\", condition = \"ready\" }]",
                "unknown condition",
            ),
        ];
        for (fields, expected) in cases {
            let e = parse_err(&toml_app(fields), Format::Toml);
            assert!(e.contains(expected), "{fields}: {e}");
        }
        // What pm2 would do anyway is accepted.
        parse_ok(&toml_app("instances = 1\nexec_mode = \"fork\"\nwatch = false\nshutdown_with_message = false\nautorestart = false\nrestart = \"never\""), Format::Toml);
    }

    #[test]
    fn names_are_checked() {
        let e = parse_err(
            "[[apps]]\nname = \"a\"\nscript = \"x\"\n[[apps]]\nname = \"a\"\nscript = \"y\"\n",
            Format::Toml,
        );
        assert!(e.starts_with("/srv/demo/apps.toml:5:8: app \"a\": field \"name\": app name \"a\" is used by an earlier app"), "{e}");
        let e = parse_err(
            "[[apps]]\nscript = \"/bin/x\"\n[[apps]]\nscript = \"/usr/bin/x\"\n",
            Format::Toml,
        );
        assert!(
            e.contains(
                "app \"x\": no \"name\" is set and the name from the script, \"x\", is used"
            ),
            "{e}"
        );
        let e = parse_err("[[apps]]\nname = \"all\"\nscript = \"x\"\n", Format::Toml);
        assert!(
            e.contains("field \"name\": \"all\" selects every app"),
            "{e}"
        );
        let e = parse_err("[[apps]]\nscript = \"/bin/.x\"\n", Format::Toml);
        assert!(e.contains("set \"name\""), "{e}");
        let e = parse_err("[[apps]]\nname = \"a\"\n", Format::Toml);
        assert!(e.contains("app \"a\": missing field \"script\""), "{e}");
    }

    #[test]
    fn file_shapes() {
        for (text, format) in [
            ("", Format::Toml),
            ("apps = []", Format::Toml),
            ("apps: []", Format::Yaml),
            ("", Format::Yaml),
            ("[]", Format::Json),
            ("{\"apps\": []}", Format::Json),
        ] {
            let e = parse_err(text, format);
            assert!(e.contains(": no apps in this file; add "), "{text:?}: {e}");
        }
        assert_eq!(
            parse_ok("- script: /bin/a\n- script: /bin/b\n", Format::Yaml).len(),
            2
        );
        let e = parse_err("[apps]\nscript = \"x\"\n", Format::Toml);
        assert!(e.contains("expected a list of apps"), "{e}");
        let e = parse_err("{\"apps\": [}", Format::Json);
        assert!(e.starts_with("/srv/demo/apps.json:1:11: "), "{e}");
        let e = parse_err("apps:\n  - name: [\n", Format::Yaml);
        assert!(e.starts_with("/srv/demo/apps.yaml:"), "{e}");
    }

    #[test]
    fn formats_come_from_the_extension() {
        assert_eq!(
            Format::from_path(Path::new("apps.toml")),
            Some(Format::Toml)
        );
        assert_eq!(
            Format::from_path(Path::new("a/apps.yml")),
            Some(Format::Yaml)
        );
        assert_eq!(
            Format::from_path(Path::new("apps.YAML")),
            Some(Format::Yaml)
        );
        assert_eq!(
            Format::from_path(Path::new("ecosystem.config.json")),
            Some(Format::Json)
        );
        assert_eq!(Format::from_path(Path::new("ecosystem.config.js")), None);
        assert_eq!(Format::from_path(Path::new("toml")), None);
        let e = load(Path::new("/nowhere/ecosystem.config.js")).unwrap_err();
        assert!(e.to_string().contains("ecosystem.config.json"), "{e}");
        let e = load(Path::new("/nowhere/apps.toml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nowhere/apps.toml: cannot read: "),
            "{e}"
        );
    }

    #[test]
    fn load_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ecosystem.config.yaml");
        std::fs::write(&path, "apps:\n  - name: web\n    script: server.js\n").unwrap();
        let apps = load(&path).unwrap();
        assert_eq!(
            apps[0].args,
            [dir.path().join("server.js").to_string_lossy()]
        );
    }

    #[test]
    fn yaml_anchors_and_merge_keys() {
        let text = "x-defaults: &defaults\n  autorestart: false\n  env: { A: 1 }\napps:\n  - <<: *defaults\n    name: web\n    script: /bin/web\n  - { <<: *defaults, name: api, script: /bin/api, env: { A: 2 } }\n";
        let apps = parse_ok(text, Format::Yaml);
        assert_eq!(apps[0].restart, RestartPolicy::Never);
        assert_eq!(apps[0].env["A"], "1");
        assert_eq!(apps[1].env["A"], "2");
        let e = parse_err(
            "x-d: &d\n  colour: red\napps:\n  - <<: *d\n    name: web\n    script: x\n",
            Format::Yaml,
        );
        assert!(
            e.starts_with("/srv/demo/apps.yaml: app \"web\": unknown field \"colour\""),
            "{e}"
        );
    }
}
