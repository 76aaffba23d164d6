//! The field names an app file may use, and checks of single string values.

use oxidepm_proto::{AppKind, DependencyCondition, RestartPolicy};

/// Slot of pm2 fields that are accepted and change nothing.
pub(super) const IGNORED: &str = "(ignored)";
/// Slot of pm2's `env_<name>` sections, applied when `--env <name>` selects one.
pub(super) const ENV_SECTION: &str = "(env section)";
/// Slot of pm2's `out_file` and its aliases.
pub(super) const OUT_FILE: &str = "out_file";
/// Slot of pm2's `error_file` and its aliases.
pub(super) const ERROR_FILE: &str = "error_file";
/// Slot of pm2's combined log, `log_file`.
pub(super) const LOG_FILE: &str = "log_file";
/// Slot of pm2's `pid_file`.
pub(super) const PID_FILE: &str = "pid_file";
/// Slot of pm2's `disable_logs`.
pub(super) const DISABLE_LOGS: &str = "disable_logs";

/// App fields: (name as written, slot it fills). Aliases share a slot.
pub(super) const APP_KEYS: &[(&str, &str)] = &[
    ("name", "name"),
    ("script", "script"),
    ("exec", "script"),
    ("args", "args"),
    ("cwd", "cwd"),
    ("env", "env"),
    ("env_file", "env_file"),
    ("interpreter", "interpreter"),
    ("exec_interpreter", "interpreter"),
    ("interpreter_args", "interpreter_args"),
    ("node_args", "interpreter_args"),
    ("interpreterArgs", "interpreter_args"),
    // pm2's shortcut for a PORT variable.
    ("port", "port"),
    ("autorestart", "autorestart"),
    ("restart", "restart"),
    ("max_restarts", "max_restarts"),
    ("min_uptime", "min_uptime"),
    ("restart_delay", "restart_delay"),
    ("exp_backoff_restart_delay", "exp_backoff_restart_delay"),
    ("kill_timeout", "kill_timeout"),
    ("stop_signal", "stop_signal"),
    ("max_memory_restart", "max_memory_restart"),
    ("cron_restart", "cron_restart"),
    ("cron", "cron_restart"),
    ("time", "time"),
    ("log_max_size", "log_max_size"),
    ("log_files_kept", "log_files_kept"),
    // pm2-logrotate's names for the same two settings.
    ("max_size", "log_max_size"),
    ("retain", "log_files_kept"),
    ("log_target", "log_target"),
    ("tags", "tags"),
    ("namespace", "namespace"),
    ("user", "user"),
    ("uid", "user"),
    ("kind", "kind"),
    ("protected", "protected"),
    ("autostart", "autostart"),
    ("health", "health"),
    ("depends_on", "depends_on"),
    // pm2's instances (N separate processes, never cluster mode).
    ("instances", "instances"),
    // pm2 fields whose only accepted values mean what oxidepm does anyway.
    ("exec_mode", "exec_mode"),
    ("watch", "watch"),
    ("ignore_watch", "ignore_watch"),
    ("watch_delay", "watch_delay"),
    ("shutdown_with_message", "shutdown_with_message"),
    // pm2's log and pid file paths: accepted with a note (see `pm2::path_note`).
    ("out_file", OUT_FILE),
    ("out", OUT_FILE),
    ("output", OUT_FILE),
    ("out_log", OUT_FILE),
    ("error_file", ERROR_FILE),
    ("error", ERROR_FILE),
    ("err", ERROR_FILE),
    ("err_file", ERROR_FILE),
    ("err_log", ERROR_FILE),
    ("log_file", LOG_FILE),
    ("log", LOG_FILE),
    ("pid_file", PID_FILE),
    ("pid", PID_FILE),
    ("disable_logs", DISABLE_LOGS),
    // pm2 fields about chokidar's options, cluster mode, log formatting, keymetrics or
    // deployment: accepted so that an ecosystem file loads as it is.
    ("watch_options", IGNORED),
    ("merge_logs", IGNORED),
    ("combine_logs", IGNORED),
    ("log_date_format", IGNORED),
    ("log_type", IGNORED),
    ("vizion", IGNORED),
    ("post_update", IGNORED),
    ("force", IGNORED),
    ("source_map_support", IGNORED),
    ("disable_source_map_support", IGNORED),
    ("instance_var", IGNORED),
    ("increment_var", IGNORED),
    ("append_env_to_name", IGNORED),
    ("filter_env", IGNORED),
    ("treekill", IGNORED),
    ("wait_ready", IGNORED),
    ("listen_timeout", IGNORED),
    ("pmx", IGNORED),
    ("automation", IGNORED),
    ("disable_trace", IGNORED),
    ("trace", IGNORED),
    ("v8", IGNORED),
    ("event_loop_inspector", IGNORED),
    ("deep_monitoring", IGNORED),
    ("io", IGNORED),
    ("install_url", IGNORED),
    ("execute_command", IGNORED),
    ("username", IGNORED),
    ("windowsHide", IGNORED),
    ("kill_retry_time", IGNORED),
    ("write", IGNORED),
    ("version", IGNORED),
];

