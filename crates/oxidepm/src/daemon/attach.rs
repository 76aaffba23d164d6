//! Container mode (`oxidepmd --foreground --attach <file>`), as
//! `pm2-runtime` and supervisord's `nodaemon`: the daemon in the
//! foreground, the file's apps defined and started, their output on its
//! stdout and stderr ([`output`]), SIGTERM and SIGINT a graceful stop of
//! every app, and an exit with the apps' status once they have all ended.
//!
//! The exit status, as tini and pm2-runtime give it:
//! - the apps ended on their own (a `restart = "never"` app that exited,
//!   an app given up on as errored, an app stopped with `oxidepm stop`):
//!   0 when each exited 0 or was stopped, else the status of the first
//!   one that failed, in the order they ended: its exit code, or 128 + the
//!   signal that killed it;
//! - stopped by SIGTERM/SIGINT (or `oxidepm kill`): 0 when every app ended
//!   cleanly (exit 0, or its own stop signal), else the first other status
//!   (137 for an app that had to be killed after its kill_timeout).
//!
//! Orphans of the apps are reaped by the daemon as everywhere (it is a
//! child subreaper, and PID 1 in a container).

pub mod output;

use super::Daemon;
use crate::store::NewAudit;
use crate::supervise::{define, lock};
use output::{Outputs, Source, Tail};
use oxidepm_proto::{Actor, AppSpec, Imported, Status};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The exit status of a file that cannot be used (sysexits' EX_CONFIG).
pub const EX_CONFIG: u8 = 78;

/// How often the apps are looked at to tell whether they have all ended.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// A loaded file, ready to run in the foreground.
pub struct Attach {
    /// The file.
    pub file: PathBuf,
    /// Its apps.
    pub apps: Vec<AppSpec>,
    /// Where their output goes.
    pub outputs: Outputs,
}

impl std::fmt::Debug for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let apps: Vec<&str> = self.apps.iter().map(|a| a.name.as_str()).collect();
        f.debug_struct("Attach")
            .field("file", &self.file)
            .field("apps", &apps)
            .finish()
    }
}

/// Loads `file` as `oxidepm start` would (`--env`, `--only`) and starts the
/// output writers; the file's notes are printed as warnings.
pub fn load(file: &Path, env: Option<String>, only: Vec<String>) -> Result<Attach, String> {
    let loaded = import(file, env, only)?;
    if loaded.apps.is_empty() {
        return Err(format!("{}: no apps to run (check --only)", file.display()));
    }
    for note in &loaded.notes {
        eprintln!("oxidepmd: warning: {note}");
    }
    Ok(Attach {
        file: file.to_path_buf(),
        apps: loaded.apps,
        outputs: Outputs::start(),
    })
}

/// The largest answer of `oxidepm import --json` read (a file is at most
/// 4 MiB; its specs are not much larger).
const MAX_IMPORTED: u64 = 64 << 20;

/// The file's apps as `oxidepm --json import` gives them. The CLI beside the
/// daemon (else on PATH) reads the file, so that the daemon does not link
/// every app-file parser (and node's evaluation of an ecosystem file runs
/// in its own process, as for `start`); its errors reach stderr as they are.
// Read by `load`, before the daemon's runtime is started.
#[allow(clippy::disallowed_methods)]
fn import(file: &Path, env: Option<String>, only: Vec<String>) -> Result<Imported, String> {
    use std::io::Read;
    let cli = crate::lanes::admin::sibling("oxidepm")
        .or_else(|| crate::lanes::admin::find_program("oxidepm"))
        .ok_or("container mode reads app files with `oxidepm`, which is neither beside oxidepmd nor on PATH; install both")?;
    let mut cmd = std::process::Command::new(&cli);
    cmd.args(["--json", "import"]).arg(file);
    if let Some(e) = env {
        cmd.args(["--env", &e]);
    }
    if !only.is_empty() {
        cmd.args(["--only", &only.join(",")]);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    let mut out = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|o| o.take(MAX_IMPORTED).read_to_end(&mut out));
    if out.len() as u64 >= MAX_IMPORTED {
        // It would block writing the rest, and the wait with it.
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| format!("{}: {e}", cli.display()))?;
    if !status.success() {
        // The CLI said why on stderr, which is ours.
        return Err(format!("{} cannot be used", file.display()));
    }
    match read {
        Some(Ok(_)) if (out.len() as u64) < MAX_IMPORTED => {
            serde_json::from_slice(&out).map_err(|e| {
                format!(
                    "{}: unexpected answer of {}: {e}",
                    file.display(),
                    cli.display()
                )
            })
        }
        _ => Err(format!(
            "{}: the apps could not be read from {}",
            file.display(),
            cli.display()
        )),
    }
}

/// How an attached app ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ended {
    code: Option<i32>,
    signal: Option<i32>,
    /// The signal its stop sends (a death by it, asked for, is clean).
    stop_signal: Option<i32>,
}

impl Ended {
    /// Its exit status, None when clean. `stopping`: the daemon was told
    /// to stop, so a death by the app's own stop signal is clean.
    fn failure(self, stopping: bool) -> Option<u8> {
        match (self.code, self.signal) {
            (Some(0), _) | (None, None) => None,
            (Some(c), _) => Some(if c > 0 { (c & 0xff) as u8 } else { 1 }),
            (None, Some(s)) if stopping && Some(s) == self.stop_signal => None,
            (None, Some(s)) => Some((128 + s).min(255) as u8),
        }
    }
}

