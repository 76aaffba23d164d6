//! `logs --grep`: the matches of a pattern in the selected apps' logs,
//! every kept file read oldest line first, the newest matches kept within
//! a bound and merged by time across files.
//!
//! A search reads the whole window of each log (a few blocks when
//! `since` is given: the window is found by bisection), so the bytes it
//! reads are charged to the actor's read budget like the lines a `logs`
//! returns: an agent searching a 1 GiB log again and again slows itself
//! down, not the others. What it holds is the bound, not the log.

use super::log_window::{LogPlan, Window};
use crate::daemon::errors::OpError;
use crate::supervise::logfile::{self, Found, Pattern, Search, MAX_CONTEXT};
use oxidepm_proto::LogStream;
use std::collections::VecDeque;

/// Bytes of matches a search on a socket holds before it answers. A search
/// holds at most about twice this (the matches so far, and one file's),
/// and agent.sock takes 32 connections at once: the bound on what agents'
/// searches cost the daemon together is 64 MiB, and a person pages back
/// with `--until` for more.
pub(super) const HOLD: usize = 1024 * 1024;
/// Log bytes read between two charges to the read budget.
const READ_STEP: usize = 256 * 1024;

/// What a search looks for.
pub(in crate::daemon) struct Grep {
    /// The compiled pattern.
    pub pattern: Pattern,
    /// Lines before and after each match.
    pub context: u32,
}

impl Grep {
    /// The search a `logs` request asks for, if any; refused when the
    /// pattern cannot be searched with.
    pub fn parse(grep: Option<&str>, regex: bool, context: u32) -> Result<Option<Grep>, OpError> {
        let Some(text) = grep else {
            return Ok(None);
        };
        if context > MAX_CONTEXT {
            return Err(OpError::BadPattern(format!(
                "context {context} is more than the {MAX_CONTEXT} lines taken on each side of a match"
            )));
        }
        let pattern = Pattern::new(text, regex).map_err(OpError::BadPattern)?;
        Ok(Some(Grep { pattern, context }))
    }
}

/// One line of a search's answer: which file of the plan, and the line.
pub(super) struct Hit {
    /// Index into the plan.
    pub file: usize,
    /// The line and whether it matched.
    pub found: Found,
    /// Its time stamp, or the stamp of the line before it in its file.
    stamp: Vec<u8>,
}

/// Searches every file of `plan` within `window` for the newest `lines`
/// matches (with context) in about `max_bytes`, merged by time; `charge`
/// is told the bytes read as they are read. The bool says whether older
/// matches were left out.
pub(super) fn search(
    plan: &LogPlan,
    grep: &Grep,
    lines: usize,
    max_bytes: usize,
    window: &Window,
    mut charge: impl FnMut(usize),
) -> (Vec<Hit>, bool) {
    let mut all: VecDeque<Hit> = VecDeque::new();
    let mut truncated = false;
    for (i, (_, _, path, keep)) in plan.iter().enumerate() {
        let (found, cut) = search_file(path, *keep, grep, lines, max_bytes, window, &mut charge);
        truncated |= cut;
        if found.is_empty() {
            continue;
        }
        let mut stamp = Vec::new();
        let hits = found.into_iter().map(|found| {
            if let Some((s, _)) = crate::timefmt::split_stamp(&found.line) {
                stamp = s.to_vec();
            }
            Hit {
                file: i,
                stamp: stamp.clone(),
                found,
            }
        });
        all.extend(hits);
        if plan.len() > 1 {
            // Stable: a file's own lines keep their order.
            all.make_contiguous().sort_by(|a, b| a.stamp.cmp(&b.stamp));
        }
        truncated |= keep_newest(&mut all, lines, max_bytes, grep.context as usize);
    }
    (all.into(), truncated)
}

/// One log's matches, oldest first, and whether older ones were dropped.
fn search_file(
    path: &std::path::Path,
    keep: u32,
    grep: &Grep,
    lines: usize,
    max_bytes: usize,
    window: &Window,
    charge: &mut impl FnMut(usize),
) -> (Vec<Found>, bool) {
    let since = window.since.as_deref().map(str::as_bytes);
    let until = window.until.as_deref().map(str::as_bytes);
    let mut reader = match logfile::TailReader::open_window(path, keep, usize::MAX, since, until) {
        Ok(r) => r,
        Err(e) => {
            log::debug!("logs --grep: {}: {e}", path.display());
            return (Vec::new(), false);
        }
    };
    let mut s = Search::new(&grep.pattern, grep.context, lines, max_bytes);
    loop {
        let mut read = 0;
        let more = reader.read(READ_STEP, |line| {
            read += line.len() + 1;
            s.push(line);
        });
        charge(read);
        match more {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                log::debug!("logs --grep: {}: {e}", path.display());
                break;
            }
        }
    }
    s.finish()
}

/// Drops the oldest hits while more than `lines` matched or more than
/// `max_bytes` are held, then the context lines left before the first
/// match beyond `context`; true when something was dropped.
fn keep_newest(all: &mut VecDeque<Hit>, lines: usize, max_bytes: usize, context: usize) -> bool {
    let mut matches = all.iter().filter(|h| h.found.matched).count();
    let mut bytes: usize = all.iter().map(|h| h.found.line.len()).sum();
    let mut dropped = false;
    while (matches > lines.max(1) || bytes > max_bytes) && all.len() > 1 {
        let Some(h) = all.pop_front() else { break };
        matches -= usize::from(h.found.matched);
        bytes -= h.found.line.len();
        dropped = true;
    }
    let lead = all.iter().take_while(|h| !h.found.matched).count();
    if matches > 0 && lead > context {
        all.drain(..lead - context);
    }
    dropped
}

/// The app and stream of a hit.
pub(super) fn source(plan: &LogPlan, hit: &Hit) -> (String, LogStream) {
    let (app, st, _, _) = &plan[hit.file];
    (app.clone(), *st)
}