/// The app fields listed in "expected one of" messages: those that do something.
pub(super) const APP_SHOWN: &str = "name, script, args, cwd, env, env_file, interpreter, \
    interpreter_args, autorestart, restart, max_restarts, min_uptime, restart_delay, \
    exp_backoff_restart_delay, kill_timeout, stop_signal, max_memory_restart, cron_restart, \
    time, log_max_size, log_files_kept, tags, namespace, user, kind, protected, autostart, \
    health, depends_on, watch, ignore_watch, watch_delay";

/// pm2 fields that are refused, with the reason.
pub(super) fn app_refused(key: &str) -> Option<String> {
    Some(match key {
        "gid" => "field \"gid\" is not supported; set \"user\": the app runs with that user's groups".into(),
        "stop_exit_codes" => "field \"stop_exit_codes\" is not supported; use restart = \"on-failure\" so that exit code 0 is not restarted".into(),
        _ => return None,
    })
}

/// Whether a key is a pm2 environment section such as `env_production`.
pub(super) fn is_env_section(key: &str) -> bool {
    key.len() > 4 && key.starts_with("env_") && key != "env_file"
}

/// Health-check fields.
pub(super) const HEALTH_KEYS: &[(&str, &str)] = &[
    ("http", "http"),
    ("tcp", "tcp"),
    ("command", "command"),
    ("expect_status", "expect_status"),
    ("interval", "interval"),
    ("timeout", "timeout"),
    ("retries", "retries"),
    ("start_period", "start_period"),
];
/// Health fields as listed in messages.
pub(super) const HEALTH_SHOWN: &str =
    "http, tcp, command, expect_status, interval, timeout, retries, start_period";

/// Fields of one `depends_on` entry.
pub(super) const DEP_KEYS: &[(&str, &str)] = &[("app", "app"), ("condition", "condition")];
/// Dependency fields as listed in messages.
pub(super) const DEP_SHOWN: &str = "app, condition";

/// Top-level keys; pm2's `deploy` section is accepted and ignored, and so are
/// keys starting with `x-`.
pub(super) const ROOT_KEYS: &[(&str, &str)] = &[
    ("apps", "apps"),
    ("deploy", IGNORED),
    // pm2-logrotate's settings, for every app that has none of its own.
    ("max_size", "log_max_size"),
    ("retain", "log_files_kept"),
];
/// Top-level keys as listed in messages.
pub(super) const ROOT_SHOWN: &str =
    "apps, max_size, retain (and deploy or x-* keys, which are ignored)";

