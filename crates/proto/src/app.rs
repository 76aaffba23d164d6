//! Apps: what the daemon supervises (spec) and what it reports (info).

use crate::actor::Actor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// When an app is started again after it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Restart whatever the exit status.
    #[default]
    Always,
    /// Restart only after a non-zero exit or a death by signal.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// The policy as written on the wire and in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Always => "always",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Never => "never",
        }
    }
}

/// What an app is to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AppKind {
    /// An ordinary program.
    #[default]
    App,
    /// An AI agent: it gets a lane, and its process tree is class `ai`.
    Agent,
    /// A bridge to the outside world, acting under its grant.
    Adapter,
    /// oxidepm's own infrastructure; always protected.
    System,
    /// A host service agents ask things of (`<agent>:<name>:outbox` in,
    /// `<agent>:<name>:inbox` out), with a lane of its own; a host-side
    /// identity like an adapter.
    Responder,
}

impl AppKind {
    /// The lowercase name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            AppKind::App => "app",
            AppKind::Agent => "agent",
            AppKind::Adapter => "adapter",
            AppKind::System => "system",
            AppKind::Responder => "responder",
        }
    }
}

/// When a dependency counts as satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DependencyCondition {
    /// The dependency's process has been spawned.
    #[default]
    Started,
    /// The dependency passes its health check.
    Healthy,
    /// The dependency ran and exited with status 0.
    Completed,
}

/// One entry of `depends_on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// Name of the app depended on.
    pub app: String,
    /// When it counts as ready.
    #[serde(default)]
    pub condition: DependencyCondition,
}

/// What a health check probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthProbe {
    /// URL to GET.
    Http(String),
    /// `host:port` to connect to.
    Tcp(String),
    /// Program and arguments; exit status 0 is healthy.
    Command(Vec<String>),
}

/// A health check. On the wire and in files the probe is one of the keys
/// `http`, `tcp` or `command` beside the other fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "HealthFields", into = "HealthFields")]
pub struct HealthSpec {
    /// What is probed.
    pub probe: HealthProbe,
    /// Expected HTTP status; any 2xx when unset.
    pub expect_status: Option<u16>,
    /// Time between checks, in milliseconds.
    pub interval_ms: u64,
    /// Time one check may take, in milliseconds.
    pub timeout_ms: u64,
    /// Consecutive failures that cause a restart.
    pub retries: u32,
    /// Grace period after a start during which failures do not count.
    pub start_period_ms: u64,
}

/// The shape of [`HealthSpec`] on the wire: the probe is whichever of
/// three keys is present, so the JSON clients and the store already hold
/// stays valid.
#[derive(Serialize, Deserialize)]
struct HealthFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tcp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expect_status: Option<u16>,
    interval_ms: u64,
    timeout_ms: u64,
    retries: u32,
    start_period_ms: u64,
}

impl TryFrom<HealthFields> for HealthSpec {
    type Error = String;
    fn try_from(f: HealthFields) -> Result<HealthSpec, String> {
        let probe = match (f.http, f.tcp, f.command) {
            (Some(url), None, None) => HealthProbe::Http(url),
            (None, Some(addr), None) => HealthProbe::Tcp(addr),
            (None, None, Some(cmd)) => HealthProbe::Command(cmd),
            _ => return Err("a health check needs exactly one of http, tcp or command".into()),
        };
        Ok(HealthSpec {
            probe,
            expect_status: f.expect_status,
            interval_ms: f.interval_ms,
            timeout_ms: f.timeout_ms,
            retries: f.retries,
            start_period_ms: f.start_period_ms,
        })
    }
}

impl From<HealthSpec> for HealthFields {
    fn from(h: HealthSpec) -> HealthFields {
        let (mut http, mut tcp, mut command) = (None, None, None);
        match h.probe {
            HealthProbe::Http(url) => http = Some(url),
            HealthProbe::Tcp(addr) => tcp = Some(addr),
            HealthProbe::Command(cmd) => command = Some(cmd),
        }
        HealthFields {
            http,
            tcp,
            command,
            expect_status: h.expect_status,
            interval_ms: h.interval_ms,
            timeout_ms: h.timeout_ms,
            retries: h.retries,
            start_period_ms: h.start_period_ms,
        }
    }
}

