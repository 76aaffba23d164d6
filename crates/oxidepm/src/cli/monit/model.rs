//! What monit shows and how keys change it; no terminal, no sockets, so
//! it is tested as plain values.

use super::source::{Action, Snapshot, Want};
use oxidepm_proto::{AppInfo, BridgeCounters, Counters, EventRecord, LanesReport, LogLine};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::HashMap;
use std::time::Instant;

/// Log lines shown for the selected app.
pub const LOG_LINES: usize = 20;

/// What a key asks the loop to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing beyond redrawing.
    Stay,
    /// Read something else (the selection or follow changed).
    Want(Want),
    /// Send a change to the daemon.
    Act(Action),
    /// Leave monit.
    Quit,
}

/// Per-second rates of the bridge's counters between two reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Messages routed to inboxes.
    pub routed: f64,
    /// Messages with no route.
    pub unrouted: f64,
    /// Outbox entries delivered.
    pub delivered: f64,
    /// Deliveries retried.
    pub retried: f64,
    /// Entries dead-lettered.
    pub dead: f64,
}

/// The log request answers each stream's tail in turn; a tail reads in
/// time order, so when every line carries its timestamp the two streams
/// are merged by it (a stable sort keeps each stream's own order).
fn interleave(lines: &mut [LogLine]) {
    // `2026-11-30T18:04:11.123Z `: RFC 3339 in UTC sorts as text.
    let stamp = |l: &LogLine| {
        let b = l.line.as_bytes();
        (b.len() >= 24 && b[4] == b'-' && b[10] == b'T' && b[23] == b'Z')
            .then(|| l.line[..24].to_string())
    };
    if lines.iter().all(|l| stamp(l).is_some()) {
        lines.sort_by_cached_key(|l| stamp(l));
    }
}

/// Everything on the screen.
#[derive(Debug, Default)]
pub struct Model {
    /// The apps, in the daemon's order.
    pub apps: Vec<AppInfo>,
    /// Why the apps could not be read, if they could not.
    pub apps_error: Option<String>,
    /// Index of the selected app in `apps`.
    pub selected: usize,
    /// Recent events, oldest first.
    pub events: Vec<EventRecord>,
    /// The last lanes report, or why there is none.
    pub lanes: Option<Result<LanesReport, String>>,
    /// The bridge's rates since the read before.
    pub rates: Option<Rates>,
    last_counters: Option<(BridgeCounters, Instant)>,
    /// The log tail of `log_app`.
    pub logs: Vec<LogLine>,
    /// The app the log tail belongs to.
    pub log_app: Option<String>,
    /// Why the log tail could not be read.
    pub logs_error: Option<String>,
    /// Whether the log tail is read again each tick (`f`).
    pub paused: bool,
    /// The last thing said to the person: an action's result or refusal.
    pub status: Option<Result<String, String>>,
}

impl Model {
    /// The selected app's name.
    pub fn selected_app(&self) -> Option<&str> {
        self.apps.get(self.selected).map(|a| a.name.as_str())
    }

    /// What to read for the current selection.
    pub fn want(&self) -> Want {
        Want {
            logs: match (self.paused, self.selected_app()) {
                (false, Some(a)) => Some((a.to_string(), LOG_LINES)),
                _ => None,
            },
        }
    }

    /// The actor of each app's most recent event, by app id.
    pub fn last_actors(&self) -> HashMap<u64, String> {
        self.events
            .iter()
            .map(|e| (e.app_id, e.actor.to_string()))
            .collect()
    }

    /// Takes a tick's reads in; the selection stays on the same app when
    /// apps come and go.
    pub fn apply(&mut self, s: Snapshot) {
        let before = self.selected_app().map(str::to_string);
        match s.apps {
            Ok(apps) => {
                self.apps = apps;
                self.apps_error = None;
            }
            Err(e) => self.apps_error = Some(e),
        }
        self.selected = before
            .and_then(|n| self.apps.iter().position(|a| a.name == n))
            .unwrap_or(self.selected)
            .min(self.apps.len().saturating_sub(1));
        self.events = s.events;
        if let Some(lanes) = s.lanes {
            if let Ok(report) = &lanes {
                self.take_counters(report, s.at);
            }
            self.lanes = Some(lanes);
        }
        if let Some((app, logs)) = s.logs {
            self.log_app = Some(app);
            match logs {
                Ok(mut lines) => {
                    interleave(&mut lines);
                    self.logs = lines;
                    self.logs_error = None;
                }
                Err(e) => self.logs_error = Some(e),
            }
        }
    }

    fn take_counters(&mut self, report: &LanesReport, at: Instant) {
        let Some(Counters::Read(now)) = report.bridge.counters else {
            return;
        };
        if let Some((then, was)) = self.last_counters {
            let secs = at.duration_since(was).as_secs_f64();
            if secs > 0.0 {
                let rate = |a: i64, b: i64| (a - b).max(0) as f64 / secs;
                self.rates = Some(Rates {
                    routed: rate(now.routed, then.routed),
                    unrouted: rate(now.unrouted, then.unrouted),
                    delivered: rate(now.delivered, then.delivered),
                    retried: rate(now.retried, then.retried),
                    dead: rate(now.dead, then.dead),
                });
            }
        }
        self.last_counters = Some((now, at));
    }

    /// Handles one key.
    pub fn key(&mut self, k: KeyEvent) -> Step {
        if k.kind == KeyEventKind::Release {
            return Step::Stay;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        match k.code {
            KeyCode::Char('c') if ctrl => Step::Quit,
            KeyCode::Char('q') | KeyCode::Esc => Step::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.select(self.selected.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => self.select(self.selected + 1),
            KeyCode::Char('f') => {
                self.paused = !self.paused;
                Step::Want(self.want())
            }
            KeyCode::Char('r') => self.act(Action::Restart),
            KeyCode::Char('s') => self.act(Action::Stop),
            _ => Step::Stay,
        }
    }

    fn select(&mut self, i: usize) -> Step {
        let i = i.min(self.apps.len().saturating_sub(1));
        if i == self.selected {
            return Step::Stay;
        }
        self.selected = i;
        self.logs.clear();
        self.logs_error = None;
        Step::Want(self.want())
    }

    fn act(&mut self, make: fn(String) -> Action) -> Step {
        match self.selected_app() {
            Some(a) => {
                let action = make(a.to_string());
                self.status = Some(Ok(match &action {
                    Action::Restart(a) => format!("restarting {a}…"),
                    Action::Stop(a) => format!("stopping {a}…"),
                }));
                Step::Act(action)
            }
            None => {
                self.status = Some(Err("no app selected".into()));
                Step::Stay
            }
        }
    }
}