/// The known key closest to a misspelt one, if any is close.
pub(super) fn suggest(key: &str, keys: &[(&'static str, &str)]) -> Option<&'static str> {
    let limit = (key.chars().count() / 3).clamp(1, 3);
    keys.iter()
        .map(|(k, _)| (strsim::levenshtein(key, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Signals an app may be stopped with.
const SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "USR1", "USR2", "ALRM", "TERM", "WINCH",
];

/// A signal name with or without `SIG`, in any case, stored as `SIGNAME`.
pub(super) fn signal(s: &str) -> Result<String, String> {
    let upper = s.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    if SIGNALS.contains(&bare) {
        Ok(format!("SIG{bare}"))
    } else {
        Err(format!(
            "unknown signal {s:?}; use one of SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGKILL, SIGABRT, SIGALRM, SIGWINCH"
        ))
    }
}

/// A tag: 1 to 32 of `A-Z a-z 0-9 . _ -`.
pub(super) fn tag(s: &str) -> Result<String, String> {
    let valid = !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!(
            "invalid tag {s:?}; a tag is 1 to 32 letters, digits, '.', '_' or '-'"
        ))
    }
}

/// `restart`.
pub(super) fn restart(s: &str) -> Result<RestartPolicy, String> {
    match s {
        "always" => Ok(RestartPolicy::Always),
        "on-failure" => Ok(RestartPolicy::OnFailure),
        "never" => Ok(RestartPolicy::Never),
        _ => Err(format!(
            "unknown restart policy {s:?}; use \"always\", \"on-failure\" or \"never\""
        )),
    }
}

/// `kind`; `system` is the daemon's own.
pub(super) fn kind(s: &str) -> Result<AppKind, String> {
    match s {
        "app" => Ok(AppKind::App),
        "agent" => Ok(AppKind::Agent),
        "adapter" => Ok(AppKind::Adapter),
        "responder" => Ok(AppKind::Responder),
        "system" => Err(
            "kind \"system\" is reserved for the daemon's own apps; use \"app\", \"agent\", \"adapter\" or \"responder\"".into(),
        ),
        _ => Err(format!(
            "unknown kind {s:?}; use \"app\", \"agent\", \"adapter\" or \"responder\""
        )),
    }
}

/// `cron_restart`: kept as written, but it must have 5 or 6 fields.
pub(super) fn cron(s: &str) -> Result<String, String> {
    let fields = s.split_whitespace().count();
    if fields == 5 || fields == 6 {
        Ok(s.to_string())
    } else {
        Err(format!(
            "cron expression {s:?} has {fields} fields; use 5 (minute hour day month weekday) or 6 (with seconds first)"
        ))
    }
}

/// `user`: a user name (the daemon looks it up when it starts the app).
pub(super) fn user(s: &str) -> Result<String, String> {
    let valid = !s.is_empty()
        && s.len() <= 32
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!("invalid user name {s:?}"))
    }
}

/// An app name, as a name or in `depends_on`.
pub(super) fn app_name(s: &str) -> Result<String, String> {
    oxidepm_proto::check_app_name(s).map(|()| s.to_string())
}

/// `health.http`: a plain-HTTP URL.
pub(super) fn http_url(s: &str) -> Result<String, String> {
    match s.strip_prefix("http://") {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !s.contains(char::is_whitespace) => {
            Ok(s.to_string())
        }
        _ => Err(format!(
            "invalid health URL {s:?}; use http://host[:port]/path (https is not supported: use a command check such as curl)"
        )),
    }
}

/// `health.tcp`: `host:port`.
pub(super) fn tcp_addr(s: &str) -> Result<String, String> {
    let valid = match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains(char::is_whitespace)
                && matches!(port.parse::<u16>(), Ok(p) if p != 0)
        }
        None => false,
    };
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!(
            "invalid address {s:?}; use \"host:port\", like \"127.0.0.1:8080\""
        ))
    }
}

/// `depends_on[].condition`; Compose's spellings are accepted too.
pub(super) fn condition(s: &str) -> Result<DependencyCondition, String> {
    match s {
        "started" | "service_started" => Ok(DependencyCondition::Started),
        "healthy" | "service_healthy" => Ok(DependencyCondition::Healthy),
        "completed" | "service_completed_successfully" => Ok(DependencyCondition::Completed),
        _ => Err(format!(
            "unknown condition {s:?}; use \"started\", \"healthy\" or \"completed\""
        )),
    }
}