/// The most rotated log files an app keeps per stream: every reader and
/// `flush` looks for each of them, so the count is bounded.
pub const MAX_LOG_KEEP: u32 = 1000;

/// The smallest size at which an app's log is rotated (0: never): below
/// it, nearly every line would rename all the rotated files.
pub const MIN_LOG_ROTATE_BYTES: u64 = 1 << 10;

/// Everything needed to run an app, resolved and validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSpec {
    /// Unique name.
    pub name: String,
    /// Program to execute (looked up on PATH when it has no slash).
    pub command: String,
    /// Arguments after the program.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment of the app: exactly these variables (plus PATH/HOME/USER defaults).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// User to run as (only when the daemon runs as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Restart policy.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// Delay before a restart, in milliseconds.
    #[serde(default)]
    pub restart_delay_ms: u64,
    /// Base of the exponential backoff between consecutive unstable restarts.
    #[serde(default = "defaults::backoff_ms")]
    pub exp_backoff_ms: u64,
    /// Unstable restarts allowed in a row before the app is `errored`.
    #[serde(default = "defaults::max_restarts")]
    pub max_restarts: u32,
    /// Uptime after which a run counts as stable, in milliseconds.
    #[serde(default = "defaults::min_uptime_ms")]
    pub min_uptime_ms: u64,
    /// Time between the stop signal and SIGKILL, in milliseconds.
    #[serde(default = "defaults::kill_timeout_ms")]
    pub kill_timeout_ms: u64,
    /// Signal sent to the process group to stop the app (`SIGTERM`, `SIGINT`, ...).
    #[serde(default = "defaults::stop_signal")]
    pub stop_signal: String,
    /// Tags, selectable as `@tag`.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What the app is.
    #[serde(default)]
    pub kind: AppKind,
    /// Only a human may stop, restart, change or delete a protected app.
    #[serde(default)]
    pub protected: bool,
    /// Prefix each log line with a timestamp.
    #[serde(default = "defaults::yes")]
    pub log_timestamps: bool,
    /// Size at which a log file is rotated, in bytes.
    #[serde(default = "defaults::log_max_bytes")]
    pub log_max_bytes: u64,
    /// Rotated log files kept per stream (at most [`MAX_LOG_KEEP`]).
    #[serde(default = "defaults::log_keep")]
    pub log_keep: u32,
    /// Where the app's output goes; unset: `log_target` of daemon.toml.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_target: Option<LogTarget>,
    /// Restart when the app's process tree uses more resident memory than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    /// Cron expression (5 or 6 fields, local time) for scheduled restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron_restart: Option<String>,
    /// Health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    /// Restart when a file under these paths changes (pm2's `watch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchSpec>,
    /// Apps that must be ready before this one starts.
    #[serde(default)]
    pub depends_on: Vec<Dependency>,
    /// Start the app as soon as it is defined.
    #[serde(default = "defaults::yes")]
    pub autostart: bool,
}

/// What an app's file watch looks at: pm2's `watch`, `ignore_watch` and
/// `watch_delay`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchSpec {
    /// Files or directories (relative ones from the app's cwd); empty: the
    /// cwd itself.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Names or globs (`*.log`, `tmp/*`) whose changes are ignored, beside
    /// [`WATCH_ALWAYS_IGNORED`].
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Quiet time after a change before the restart, in milliseconds: a
    /// burst of writes (a checkout, a build) restarts once.
    #[serde(default = "defaults::watch_delay_ms")]
    pub delay_ms: u64,
}

impl WatchSpec {
    /// A watch of the app's cwd with the default ignores and delay.
    pub fn cwd() -> WatchSpec {
        WatchSpec {
            paths: Vec::new(),
            ignore: Vec::new(),
            delay_ms: defaults::watch_delay_ms(),
        }
    }
}

/// What a watch never looks into, as pm2 does: dependencies and version
/// control change by the thousand without the app's own files changing.
pub const WATCH_ALWAYS_IGNORED: &[&str] = &["node_modules", ".git", "__pycache__"];

/// The most paths, or ignore patterns, one watch may name.
pub const MAX_WATCH_ENTRIES: usize = 64;

/// The longest quiet time a watch may wait before its restart (ms).
pub const MAX_WATCH_DELAY_MS: u64 = 60_000;

