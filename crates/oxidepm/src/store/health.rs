//! What the state database still owes the disk. A write that fails (disk
//! full, a read-only or immutable file) is not forgotten: the store notes
//! what it lost — which apps' runtime rows, which run rows, which events —
//! and a retry writes it again from the supervisor's memory, which stays
//! the truth meanwhile. The same record says whether the daemon is
//! degraded, which `ping` and `status` report.

use super::{Result, Store};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the daemon writes again what failed to reach state.db, and
/// checks that the file is still there.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);

/// Events kept for a retry at most; beyond that the oldest are dropped
/// (and counted): they are the record, not what recovery rests on.
pub const MAX_PENDING_EVENTS: usize = 10_000;

/// Run rows kept for a retry at most; beyond that the oldest ended ones
/// are dropped (and counted): recovery needs the runs still going.
pub const MAX_PENDING_RUNS: usize = 10_000;

/// How long a notice about a repaired state.db (restored from a backup,
/// rewritten from memory) stays in `ping` and `status`.
pub const NOTICE_FOR: Duration = Duration::from_secs(3600);

/// A row of `runs` that did not reach the disk: its start, its end, or
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRun {
    /// The start, when its insert failed: app id, pid, Unix ms, actor.
    pub start: Option<(u64, u32, i64, String)>,
    /// The end, when its update failed: Unix ms, exit code, signal.
    pub end: Option<(i64, Option<i32>, Option<i32>)>,
    /// The pid, when its update failed (the start reached the disk).
    pub pid: Option<u32>,
}

/// An event whose insert failed, with the time it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEvent {
    /// Unix ms.
    pub at: i64,
    /// The app's id.
    pub app_id: u64,
    /// The app's name.
    pub app: String,
    /// The event's kind.
    pub kind: String,
    /// Who caused it.
    pub actor: String,
    /// Its detail.
    pub detail: String,
}

/// The writes the store owes, and what it has to tell about itself.
#[derive(Debug, Default)]
pub struct Health {
    /// Writes that failed since the store was opened; a request compares
    /// it before and after to learn whether a write it caused failed.
    failures: u64,
    /// Apps whose runtime row on disk is not what memory holds.
    dirty: BTreeSet<u64>,
    /// Whether `app_sessions` on disk may differ from memory.
    sessions_dirty: bool,
    /// Whether every app's runtime row and current run are owed (a
    /// batch's commit failed).
    everything: bool,
    /// Run rows to write, by run id.
    runs: BTreeMap<i64, PendingRun>,
    /// Events to write, oldest first.
    events: VecDeque<PendingEvent>,
    /// Events dropped because too many were pending.
    events_dropped: u64,
    /// Ended runs dropped because too many were pending.
    runs_dropped: u64,
    /// The last failure, for the warning.
    last_error: Option<String>,
    /// Why the file must be rewritten from memory (deleted, replaced,
    /// truncated), when it must.
    lost: Option<String>,
    /// Things a person should know for a while, with when they happened.
    notices: Vec<(Instant, String)>,
}

impl Health {
    /// Writes that failed so far.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Whether anything is owed to the disk.
    pub fn pending(&self) -> bool {
        !self.dirty.is_empty()
            || self.everything
            || self.sessions_dirty
            || !self.runs.is_empty()
            || !self.events.is_empty()
            || self.lost.is_some()
    }

    /// Notes a failed write.
    pub fn failed(&mut self, error: &dyn std::fmt::Display) {
        self.failures += 1;
        self.last_error = Some(error.to_string());
    }

    /// Notes that a retry failed too (not a new failure of a request).
    pub fn still_failing(&mut self, error: &dyn std::fmt::Display) {
        self.last_error = Some(error.to_string());
    }

    /// Notes that app `id`'s runtime row did not reach the disk.
    pub fn dirty_app(&mut self, id: u64) {
        self.dirty.insert(id);
    }

    /// Notes that a session row did not reach the disk.
    pub fn dirty_sessions(&mut self) {
        self.sessions_dirty = true;
    }

    /// Notes that a run's start did not reach the disk.
    pub fn run_started(&mut self, run: i64, start: (u64, u32, i64, String)) {
        self.runs.entry(run).or_insert(PendingRun {
            start: None,
            end: None,
            pid: None,
        });
        if let Some(r) = self.runs.get_mut(&run) {
            r.start = Some(start);
        }
    }

    /// Gives a run whose start is still owed its pid (0 until known).
    pub fn run_pid(&mut self, run: i64, pid: u32) {
        if let Some(Some(start)) = self.runs.get_mut(&run).map(|r| r.start.as_mut()) {
            start.1 = pid;
        }
    }

    /// Notes that a run's pid did not reach the disk (its start did).
    pub fn run_pid_owed(&mut self, run: i64, pid: u32) {
        self.runs
            .entry(run)
            .or_insert(PendingRun {
                start: None,
                end: None,
                pid: None,
            })
            .pid = Some(pid);
    }

