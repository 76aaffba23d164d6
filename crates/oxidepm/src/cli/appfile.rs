//! App config files (TOML, YAML, JSON, pm2's `ecosystem.config.js`): parsing
//! them into validated [`AppSpec`]s.
//!
//! A file holds a list of apps: `[[apps]]` tables in TOML; in YAML and JSON an
//! object with an `apps` list (pm2's ecosystem shape) or a bare list. Field
//! names are pm2's wherever pm2 has one, so a pm2 ecosystem file loads as it
//! is; an `ecosystem.config.js` is evaluated with `node` (`ecosystem_js`) and
//! read as the JSON it exports. pm2 fields that only make sense in pm2
//! (watching, cluster mode, log formatting, keymetrics, `deploy`) are accepted
//! and change nothing; pm2's `env_<name>` sections are merged over `env` when
//! `--env <name>` selects one; log and pid file paths are accepted with a note
//! (`pm2`). `instances = N` makes N apps `<name>-0` … `<name>-N-1` of one spec
//! (separate processes, each with `OXIDEPM_INSTANCE`). pm2 fields whose
//! meaning oxidepm cannot honour (`instances = "max"`, cluster `exec_mode`,
//! `watch: true`, ...) are errors that say what to do,
//! and so is any unknown field. In YAML, anchors may live under top-level
//! `x-*` keys, and merge keys (`<<: *anchor`) are applied.
//!
//! Every error names the file, the line and column when the format's parser
//! knows them, the app and the field, and nothing is returned unless the
//! whole file is valid.

mod de;
mod ecosystem_js;
mod fields;
mod ini;
mod keys;
mod leftovers;
mod nested;
mod pm2;
mod read;
mod resolve;
mod supervisord;
mod systemd;
mod text;
pub mod to_toml;
mod values;

pub use text::{parse_duration_ms, parse_size};
pub use values::instances_arg;

use oxidepm_proto::AppSpec;
use serde::de::DeserializeSeed;
use std::collections::{BTreeMap, BTreeSet};
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
    /// A pm2 `ecosystem.config.js` (`.cjs`, `.mjs`), evaluated with `node`.
    EcosystemJs,
    /// A supervisord INI file with `[program:x]` sections.
    Supervisord,
    /// A systemd unit with a `[Service]` section.
    Systemd,
}

impl Format {
    /// The format of a file, from its extension (`ecosystem.config.json` is
    /// JSON, `*.service` a systemd unit, `*.conf`/`*.ini` supervisord's).
    /// JavaScript is a config file only when named `*.config.js` (`.cjs`,
    /// `.mjs`), as pm2 decides: `app.js` is a script to run, not to read.
    pub fn from_path(p: &Path) -> Option<Format> {
        let extension = p.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "toml" => Some(Format::Toml),
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            "js" | "cjs" | "mjs" if is_config_name(p) => Some(Format::EcosystemJs),
            "conf" | "ini" => Some(Format::Supervisord),
            "service" => Some(Format::Systemd),
            _ => None,
        }
    }

    /// The format a file's first lines look like, for a file whose name
    /// says none: a supervisord file named `programs.txt`, a unit without
    /// `.service`. Reads at most 8 KiB.
    pub fn sniff(p: &Path) -> Option<Format> {
        use std::io::Read;
        let mut head = Vec::with_capacity(8192);
        std::fs::File::open(p)
            .ok()?
            .take(8192)
            .read_to_end(&mut head)
            .ok()?;
        let head = String::from_utf8_lossy(&head);
        let sections = || head.lines().map(str::trim).filter(|l| l.starts_with('['));
        if sections().any(|l| l.starts_with("[program:") || l == "[supervisord]") {
            Some(Format::Supervisord)
        } else if sections().any(|l| l == "[Service]") {
            Some(Format::Systemd)
        } else {
            None
        }
    }

    /// How to name a file of this format so that it is read as one.
    pub fn naming(self) -> &'static str {
        match self {
            Format::Toml => "*.toml",
            Format::Yaml => "*.yaml or *.yml",
            Format::Json => "*.json",
            Format::EcosystemJs => "ecosystem.config.js",
            Format::Supervisord => "*.conf or *.ini",
            Format::Systemd => "*.service",
        }
    }

    /// What the format is called in messages.
    pub fn called(self) -> &'static str {
        match self {
            Format::Toml => "a TOML app file",
            Format::Yaml => "a YAML app file",
            Format::Json => "a JSON app file",
            Format::EcosystemJs => "a pm2 ecosystem file",
            Format::Supervisord => "a supervisord file",
            Format::Systemd => "a systemd unit",
        }
    }
}

