//! Refused requests counted rather than written once there are many.
//!
//! A refusal changes nothing, so a client repeating one in a loop (over one
//! connection or reconnecting) would otherwise grow the audit table and
//! daemon.log as fast as it can ask. The first refusals of a kind (actor,
//! socket, operation, code) in a window are written; the rest are counted,
//! and one summary row says how many when the window closes. A cap over
//! all kinds bounds what many actors (claims are free text) can write
//! together, and the number of kinds followed one by one is bounded too:
//! beyond it, refusals are counted per (socket, operation, code) under the
//! daemon's own actor.

use oxidepm_proto::Actor;
use std::collections::HashMap;

/// What makes two refusals "of the same kind".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kind {
    /// Who asked.
    pub actor: Actor,
    /// Which socket.
    pub socket: String,
    /// The operation.
    pub op: String,
    /// The error code.
    pub code: String,
}

/// How many refusals are written.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Length of a window, ms.
    pub window_ms: i64,
    /// Refusals of one kind written per window.
    pub per_kind: u32,
    /// Refusals of all kinds written per window.
    pub total: u32,
    /// Kinds followed one by one.
    pub max_kinds: usize,
}

/// Whether a refusal is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it (audit row and log line).
    Write,
    /// Only count it; a summary follows when its window closes.
    Count,
}

/// Refusals of one kind that were counted and not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Their kind.
    pub kind: Kind,
    /// How many.
    pub more: u64,
    /// The first, Unix ms.
    pub first_ms: i64,
    /// The last, Unix ms.
    pub last_ms: i64,
    /// Counted under the daemon's actor because too many kinds were
    /// refused at once.
    pub others: bool,
}

#[derive(Debug)]
struct Window {
    start_ms: i64,
    written: u32,
    more: u64,
    first_ms: i64,
    last_ms: i64,
}

/// The open windows.
#[derive(Debug)]
pub struct Refusals {
    limits: Limits,
    kinds: HashMap<Kind, Window>,
    total_written: u32,
    total_since_ms: i64,
    /// Summaries of windows found closed by `admit`, until `close_due`.
    closed: Vec<Summary>,
}

/// The label of the actor that stands for actors beyond `max_kinds`.
const OTHERS: &str = "refusals";

impl Refusals {
    /// Counts with `limits` from now on (a reloaded daemon.toml).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// No window open yet.
    pub fn new(limits: Limits) -> Refusals {
        Refusals {
            limits,
            kinds: HashMap::new(),
            total_written: 0,
            total_since_ms: i64::MIN,
            closed: Vec::new(),
        }
    }

    /// Decides whether a refusal of `kind` at `now_ms` is written.
    pub fn admit(&mut self, kind: Kind, now_ms: i64) -> Verdict {
        let l = self.limits;
        if now_ms.saturating_sub(self.total_since_ms) >= l.window_ms {
            self.total_written = 0;
            self.total_since_ms = now_ms;
        }
        let kind = if self.kinds.len() >= l.max_kinds && !self.kinds.contains_key(&kind) {
            Kind {
                actor: Actor::system(OTHERS),
                ..kind
            }
        } else {
            kind
        };
        if let Some(w) = self.kinds.get(&kind) {
            if now_ms.saturating_sub(w.start_ms) >= l.window_ms {
                let w = self.kinds.remove(&kind).expect("found above");
                self.closed.extend(summary(kind.clone(), w));
            }
        }
        let w = self.kinds.entry(kind).or_insert(Window {
            start_ms: now_ms,
            written: 0,
            more: 0,
            first_ms: now_ms,
            last_ms: now_ms,
        });
        if w.written < l.per_kind && self.total_written < l.total {
            w.written += 1;
            self.total_written += 1;
            Verdict::Write
        } else {
            if w.more == 0 {
                w.first_ms = now_ms;
            }
            w.more += 1;
            w.last_ms = now_ms;
            Verdict::Count
        }
    }

    /// Closes the windows whose time is up at `now_ms`: the summaries of
    /// those that counted anything.
    pub fn close_due(&mut self, now_ms: i64) -> Vec<Summary> {
        let window = self.limits.window_ms;
        self.close(|w| now_ms.saturating_sub(w.start_ms) >= window)
    }

    /// When the next window is due to close (ms, the clock of `admit`):
    /// now for summaries already found closed, none when nothing is open.
    pub fn next_due(&self) -> Option<i64> {
        if !self.closed.is_empty() {
            return Some(i64::MIN);
        }
        let window = self.limits.window_ms;
        self.kinds
            .values()
            .map(|w| w.start_ms.saturating_add(window))
            .min()
    }

    /// Closes every window (the daemon is stopping).
    pub fn close_all(&mut self) -> Vec<Summary> {
        self.close(|_| true)
    }

    fn close(&mut self, due: impl Fn(&Window) -> bool) -> Vec<Summary> {
        let mut out = std::mem::take(&mut self.closed);
        let ended: Vec<Kind> = self
            .kinds
            .iter()
            .filter(|(_, w)| due(w))
            .map(|(k, _)| k.clone())
            .collect();
        for kind in ended {
            if let Some(w) = self.kinds.remove(&kind) {
                out.extend(summary(kind, w));
            }
        }
        out.sort_by_key(|s| s.first_ms);
        out
    }
}

fn summary(kind: Kind, w: Window) -> Option<Summary> {
    (w.more > 0).then(|| Summary {
        others: kind.actor == Actor::system(OTHERS),
        kind,
        more: w.more,
        first_ms: w.first_ms,
        last_ms: w.last_ms,
    })
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