    /// Notes that writes of unknown rows were lost (a batch's commit
    /// failed): every app's runtime row, current run and the sessions are
    /// written again from memory.
    pub fn everything_dirty(&mut self) {
        self.everything = true;
        self.sessions_dirty = true;
    }

    /// Notes that a run's end did not reach the disk.
    pub fn run_ended(&mut self, run: i64, end: (i64, Option<i32>, Option<i32>)) {
        let r = self.runs.entry(run).or_insert(PendingRun {
            start: None,
            end: None,
            pid: None,
        });
        r.end = Some(end);
        if self.runs.len() > MAX_PENDING_RUNS {
            let oldest_ended = self
                .runs
                .iter()
                .find(|(_, r)| r.end.is_some())
                .map(|(id, _)| *id);
            if let Some(id) = oldest_ended {
                self.runs.remove(&id);
                self.runs_dropped += 1;
            }
        }
    }

    /// Notes an event that did not reach the disk.
    pub fn event(&mut self, e: PendingEvent) {
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    /// Notes that the file is not the one the store wrote (`why`): it is
    /// to be rewritten from memory.
    pub fn lost(&mut self, why: String) {
        if self.lost.is_none() {
            self.failures += 1;
            self.lost = Some(why);
        }
    }

    /// Why the file is to be rewritten, if it is.
    pub fn lost_reason(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// Adds a notice shown in `ping` and `status` for [`NOTICE_FOR`].
    pub fn notice(&mut self, text: String) {
        self.notices.push((Instant::now(), text));
    }

    /// What a retry has to write.
    pub fn owed(&self) -> Owed {
        Owed {
            everything: self.everything,
            apps: self.dirty.iter().copied().collect(),
            sessions: self.sessions_dirty,
            runs: self.runs.clone(),
            events: self.events.iter().cloned().collect(),
        }
    }

    /// Everything in `owed` reached the disk: forgets it (what was noted
    /// meanwhile stays).
    pub fn written(&mut self, owed: &Owed) {
        if owed.everything {
            self.everything = false;
        }
        for id in &owed.apps {
            self.dirty.remove(id);
        }
        if owed.sessions {
            self.sessions_dirty = false;
        }
        for (id, run) in &owed.runs {
            if self.runs.get(id) == Some(run) {
                self.runs.remove(id);
            }
        }
        let n = owed.events.len().min(self.events.len());
        self.events.drain(..n);
        if !self.pending() {
            self.last_error = None;
        }
    }

    /// The file was rewritten from memory: nothing is owed any more.
    pub fn rewritten(&mut self) {
        self.dirty.clear();
        self.sessions_dirty = false;
        self.runs.clear();
        self.events.clear();
        self.lost = None;
        self.last_error = None;
    }

    /// The degraded-state warning, or `None` when all is well. `path` is
    /// the file, `retry_every` how often the daemon tries again.
    pub fn warning(&mut self, path: &Path, retry_every: Duration) -> Option<String> {
        self.notices.retain(|(at, _)| at.elapsed() < NOTICE_FOR);
        let mut parts: Vec<String> = self.notices.iter().map(|(_, t)| t.clone()).collect();
        if let Some(why) = &self.lost {
            parts.push(format!(
                "{} {why}; it is being rewritten from memory",
                path.display()
            ));
        } else if self.pending() {
            let mut owed = Vec::new();
            if !self.dirty.is_empty() {
                owed.push(format!("the state of {} app(s)", self.dirty.len()));
            }
            if !self.runs.is_empty() {
                owed.push(format!("{} run record(s)", self.runs.len()));
            }
            if self.sessions_dirty {
                owed.push("the recorded sessions".into());
            }
            if !self.events.is_empty() {
                owed.push(format!("{} event(s)", self.events.len()));
            }
            let dropped = if self.events_dropped + self.runs_dropped > 0 {
                format!(
                    " ({} older events and {} ended runs were dropped)",
                    self.events_dropped, self.runs_dropped
                )
            } else {
                String::new()
            };
            parts.push(format!(
                "state is not being saved: {} cannot be written ({}); {}{dropped} kept in memory \
                 and written again every {} s; a daemon restart now would lose it. Free disk \
                 space or make the file writable (permissions, chattr -i)",
                path.display(),
                self.last_error.as_deref().unwrap_or("unknown error"),
                owed.join(", "),
                retry_every.as_secs().max(1)
            ));
        }
        if parts.is_empty() {
            None
        } else {
            Some(format!("degraded: {}", parts.join("; ")))
        }
    }
}

/// A copy of what is owed, taken before a retry so that the store can be
/// written without holding the record.
#[derive(Debug, Clone, Default)]
pub struct Owed {
    /// Whether to write every app's runtime row and current run.
    pub everything: bool,
    /// Apps whose runtime rows to write.
    pub apps: Vec<u64>,
    /// Whether to rewrite `app_sessions`.
    pub sessions: bool,
    /// Run rows to write.
    pub runs: BTreeMap<i64, PendingRun>,
    /// Events to insert.
    pub events: Vec<PendingEvent>,
}

impl Store {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes that failed since the store was opened: a request that sees
    /// it grow while it runs, with [`Store::pending`] still true after,
    /// caused a change that is not on disk.
    pub fn write_failures(&self) -> u64 {
        self.health.borrow().failures()
    }

    /// Whether anything is owed to the disk.
    pub fn pending(&self) -> bool {
        self.health.borrow().pending()
    }

    /// The degraded-state warning, `None` when state.db is sound and up to
    /// date.
    pub fn warning(&self) -> Option<String> {
        self.health.borrow_mut().warning(&self.path, RETRY_EVERY)
    }

    /// `r`, noting a failure (and what it leaves owed, through `owe`).
    pub(super) fn noted<T>(
        &self,
        r: rusqlite::Result<T>,
        owe: impl FnOnce(&mut Health),
    ) -> Result<T> {
        if let Err(e) = &r {
            let mut h = self.health.borrow_mut();
            h.failed(e);
            owe(&mut h);
            // A file that went bad under the daemon is not retried into:
            // it is rewritten from memory.
            use rusqlite::ErrorCode as C;
            if matches!(
                e.sqlite_error_code(),
                Some(C::DatabaseCorrupt) | Some(C::NotADatabase)
            ) {
                h.lost(format!("went corrupt while the daemon ran ({e})"));
            }
        }
        Ok(r?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_writes_are_forgotten_only_once_written() {
        let mut h = Health::default();
        assert!(!h.pending());
        assert!(h
            .warning(Path::new("/h/state.db"), Duration::from_secs(2))
            .is_none());
        h.failed(&"disk I/O error");
        h.dirty_app(3);
        h.dirty_app(1);
        h.run_started(7, (3, 100, 5, "system:crash".into()));
        assert_eq!(h.failures(), 1);
        let owed = h.owed();
        assert_eq!(owed.apps, vec![1, 3]);
        // Noted while the retry was writing: kept for the next one.
        h.dirty_app(4);
        h.run_ended(7, (9, Some(1), None));
        h.written(&owed);
        let left = h.owed();
        assert_eq!(left.apps, vec![4]);
        assert_eq!(left.runs[&7].end, Some((9, Some(1), None)));
        assert!(h.pending());
        let w = h
            .warning(Path::new("/h/state.db"), Duration::from_secs(2))
            .unwrap();
        assert!(
            w.contains("/h/state.db") && w.contains("disk I/O error"),
            "{w}"
        );
        h.written(&left);
        assert!(!h.pending());
        assert!(h
            .warning(Path::new("/h/state.db"), Duration::from_secs(2))
            .is_none());
    }

    #[test]
    fn pending_events_are_bounded() {
        let mut h = Health::default();
        for i in 0..MAX_PENDING_EVENTS + 5 {
            h.event(PendingEvent {
                at: i as i64,
                app_id: 1,
                app: "a".into(),
                kind: "exited".into(),
                actor: "system:crash".into(),
                detail: String::new(),
            });
        }
        let owed = h.owed();
        assert_eq!(owed.events.len(), MAX_PENDING_EVENTS);
        assert_eq!(owed.events[0].at, 5);
    }

    #[test]
    fn pending_runs_are_bounded_and_running_ones_kept() {
        let mut h = Health::default();
        h.run_started(0, (1, 10, 0, "system:crash".into()));
        for i in 1..=MAX_PENDING_RUNS as i64 + 3 {
            h.run_started(i, (1, 10, i, "system:crash".into()));
            h.run_ended(i, (i, Some(1), None));
        }
        let owed = h.owed();
        assert_eq!(owed.runs.len(), MAX_PENDING_RUNS);
        assert!(owed.runs.contains_key(&0), "a run still going is kept");
        let w = h
            .warning(Path::new("/h/state.db"), Duration::from_secs(2))
            .unwrap();
        assert!(w.contains("4 ended runs were dropped"), "{w}");
    }

    #[test]
    fn a_lost_file_is_pending_until_rewritten_and_notices_stay() {
        let mut h = Health::default();
        h.lost("was deleted".into());
        h.lost("was replaced".into());
        assert_eq!(h.lost_reason(), Some("was deleted"));
        assert!(h.pending());
        h.rewritten();
        h.notice("state.db was rewritten from memory".into());
        assert!(!h.pending());
        let w = h
            .warning(Path::new("/h/state.db"), Duration::from_secs(2))
            .unwrap();
        assert!(w.contains("rewritten from memory"), "{w}");
    }
}
