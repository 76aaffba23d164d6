//! Reading and emptying app logs.

use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::server::Sink;
use crate::supervise::{lock, logfile, SelectError};
use oxidepm_proto::{Flushed, LogLine, LogStream, LogsDone, Reply, Response};
use std::path::PathBuf;
use std::time::Duration;

/// The log files a `logs` request reads: app, stream, path, files kept.
type LogPlan = Vec<(String, LogStream, PathBuf, u32)>;

/// One streamed line.
fn item(id: u64, line: LogLine) -> Response {
    Response::item(id, serde_json::to_value(line).unwrap_or_default())
}

impl Daemon {
    /// `logs` as one answer (through an agent's lane): the last lines of
    /// each file.
    pub(super) fn log_lines(
        &self,
        target: &str,
        lines: usize,
        stream: Option<LogStream>,
    ) -> Result<Vec<LogLine>, OpError> {
        let plan = self.log_plan(target, stream)?;
        // The whole answer is one message: keep it smaller than on a socket.
        let lines = lines.min(10_000);
        let mut out = Vec::new();
        for (app, st, path, keep) in &plan {
            for line in logfile::tail(path, *keep, lines).unwrap_or_default() {
                out.push(LogLine {
                    app: app.clone(),
                    stream: *st,
                    line,
                });
            }
        }
        Ok(out)
    }

    /// `logs` on a socket: the last lines as streamed items, then new
    /// lines until the client goes when following, then a final answer.
    pub(in crate::daemon) async fn stream_logs(
        &self,
        id: u64,
        target: &str,
        lines: usize,
        follow: bool,
        stream: Option<LogStream>,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let plan = match self.log_plan(target, stream) {
            Ok(p) => p,
            Err(e) => return sink.send(&Response::err(id, e.into())).await,
        };
        // The lines are read into memory before they are sent: bound it.
        let lines = lines.min(100_000);
        let mut followers = Vec::new();
        for (app, st, path, keep) in &plan {
            if follow {
                followers.push((app.clone(), *st, logfile::Follower::open_at_end(path)));
            }
            for line in logfile::tail(path, *keep, lines).unwrap_or_default() {
                let line = LogLine {
                    app: app.clone(),
                    stream: *st,
                    line,
                };
                sink.send(&item(id, line)).await?;
            }
        }
        if follow {
            loop {
                if sink.client_gone() {
                    return Ok(());
                }
                for (app, st, f) in followers.iter_mut() {
                    for line in f.poll().unwrap_or_default() {
                        let line = LogLine {
                            app: app.clone(),
                            stream: *st,
                            line,
                        };
                        sink.send(&item(id, line)).await?;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let done = Reply::from(LogsDone {
            apps: plan.len() / 2,
        });
        sink.send(&Response::ok(id, done.to_value().unwrap_or_default()))
            .await
    }

    fn log_plan(&self, target: &str, stream: Option<LogStream>) -> Result<LogPlan, SelectError> {
        let s = lock(&self.sup);
        let ids = s.resolve(target)?;
        Ok(ids
            .iter()
            .filter_map(|i| s.app(*i))
            .flat_map(|a| {
                let [o, e] = s.log_paths(&a.spec.name);
                let keep = a.spec.log_keep;
                let name = a.spec.name.clone();
                [
                    (name.clone(), LogStream::Out, o, keep),
                    (name, LogStream::Err, e, keep),
                ]
            })
            .filter(|(_, st, _, _)| stream.is_none_or(|want| want == *st))
            .collect())
    }

    /// `flush`: empties the log files of the selected apps (when none is
    /// named, every app, or `only` those the caller's grant narrows it to).
    pub(super) fn flush(
        &self,
        target: Option<String>,
        only: Option<&[String]>,
    ) -> Result<Flushed, OpError> {
        let s = lock(&self.sup);
        let ids = match target {
            Some(t) => s.resolve(&t)?,
            None => s
                .apps()
                .filter(|a| only.is_none_or(|names| names.contains(&a.spec.name)))
                .map(|a| a.id)
                .collect(),
        };
        let mut flushed = Vec::new();
        for id in ids {
            let Some(a) = s.app(id) else { continue };
            for p in s.log_paths(&a.spec.name) {
                logfile::flush(&p, a.spec.log_keep)
                    .map_err(|source| OpError::Flush { path: p, source })?;
            }
            flushed.push(a.spec.name.clone());
        }
        Ok(Flushed { flushed })
    }
}