/// Where an app's output goes: its log files, the systemd journal, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogTarget {
    /// The app's log files only.
    #[default]
    Files,
    /// The journal only (a line the journal refuses still goes to the file).
    Journald,
    /// The journal and the log files.
    Both,
}

impl LogTarget {
    /// The name used in app files and daemon.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            LogTarget::Files => "files",
            LogTarget::Journald => "journald",
            LogTarget::Both => "both",
        }
    }

    /// Parses the name used in app files and daemon.toml.
    pub fn parse(s: &str) -> Result<LogTarget, String> {
        match s {
            "files" => Ok(LogTarget::Files),
            "journald" => Ok(LogTarget::Journald),
            "both" => Ok(LogTarget::Both),
            _ => Err(format!(
                "unknown log_target {s:?}; use \"files\", \"journald\" or \"both\""
            )),
        }
    }
}

/// Default values of [`AppSpec`] fields, shared with config-file parsing.
pub mod defaults {
    /// Exponential backoff base (ms).
    pub fn backoff_ms() -> u64 {
        100
    }
    /// Unstable restarts allowed in a row.
    pub fn max_restarts() -> u32 {
        15
    }
    /// Stable uptime (ms).
    pub fn min_uptime_ms() -> u64 {
        1000
    }
    /// Kill timeout (ms).
    pub fn kill_timeout_ms() -> u64 {
        5000
    }
    /// Stop signal.
    pub fn stop_signal() -> String {
        "SIGTERM".into()
    }
    /// Log rotation size.
    pub fn log_max_bytes() -> u64 {
        50 * 1024 * 1024
    }
    /// Rotated files kept.
    pub fn log_keep() -> u32 {
        5
    }
    /// A watch's quiet time before its restart (ms).
    pub fn watch_delay_ms() -> u64 {
        1000
    }
    /// `true`.
    pub fn yes() -> bool {
        true
    }
}

impl AppSpec {
    /// A spec for `command args…` with every other field at its default.
    pub fn new(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> AppSpec {
        AppSpec {
            name: name.into(),
            command: command.into(),
            args,
            cwd: None,
            env: BTreeMap::new(),
            user: None,
            restart: RestartPolicy::Always,
            restart_delay_ms: 0,
            exp_backoff_ms: defaults::backoff_ms(),
            max_restarts: defaults::max_restarts(),
            min_uptime_ms: defaults::min_uptime_ms(),
            kill_timeout_ms: defaults::kill_timeout_ms(),
            stop_signal: defaults::stop_signal(),
            tags: Vec::new(),
            kind: AppKind::App,
            protected: false,
            log_timestamps: true,
            log_max_bytes: defaults::log_max_bytes(),
            log_keep: defaults::log_keep(),
            log_target: None,
            max_memory_bytes: None,
            cron_restart: None,
            health: None,
            watch: None,
            depends_on: Vec::new(),
            autostart: true,
        }
    }

    /// Whether the app is protected, explicitly or by being a `system` app.
    pub fn is_protected(&self) -> bool {
        self.protected || self.kind == AppKind::System
    }
}

/// Runtime status of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting to be spawned (restart delay, dependencies).
    Starting,
    /// Its process is running.
    Online,
    /// The stop signal was sent; waiting for the process group to exit.
    Stopping,
    /// Not running, by request or after a clean exit.
    Stopped,
    /// Not running after failures; not restarted any more.
    Errored,
}

impl Status {
    /// The lowercase name of the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Online => "online",
            Status::Stopping => "stopping",
            Status::Stopped => "stopped",
            Status::Errored => "errored",
        }
    }

    /// Parses a lowercase status name.
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "starting" => Status::Starting,
            "online" => Status::Online,
            "stopping" => Status::Stopping,
            "stopped" => Status::Stopped,
            "errored" => Status::Errored,
            _ => return None,
        })
    }
}

/// Result of the last health checks of an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// No check has completed yet (or within the start period).
    Unknown,
    /// The last check passed.
    Healthy,
    /// The last check failed.
    Unhealthy,
}

impl HealthState {
    /// The lowercase name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Unknown => "unknown",
            HealthState::Healthy => "healthy",
            HealthState::Unhealthy => "unhealthy",
        }
    }
}

