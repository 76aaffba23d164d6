//! Reading and emptying app logs.
//!
//! A `logs` answer on a socket is read and encoded off the runtime thread
//! (a blocking task) and handed to the connection's writer in chunks
//! through a small channel: a client that reads slowly slows the reader
//! down, and the daemon never holds more than a few chunks, however many
//! lines were asked for. Bytes read are charged to the actor's budget
//! ([`super::read_rate`]).

use super::log_search::{self, Grep};
use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::server::Sink;
use crate::supervise::{lock, logfile, SelectError};
use oxidepm_proto::{Flushed, LogLine, LogStream, LogsDone, Op, Reply, Response};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub(in crate::daemon) use super::log_window::{LogPlan, Window};

/// Encoded lines handed to the writer at once.
const CHUNK: usize = 256 * 1024;
/// Chunks waiting for the writer; with `CHUNK`, what one stream may hold.
const QUEUED: usize = 2;
/// How often a follower looks for new lines.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// Log bytes a follower reads at once: short lines grow about eightfold
/// as JSON items, so this makes about a chunk.
const FOLLOW_READ: usize = CHUNK / 8;
/// How often a follower whose client is slow looks for rotated files.
const FOLLOW_WAIT: Duration = Duration::from_millis(20);
/// How often a silent stream checks that its client is still there.
const GONE_EVERY: Duration = Duration::from_millis(250);

/// One streamed line as it goes on the wire: the same JSON as
/// `Response::item(id, LogLine)`, without building either.
#[derive(Serialize)]
struct Item<'a> {
    id: u64,
    stream: ItemLine<'a>,
}

#[derive(Serialize)]
struct ItemLine<'a> {
    app: &'a str,
    stream: LogStream,
    line: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    matched: Option<bool>,
}

/// Encodes streamed lines into chunks and hands them to the writer.
struct Encoder {
    id: u64,
    out: Vec<u8>,
    tx: mpsc::Sender<Vec<u8>>,
    daemon: Arc<Daemon>,
    actor: String,
}

// The encoder runs in `spawn_blocking` (see `stream_logs`): its waits
// block that thread only.
#[allow(clippy::disallowed_methods)]
impl Encoder {
    fn push(&mut self, app: &str, stream: LogStream, line: &[u8], matched: Option<bool>) {
        let line = String::from_utf8_lossy(line);
        let item = Item {
            id: self.id,
            stream: ItemLine {
                app,
                stream,
                line: &line,
                matched,
            },
        };
        // Writing JSON into a Vec fails only on a non-string map key.
        if serde_json::to_writer(&mut self.out, &item).is_ok() {
            self.out.push(b'\n');
        }
    }

    /// Hands on what is encoded once it is a chunk (or always, with
    /// `force`); false once the writer is gone.
    fn flush(&mut self, force: bool) -> bool {
        if self.out.is_empty() || (!force && self.out.len() < CHUNK) {
            return !self.tx.is_closed();
        }
        let chunk = std::mem::replace(&mut self.out, Vec::with_capacity(CHUNK + 4096));
        let wait = self
            .daemon
            .log_reads
            .charge(&self.actor, chunk.len() as u64);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        self.tx.blocking_send(chunk).is_ok()
    }

    /// Hands on whatever is encoded, calling `waiting` every little while
    /// until the writer takes it; false once the writer is gone.
    fn flush_waiting(&mut self, mut waiting: impl FnMut()) -> bool {
        use tokio::sync::mpsc::error::TrySendError;
        if self.out.is_empty() {
            return !self.tx.is_closed();
        }
        let mut chunk = std::mem::replace(&mut self.out, Vec::with_capacity(CHUNK + 4096));
        // Over the actor's read budget, the wait too is spent looking.
        let wait = self
            .daemon
            .log_reads
            .charge(&self.actor, chunk.len() as u64);
        let until = std::time::Instant::now() + wait;
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            if left.is_zero() {
                break;
            }
            waiting();
            std::thread::sleep(left.min(FOLLOW_WAIT));
        }
        loop {
            match self.tx.try_send(chunk) {
                Ok(()) => return true,
                Err(TrySendError::Closed(_)) => return false,
                Err(TrySendError::Full(c)) => {
                    chunk = c;
                    waiting();
                    std::thread::sleep(FOLLOW_WAIT);
                }
            }
        }
    }
}

