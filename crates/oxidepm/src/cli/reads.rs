//! The read commands: `status`, `show`, `logs`, `events`, `audit`,
//! `whoami`, `lanes`, `route list`. None of them starts a daemon: with
//! none running they say so and exit 3, as `systemctl is-active` does.

use super::output::Printer;
use super::{connect, exit, when, ConnectError, Error};
use crate::client::{Client, ClientError};
use oxidepm_proto::{AppInfo, AuditRecord, ErrorCode, LogLine, LogStream, LogsDone, Op, Status};
use std::process::ExitCode;

/// Lines of each stream `logs` prints when neither `-n` nor a window is
/// given.
const DEFAULT_LINES: usize = 15;

/// The running daemon, or [`Error::NotRunning`]: a read never starts one.
pub fn client() -> Result<Client, Error> {
    match connect::client(false) {
        Ok(c) => Ok(c),
        Err(ConnectError::NoDaemon { .. }) => Err(Error::NotRunning),
        Err(e) => Err(e.into()),
    }
}

/// `status [APP…]`: the list; with apps named, the exit status says
/// whether they all run (0), one does not (3) or one is unknown (4).
pub fn status(out: &Printer, targets: Vec<String>) -> Result<ExitCode, Error> {
    let mut c = client()?;
    if targets.is_empty() {
        let apps: Vec<AppInfo> = c.call_as(Op::Status)?;
        out.status(&apps)?;
        out.warning(c.warning());
        return Ok(ExitCode::SUCCESS);
    }
    // An app file stands for its apps, as for stop and restart.
    let target = super::files::selector(&targets)?;
    let apps: Vec<AppInfo> = match c.call_as(Op::Show { target }) {
        Ok(apps) => apps,
        Err(ClientError::Daemon(b)) if b.code == ErrorCode::NotFound => {
            exit::fail(&Error::Client(ClientError::Daemon(b)), out.json);
            return Ok(ExitCode::from(exit::UNKNOWN));
        }
        Err(e) => return Err(e.into()),
    };
    // The list's view of them: no spec, no environment.
    let apps: Vec<AppInfo> = apps
        .into_iter()
        .map(|a| AppInfo {
            spec: None,
            log_files: None,
            containment: None,
            log_dropped_bytes: None,
            log_pipes_kept: None,
            ..a
        })
        .collect();
    out.status(&apps)?;
    out.warning(c.warning());
    let all_up = !apps.is_empty() && apps.iter().all(|a| a.status == Status::Online);
    Ok(if all_up {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::NOT_RUNNING)
    })
}

/// `show APP`: every field, then the app's last `lines` log lines.
pub fn show(out: &Printer, target: String, lines: usize) -> Result<(), Error> {
    let mut c = client()?;
    let apps: Vec<AppInfo> = c.call_as(Op::Show {
        target: target.clone(),
    })?;
    let mut logs = Vec::new();
    if lines > 0 && !out.json {
        let op = Op::logs_tail(target, lines);
        // The log is a courtesy: a caller who may see the app but not
        // read its log still gets the rest.
        let r: Result<Option<LogsDone>, _> = c.call_stream_as(op, |l: LogLine| {
            logs.push(l);
            true
        });
        if let Err(ClientError::Daemon(b)) = r {
            log::debug!("show: no log lines: {b}");
        }
    }
    out.show(&apps, &logs)?;
    Ok(())
}

/// What `logs` was asked.
pub struct LogsArgs {
    /// App or selector; every app when absent.
    pub target: Option<String>,
    /// `-n`.
    pub lines: Option<usize>,
    /// `--since`.
    pub since: Option<String>,
    /// `--until`.
    pub until: Option<String>,
    /// `-f`.
    pub follow: bool,
    /// One stream only.
    pub stream: Option<LogStream>,
    /// `--raw`: the lines without their prefix.
    pub raw: bool,
    /// `--no-escape`: control characters as they are.
    pub no_escape: bool,
    /// `--grep`.
    pub grep: Option<String>,
    /// `--regex`.
    pub regex: bool,
    /// `-C`.
    pub context: u32,
}

/// `logs`: the last lines (or a time window) of one app or of every app,
/// merged by time, then new lines with `-f`.
pub fn logs(out: Printer, a: LogsArgs) -> Result<(), Error> {
    let since = when::resolve("--since", a.since)?;
    let until = when::resolve("--until", a.until)?;
    let windowed = since.is_some() || until.is_some();
    let lines = a
        .lines
        .unwrap_or(if windowed { usize::MAX } else { DEFAULT_LINES });
    let mut c = client()?;
    if a.follow {
        c.wait_for_ever().map_err(ClientError::Io)?;
    }
    let op = Op::Logs {
        // Empty: every app the caller may read (`all` is refused to a
        // caller whose grant does not cover every app).
        target: a.target.unwrap_or_default(),
        lines,
        follow: a.follow,
        stream: a.stream,
        since,
        until,
        grep: a.grep,
        regex: a.regex,
        context: a.context,
    };
    let out = Printer {
        escape: out.escape && !a.no_escape,
        ..out
    };
    let mut stdout = std::io::stdout().lock();
    let mut oldest: Option<String> = None;
    // A closed stdout ends the stream quietly.
    let done: Option<LogsDone> = c.call_stream_as(op, |line: LogLine| {
        if oldest.is_none() {
            oldest = crate::timefmt::split_stamp(line.line.as_bytes())
                .map(|(t, _)| String::from_utf8_lossy(t).into_owned());
        }
        out.log_line(&mut stdout, &line, a.raw)
    })?;
    if done.is_some_and(|d| d.truncated) {
        let more = match oldest {
            Some(t) => format!("--until {t}, or a larger --lines"),
            None => "a larger --lines".to_string(),
        };
        eprintln!("oxidepm: older matches were left out; to see them, ask again with {more}");
    }
    Ok(())
}

/// `audit`: the trail, `--since`/`--until` as durations ago, dates or
/// times.
pub fn audit(
    out: &Printer,
    app: Option<String>,
    actor: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: usize,
) -> Result<(), Error> {
    let since = when::resolve("--since", since)?;
    let until = when::resolve("--until", until)?;
    let rows: Vec<AuditRecord> = client()?.call_as(Op::Audit {
        app,
        actor,
        since,
        limit,
        until,
    })?;
    out.audit(&rows)?;
    Ok(())
}