/// The advice for a file whose name gives no format but whose content
/// looks like one.
pub fn misnamed(path: &Path) -> Option<String> {
    let format = Format::sniff(path)?;
    Some(format!(
        "it looks like {} but is not named {}, which is how oxidepm tells the format; \
         rename it (or link it) to a name ending so, then run the command again",
        format.called(),
        format.naming()
    ))
}

/// Whether a `.js` file is named like a pm2 config file (`*.config.js`,
/// `.cjs`, `.mjs`: pm2's own test); any other is a script.
fn is_config_name(p: &Path) -> bool {
    p.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| s.to_ascii_lowercase().ends_with(".config"))
}

/// How a file is read: pm2's `--env <name>` and `--only a,b`.
#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// Apply the `env_<name>` sections (pm2's `--env production`).
    pub env: Option<String>,
    /// Only these apps of the file (pm2's `--only`); all when empty.
    pub only: Vec<String>,
}

/// A file's apps, and what of it was taken differently or not at all.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The apps, resolved and validated.
    pub apps: Vec<AppSpec>,
    /// Fields with no exact equivalent (printed as warnings by `start`,
    /// as comments by `import`).
    pub notes: Vec<Note>,
}

/// A field of a file that has no exact equivalent in oxidepm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The app (program, unit) it belongs to, when it belongs to one.
    pub app: Option<String>,
    /// The field as written in the file (`pid_file`, `StartLimitBurst`).
    pub field: String,
    /// What oxidepm does with it instead, in one line.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.app {
            Some(app) => write!(f, "app {app:?}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
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

    /// The 1-based line at fault, when known.
    #[cfg(test)]
    pub fn line(&self) -> Option<usize> {
        self.line
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

/// An error at a 1-based line of a file.
fn at_line(path: &Path, line: usize, message: impl Into<String>) -> AppFileError {
    AppFileError {
        line: Some(line),
        ..AppFileError::new(path, message)
    }
}

/// The machine's host name (`%(host_node_name)s`, `%H`), empty when unknown.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// Loads a config file of any supported format with pm2's options, all of
/// it or nothing.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Loaded, AppFileError> {
    let Some(format) = Format::from_path(path) else {
        return Err(AppFileError::new(
            path,
            misnamed(path).unwrap_or_else(|| {
                "unknown config file type; name it *.toml, *.yaml, *.yml, *.json, \
                 ecosystem.config.js, a supervisord *.conf or a systemd *.service"
                    .to_string()
            }),
        ));
    };
    // With the apps, the `env_<name>` sections of the file (none in formats
    // without them).
    let (mut loaded, sections) = match format {
        Format::Toml | Format::Yaml | Format::Json => {
            let text = read::config_text(path)?;
            from_text(&text, format, path, options)?
        }
        Format::EcosystemJs => {
            let json = ecosystem_js::evaluate(path)?;
            // Lines and columns would be those of node's output, not of the
            // file: the error names the app and the field instead.
            from_text(&json, Format::Json, path, options).map_err(|e| AppFileError {
                line: None,
                column: None,
                ..e
            })?
        }
        Format::Supervisord => (supervisord::load(path)?, Default::default()),
        Format::Systemd => (systemd::load(path)?, Default::default()),
    };
    if let Some(env) = &options.env {
        // A `--env production` that changes nothing would start a production
        // deploy with development settings: refused.
        pm2::check_env_section(path, env, &sections)?;
    }
    select_only(path, &mut loaded, &options.only)?;
    Ok(loaded)
}

/// The apps of a TOML, YAML or JSON text with pm2's `--env <name>` applied,
/// the notes about the fields taken differently, and the names of the
/// file's `env_<name>` sections.
fn from_text(
    text: &str,
    format: Format,
    path: &Path,
    options: &LoadOptions,
) -> Result<(Loaded, BTreeSet<String>), AppFileError> {
    let (apps, extras) = parse_with(text, format, path, options.env.as_deref())?;
    let loaded = Loaded {
        apps,
        notes: extras.notes,
    };
    Ok((loaded, extras.env_sections))
}

/// Keeps the apps named in `only` (pm2's `--only a,b`); a name that is not
/// in the file is an error naming those that are.
fn select_only(path: &Path, loaded: &mut Loaded, only: &[String]) -> Result<(), AppFileError> {
    if only.is_empty() {
        return Ok(());
    }
    if let Some(missing) = only
        .iter()
        .find(|n| !loaded.apps.iter().any(|a| &a.name == *n))
    {
        let names: Vec<&str> = loaded.apps.iter().map(|a| a.name.as_str()).collect();
        return Err(AppFileError::new(
            path,
            format!(
                "--only: no app {missing:?} in this file; its apps are {}",
                names.join(", ")
            ),
        ));
    }
    loaded.apps.retain(|a| only.contains(&a.name));
    loaded
        .notes
        .retain(|n| n.app.as_ref().is_none_or(|a| only.contains(a)));
    Ok(())
}

/// Parses the text of a config file; `origin` is its path (for messages and as the base of relative paths).
#[cfg(test)]
pub fn parse(text: &str, format: Format, origin: &Path) -> Result<Vec<AppSpec>, AppFileError> {
    parse_with(text, format, origin, None).map(|(apps, _)| apps)
}

/// Parses the text of a config file, applying the `env_<name>` section
/// `env`; also returns what
/// pm2's habits added (sections seen, notes, rotation for every app).
fn parse_with(
    text: &str,
    format: Format,
    origin: &Path,
    env: Option<&str>,
) -> Result<(Vec<AppSpec>, pm2::FileExtras), AppFileError> {
    let base = base_dir(origin)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(no_apps(origin, format));
    }
    let ctx = keys::Ctx::with_env(&base, env);
    // pm2 also reads a file that is one app, with no `apps` list around it.
    let wrapped = single_app(text, format);
    let text = wrapped.as_deref().unwrap_or(text);
    let shift = if wrapped.is_some() { ONE_APP.len() } else { 0 };
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
                    // The column on the first line is the file's, not the wrapper's.
                    let column = match e.line() {
                        1 => e.column().saturating_sub(shift).max(1),
                        _ => e.column(),
                    };
                    (message.to_string(), Some(e.line()), Some(column))
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
        Format::EcosystemJs | Format::Supervisord | Format::Systemd => Err((
            "this format is not read from text; load the file instead".to_string(),
            None,
            None,
        )),
    };
    match parsed {
        Ok(apps) if apps.is_empty() => Err(no_apps(origin, format)),
        Ok(mut apps) => {
            let extras = ctx.extras.take();
            extras.apply_rotation(&mut apps);
            Ok((apps, extras))
        }
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
    let text = read::config_text(path)?;
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
            Format::Supervisord => {
                "no [program:x] section in this file (a *.conf or *.ini file is read as \
                 supervisord's); add one, or name the file for its format"
            }
            Format::Systemd => "no [Service] section with ExecStart in this unit",
            _ => "no apps in this file; add an \"apps\" list with at least one app",
        },
    )
}

/// What goes before a one-app JSON file to make it a file with an `apps`
/// list; on the same line, so that errors keep the file's line numbers.
const ONE_APP: &str = "{\"apps\":[";

/// A JSON text that is a single app (an object with a `script` and no
/// `apps`, as pm2 accepts) wrapped into a file with an `apps` list.
fn single_app(text: &str, format: Format) -> Option<String> {
    if format != Format::Json {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let app = value.as_object()?;
    if app.contains_key("apps") || !app.contains_key("script") {
        return None;
    }
    Some(format!("{ONE_APP}{text}\n]}}"))
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
        Format::EcosystemJs | Format::Supervisord | Format::Systemd => return None,
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
mod tests;
#[cfg(test)]
mod tests_pm2;