/// Reads the plan's lines in `window` (the last `lines` of each file),
/// merged by time, into `enc`; false once the writer is gone.
fn produce_merged(enc: &mut Encoder, plan: &LogPlan, lines: usize, window: &Window) -> bool {
    let mut readers = Vec::new();
    for (app, st, path, keep) in plan {
        let r = logfile::TailReader::open_window(
            path,
            *keep,
            lines,
            window.since.as_deref().map(str::as_bytes),
            window.until.as_deref().map(str::as_bytes),
        );
        match r {
            Ok(r) => readers.push(((app.as_str(), *st), r)),
            Err(e) => log::debug!("logs: {}: {e}", path.display()),
        }
    }
    let mut alive = true;
    let until = window.until.as_deref().map(str::as_bytes);
    let r = logfile::merge(readers, until, |(app, st), line| {
        enc.push(app, *st, line, None);
        alive = enc.flush(false);
        alive
    });
    if let Err(e) = r {
        log::debug!("logs: {e}");
    }
    alive
}

/// Reads the plan's last `lines` lines, or its matches with `grep` (then
/// new lines, when following) into `enc`; runs on a blocking thread until
/// done or the writer is gone. Several apps, or a time window, are merged
/// by time; one app's files come each in turn. Returns whether a search
/// left older matches out.
// Runs in `spawn_blocking` (see `stream_logs`).
#[allow(clippy::disallowed_methods)]
fn produce(mut enc: Encoder, ask: Produce) -> bool {
    let Produce {
        plan,
        lines,
        follow,
        window,
        grep,
    } = ask;
    let mut followers = Vec::new();
    if follow {
        for (app, st, path, keep) in &plan {
            followers.push((app, *st, logfile::Follower::open_at_end(path, *keep)));
        }
    }
    let (alive, truncated) = match &grep {
        Some(g) => produce_found(&mut enc, &plan, g, lines, &window),
        None => (produce_tail(&mut enc, &plan, lines, &window), false),
    };
    if !alive || !enc.flush(true) || !follow {
        return truncated;
    }
    let pattern = grep.as_ref().map(|g| &g.pattern);
    loop {
        let mut more = false;
        for i in 0..followers.len() {
            let (app, st, f) = &mut followers[i];
            // About a chunk at a time: what the daemon holds for a follower
            // far behind its log is a few chunks, not the backlog.
            let r = f.read(FOLLOW_READ, |line| match pattern {
                None => enc.push(app, *st, line, None),
                Some(p) if p.is_match_text(line) => enc.push(app, *st, line, Some(true)),
                Some(_) => {}
            });
            match r {
                Ok(m) => more |= m,
                Err(e) => log::debug!("logs --follow: {e}"),
            }
            // While the client is slow to take the chunk, every follower
            // keeps hold of the files its log rotates into.
            let waiting = || {
                for (_, _, f) in followers.iter_mut() {
                    f.refresh();
                }
            };
            if !enc.flush_waiting(waiting) {
                return truncated;
            }
        }
        if !more {
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
}

/// What [`produce`] reads.
struct Produce {
    plan: LogPlan,
    lines: usize,
    follow: bool,
    window: Window,
    grep: Option<Grep>,
}

/// The last `lines` lines of the plan's files into `enc`; false once the
/// writer is gone.
fn produce_tail(enc: &mut Encoder, plan: &LogPlan, lines: usize, window: &Window) -> bool {
    if plan.len() > 2 || !window.is_open() {
        return produce_merged(enc, plan, lines, window);
    }
    for (app, st, path, keep) in plan {
        let mut reader = match logfile::TailReader::open(path, *keep, lines) {
            Ok(r) => r,
            Err(e) => {
                log::debug!("logs: {}: {e}", path.display());
                continue;
            }
        };
        loop {
            let more = reader.read(CHUNK, |line| enc.push(app, *st, line, None));
            if !enc.flush(false) {
                return false;
            }
            match more {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    log::debug!("logs: {}: {e}", path.display());
                    break;
                }
            }
        }
    }
    true
}

/// The newest `lines` matches of `grep` in the plan's files into `enc`,
/// the read charged to the actor as it goes: whether the writer is still
/// there, and whether older matches were left out.
// Runs in `spawn_blocking`: the budget's wait blocks that thread only.
#[allow(clippy::disallowed_methods)]
fn produce_found(
    enc: &mut Encoder,
    plan: &LogPlan,
    grep: &Grep,
    lines: usize,
    window: &Window,
) -> (bool, bool) {
    let (daemon, actor) = (enc.daemon.clone(), enc.actor.clone());
    let charge = |n: usize| {
        let wait = daemon.log_reads.charge(&actor, n as u64);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    };
    let (hits, truncated) = log_search::search(plan, grep, lines, log_search::HOLD, window, charge);
    for hit in &hits {
        let (app, st) = log_search::source(plan, hit);
        enc.push(&app, st, &hit.found.line, Some(hit.found.matched));
        if !enc.flush(false) {
            return (false, truncated);
        }
    }
    (true, truncated)
}

/// What a `logs` request on a socket asks for, and who asks.
pub(in crate::daemon) struct LogsAsk {
    /// Selector.
    pub target: String,
    /// Lines from the end of each stream.
    pub lines: usize,
    /// Keep streaming new lines.
    pub follow: bool,
    /// One stream only.
    pub stream: Option<LogStream>,
    /// The actor whose read budget pays for it.
    pub actor: String,
    /// Only lines in this time window.
    pub window: Window,
    /// With no target: the apps the caller's grant narrows it to.
    pub only: Option<Vec<String>>,
    /// Only the lines matching this (and their context).
    pub grep: Option<Grep>,
}

impl LogsAsk {
    /// What `op`, a `logs` request of `actor`, asks for: its window and
    /// search parsed, refused when one cannot be read. `only`: the apps
    /// the caller's grant narrows a request without a selector to.
    pub fn of(op: Op, actor: String, only: Option<Vec<String>>) -> Result<LogsAsk, OpError> {
        let Op::Logs {
            target,
            lines,
            follow,
            stream,
            since,
            until,
            grep,
            regex,
            context,
        } = op
        else {
            return Err(OpError::BadPattern(format!(
                "{} is not a logs request",
                op.name()
            )));
        };
        Ok(LogsAsk {
            target,
            lines,
            follow,
            stream,
            actor,
            window: Window::parse(since.as_deref(), until.as_deref())?,
            only,
            grep: Grep::parse(grep.as_deref(), regex, context)?,
        })
    }
}

impl Daemon {
    /// `logs` as one answer (through an agent's lane): the last lines, or
    /// the matches of a search.
    pub(super) async fn logs_answer(&self, ask: LogsAsk) -> Result<Reply, OpError> {
        if ask.grep.is_none() {
            let only = ask.only.as_deref();
            return self
                .log_lines(
                    &ask.target,
                    ask.lines,
                    ask.stream,
                    &ask.actor,
                    only,
                    &ask.window,
                )
                .map(Into::into);
        }
        self.found_lines(ask).await.map(Into::into)
    }

    /// `logs --grep` as one answer (through an agent's lane): the newest
    /// matches that fit the ops reply bound, searched on a blocking thread
    /// (a search reads whole logs), the bytes read charged afterwards.
    /// The matches held fill the bound, so when older ones were left out
    /// for it the reply, with its JSON, is over the bound and the
    /// responder marks it truncated.
    pub(super) async fn found_lines(&self, ask: LogsAsk) -> Result<Vec<LogLine>, OpError> {
        let Some(grep) = ask.grep else {
            return Err(OpError::BadPattern("no pattern to search for".into()));
        };
        let plan = self.log_plan(&ask.target, ask.stream, ask.only.as_deref())?;
        if let Err(wait) = self.log_reads.check(&ask.actor) {
            return Err(OpError::RateLimited {
                actor: ask.actor,
                wait,
            });
        }
        let (lines, window, budget) = (ask.lines, ask.window, self.ops_max_reply);
        let searched = tokio::task::spawn_blocking(move || {
            let mut read = 0;
            let (hits, _) = log_search::search(&plan, &grep, lines, budget, &window, |n| read += n);
            let out: Vec<LogLine> = hits
                .iter()
                .map(|h| {
                    let (app, stream) = log_search::source(&plan, h);
                    LogLine {
                        app,
                        stream,
                        line: String::from_utf8_lossy(&h.found.line).into_owned(),
                        matched: Some(h.found.matched),
                    }
                })
                .collect();
            (out, read)
        })
        .await;
        let (out, read) =
            searched.map_err(|e| OpError::BadPattern(format!("the search failed: {e}")))?;
        self.log_reads.charge(&ask.actor, read as u64);
        Ok(out)
    }

    /// `logs` as one answer (through an agent's lane): the newest of the
    /// last `lines` lines of each file that fit the ops reply bound. When
    /// older lines are left out, the line text is the whole bound, so the
    /// reply is over it and the responder marks it truncated.
    pub(super) fn log_lines(
        &self,
        target: &str,
        lines: usize,
        stream: Option<LogStream>,
        actor: &str,
        only: Option<&[String]>,
        window: &Window,
    ) -> Result<Vec<LogLine>, OpError> {
        let plan = self.log_plan(target, stream, only)?;
        if let Err(wait) = self.log_reads.check(actor) {
            return Err(OpError::RateLimited {
                actor: actor.to_string(),
                wait,
            });
        }
        let mut budget = self.ops_max_reply;
        let mut out = Vec::new();
        for (app, st, path, keep) in &plan {
            let since = window.since.as_deref().map(str::as_bytes);
            let until = window.until.as_deref().map(str::as_bytes);
            let (mut got, _) =
                logfile::newest_within_since(path, *keep, lines, budget, since, until)
                    .unwrap_or_default();
            if let Some(until) = &window.until {
                // In time order: the first line stamped after `until` ends
                // the window, with the unstamped lines that follow it.
                let end = got.iter().position(|l| {
                    crate::timefmt::split_stamp(l).is_some_and(|(t, _)| t > until.as_bytes())
                });
                got.truncate(end.unwrap_or(got.len()));
            }
            for line in got {
                budget = budget.saturating_sub(line.len());
                self.log_reads.charge(actor, line.len() as u64);
                out.push(LogLine {
                    app: app.clone(),
                    stream: *st,
                    line: String::from_utf8_lossy(&line).into_owned(),
                    matched: None,
                });
            }
        }
        Ok(out)
    }

    /// `logs` on a socket: the last lines as streamed items, then new
    /// lines until the client goes when following, then a final answer.
    pub(in crate::daemon) async fn stream_logs(
        self: &Arc<Self>,
        id: u64,
        ask: LogsAsk,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let LogsAsk {
            target,
            lines,
            follow,
            stream,
            actor,
            window,
            only,
            grep,
        } = ask;
        let plan = match self.log_plan(&target, stream, only.as_deref()) {
            Ok(p) => p,
            Err(e) => return sink.send(&Response::err(id, e.into())).await,
        };
        let apps = plan.len() / 2;
        let (tx, mut rx) = mpsc::channel(QUEUED);
        let enc = Encoder {
            id,
            out: Vec::with_capacity(CHUNK + 4096),
            tx,
            daemon: self.clone(),
            actor,
        };
        let ask = Produce {
            plan,
            lines,
            follow,
            window,
            grep,
        };
        // Dropping `rx` (the client went, or a write failed) ends it.
        let producer = tokio::task::spawn_blocking(move || produce(enc, ask));
        loop {
            tokio::select! {
                chunk = rx.recv() => match chunk {
                    Some(chunk) => sink.send_encoded(&chunk).await?,
                    None => break,
                },
                _ = tokio::time::sleep(GONE_EVERY) => {
                    if sink.client_gone() {
                        return Ok(());
                    }
                }
            }
        }
        let truncated = producer.await.unwrap_or(false);
        let done = Reply::from(LogsDone { apps, truncated });
        sink.send(&Response::ok(id, done.to_value().unwrap_or_default()))
            .await
    }

    /// The files of the selected apps; an empty target is every app (or
    /// `only` those the caller's grant narrows it to).
    fn log_plan(
        &self,
        target: &str,
        stream: Option<LogStream>,
        only: Option<&[String]>,
    ) -> Result<LogPlan, SelectError> {
        let s = lock(&self.sup);
        let ids = if target.is_empty() {
            s.apps()
                .filter(|a| only.is_none_or(|names| names.contains(&a.spec.name)))
                .map(|a| a.id)
                .collect()
        } else {
            s.resolve(target)?
        };
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