/// The attached apps, while they run.
pub struct Attached {
    names: Vec<String>,
    /// The apps that have ended for good, in the order they were seen to.
    ended: Vec<(String, Ended)>,
    tail: Option<Tail>,
    outputs: Outputs,
}

/// Defines and starts the file's apps, their output followed from now.
/// On failure nothing of the file is left running.
pub async fn begin(daemon: &Arc<Daemon>, attach: Attach) -> Result<Attached, (Attached, String)> {
    let Attach {
        file,
        apps,
        outputs,
    } = attach;
    let all: Vec<String> = apps.iter().map(|a| a.name.clone()).collect();
    // An app the file does not start (`autostart = false`) is not waited
    // for: it has not begun, so it cannot end.
    let names: Vec<String> = apps
        .iter()
        .filter(|a| a.autostart)
        .map(|a| a.name.clone())
        .collect();
    let sources = {
        let s = lock(&daemon.sup);
        apps.iter()
            .flat_map(|a| {
                let [out, err] = s.log_paths(&a.name);
                [(a, out, false), (a, err, true)]
            })
            .map(|(a, path, err)| Source {
                app: a.name.clone(),
                path,
                err,
                stamped: a.log_timestamps,
                keep: a.log_keep,
            })
            .collect()
    };
    let mut attached = Attached {
        names,
        ended: Vec::new(),
        tail: Some(Tail::start(sources, &outputs)),
        outputs,
    };
    let actor = Actor::system("attach");
    let result = define::define(&daemon.sup, apps, &actor, true).await;
    let result =
        result.map_err(|e| oxidepm_proto::ErrorBody::from(super::errors::OpError::from(e)));
    let (outcome, message) = match &result {
        Ok(_) => ("ok".to_string(), format!("attached {}", file.display())),
        Err(e) => (e.code.as_str().to_string(), e.message.clone()),
    };
    let row = NewAudit {
        actor: &actor,
        socket: "attach",
        op: "define",
        apps: &all,
        outcome: &outcome,
        message: &message,
        via: None,
    };
    if let Err(e) = lock(&daemon.sup).store.record_audit(&row) {
        log::error!("cannot write the audit row of --attach: {e}");
    }
    match result {
        Ok(_) => {
            log::info!("attached {}: {}", file.display(), all.join(", "));
            Ok(attached)
        }
        Err(e) => {
            let e = format!("cannot start the apps of {}: {}", file.display(), e.message);
            attached.seen(daemon);
            Err((attached, e))
        }
    }
}

impl Attached {
    /// Notes the apps that have ended for good since the last look.
    fn seen(&mut self, daemon: &Daemon) {
        let s = lock(&daemon.sup);
        for name in &self.names {
            if self.ended.iter().any(|(n, _)| n == name) {
                continue;
            }
            let Some(app) = s.apps().find(|a| &a.spec.name == name) else {
                // Deleted from another shell: it is over, and not a failure.
                let clean = Ended {
                    code: None,
                    signal: None,
                    stop_signal: None,
                };
                self.ended.push((name.clone(), clean));
                continue;
            };
            let over = matches!(app.rt.status, Status::Stopped | Status::Errored)
                // A periodic job that is stopped runs again at its time.
                && app.spec.cron_restart.is_none();
            if over {
                let stop_signal =
                    crate::supervise::spawn::parse_signal(&app.spec.stop_signal).map(|s| s as i32);
                self.ended.push((
                    name.clone(),
                    Ended {
                        code: app.rt.last_exit,
                        signal: app.last_signal,
                        stop_signal,
                    },
                ));
            }
        }
    }

    /// Resolves once every attached app has ended for good (never when
    /// the file starts none: then only a signal or `kill` ends the daemon).
    pub async fn all_ended(&mut self, daemon: &Daemon) {
        if self.names.is_empty() {
            return std::future::pending().await;
        }
        loop {
            self.seen(daemon);
            if self.ended.len() >= self.names.len() {
                return;
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }

    /// After the apps are stopped: the exit status (see the module's
    /// documentation); the last of their output is written first.
    pub async fn finish(mut self, daemon: &Daemon, stopping: bool) -> u8 {
        self.seen(daemon);
        if let Some(t) = self.tail.take() {
            t.finish();
        }
        let status = self
            .ended
            .iter()
            .find_map(|(name, e)| e.failure(stopping).map(|c| (name, c)));
        let code = match status {
            Some((name, code)) => {
                log::info!("exiting with {code}: the status of {name}");
                code
            }
            None => 0,
        };
        for (what, out) in [
            ("stdout", &self.outputs.stdout),
            ("stderr", &self.outputs.stderr),
        ] {
            if out.dropped() > 0 {
                log::warn!(
                    "{} lines of the apps' output were not written to {what}: it was not read fast enough",
                    out.dropped()
                );
            }
        }
        self.outputs.drain(Duration::from_secs(2)).await;
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: Option<i32>, signal: Option<i32>) -> Ended {
        Ended {
            code,
            signal,
            stop_signal: Some(15),
        }
    }

    #[test]
    fn statuses_are_those_of_tini_and_pm2_runtime() {
        assert_eq!(ended(Some(0), None).failure(false), None);
        assert_eq!(ended(Some(3), None).failure(false), Some(3));
        assert_eq!(ended(Some(3), None).failure(true), Some(3));
        assert_eq!(ended(None, Some(9)).failure(true), Some(137));
        assert_eq!(ended(None, Some(15)).failure(true), None);
        assert_eq!(ended(None, Some(15)).failure(false), Some(143));
        assert_eq!(ended(None, None).failure(false), None);
    }
}