/// What `status` and `show` report about one app.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppInfo {
    /// Numeric id, stable for the life of the app.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Process id of the running process, if any.
    pub pid: Option<u32>,
    /// Runtime status.
    pub status: Status,
    /// Times the daemon restarted the app on its own or by request.
    pub restarts: u64,
    /// Milliseconds since the current process started, when online.
    pub uptime_ms: Option<u64>,
    /// CPU use of the process tree, percent of one core (last sample).
    pub cpu_percent: Option<f32>,
    /// Resident memory of the process tree, bytes (last sample).
    pub memory_bytes: Option<u64>,
    /// Exit code of the last run, if it exited.
    pub last_exit_code: Option<i32>,
    /// Health, when the app has a check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthState>,
    /// Who defined the app.
    pub defined_by: Actor,
    /// Tags.
    pub tags: Vec<String>,
    /// Kind.
    pub kind: AppKind,
    /// Protected (explicitly or as a `system` app).
    pub protected: bool,
    /// The full spec (`show` only; environment values redacted for non-humans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<AppSpec>,
    /// Paths of the current stdout and stderr log files (`show` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_files: Option<[String; 2]>,
    /// What holds the app's processes (`show` only): `cgroup2 <dir>` or
    /// `sessions [<ids>]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// Bytes the app's logs lost to failed writes (disk full, I/O errors),
    /// stdout and stderr together (`show` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_dropped_bytes: Option<u64>,
    /// Whether the daemon keeps copies of the app's log pipes (`show` only,
    /// running apps that log to files): when false, the daemon was short of
    /// descriptors, and if the app's log writer dies the app dies at its
    /// next write (SIGPIPE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_pipes_kept: Option<bool>,
    /// Set while the app waits to restart (status `waiting`): why, and
    /// how long still.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// Checks an app name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with
/// `.` or `-`, not all digits (ids are numbers) and not `all`. Names become
/// file names and selectors, so nothing else is allowed.
pub fn check_app_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!("app name {name:?} must be 1 to 64 characters long"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "app name {name:?} may only contain letters, digits, '.', '_' and '-'"
        ));
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err(format!("app name {name:?} must not start with '.' or '-'"));
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "app name {name:?} is all digits, which would be read as an id"
        ));
    }
    if name == "all" {
        return Err("\"all\" selects every app and cannot be an app name".into());
    }
    Ok(())
}

/// Why an app is `waiting` and for how long still.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// Milliseconds until the restart is due (0: due, waiting for the
    /// daemon-wide restart rate).
    pub due_in_ms: u64,
    /// Why it waits: `after exit 3`, `after a passing spawn failure`, …
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_wire() {
        let name = |v: serde_json::Value| v.as_str().unwrap().to_string();
        for p in [
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ] {
            assert_eq!(name(serde_json::to_value(p).unwrap()), p.as_str());
        }
        for k in [
            AppKind::App,
            AppKind::Agent,
            AppKind::Adapter,
            AppKind::System,
            AppKind::Responder,
        ] {
            assert_eq!(name(serde_json::to_value(k).unwrap()), k.as_str());
        }
        for h in [
            HealthState::Unknown,
            HealthState::Healthy,
            HealthState::Unhealthy,
        ] {
            assert_eq!(name(serde_json::to_value(h).unwrap()), h.as_str());
        }
    }

    #[test]
    fn health_keeps_its_wire_shape() {
        for text in [
            r#"{"http":"http://h/","expect_status":200,"interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
            r#"{"tcp":"h:1","interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
            r#"{"command":["true","x"],"interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
        ] {
            let h: HealthSpec = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&h).unwrap(), text);
        }
        let h: HealthSpec = serde_json::from_str(
            r#"{"tcp":"h:1","interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
        )
        .unwrap();
        assert_eq!(h.probe, HealthProbe::Tcp("h:1".into()));
        for text in [
            r#"{"interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
            r#"{"tcp":"h:1","http":"http://h/","interval_ms":1,"timeout_ms":2,"retries":3,"start_period_ms":4}"#,
        ] {
            let e = serde_json::from_str::<HealthSpec>(text).unwrap_err();
            assert!(
                e.to_string()
                    .contains("exactly one of http, tcp or command"),
                "{e}"
            );
        }
    }
}
