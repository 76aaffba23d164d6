//! Drawing the model: apps, the selected app's log tail, events, lanes,
//! and the status line, laid out to fit 80×24.

use super::model::Model;
use super::theme::Theme;
use crate::cli::output::{bytes, or_dash};
use crate::cli::terminal::escape_controls;
use crate::timefmt::short_duration;
use oxidepm_proto::{AgentLaneReport, HealthState, LogStream, Status};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use std::borrow::Cow;

/// App rows shown at most before the table scrolls.
const MAX_APP_ROWS: u16 = 8;
/// Event lines shown.
const EVENT_ROWS: u16 = 4;
/// Agent rows shown at most.
const MAX_AGENT_ROWS: u16 = 4;

/// The keys, on the last line.
const HELP: &str = "↑↓ select  r restart  s stop  f follow logs  q quit";

/// App-controlled text made harmless for the terminal.
fn safe(s: &str) -> Cow<'_, str> {
    escape_controls(s.as_bytes())
}

/// Lines a pane wants, and the fewest it can do with.
struct Fit {
    rows: u16,
    min: u16,
}

/// The heights of the apps, events and lanes panes (borders and headers
/// included) in `height` lines: each gets its rows while the log keeps
/// `LOG_ROOM` lines, then they shrink in turn down to their minimum, so
/// that 80×24 still shows every pane.
fn heights(height: u16, apps: Fit, events: Fit, lanes: Fit) -> [u16; 3] {
    // Title, status and help lines, and the log pane's borders.
    let fixed = 3 + 2;
    let mut h = [apps.rows, events.rows, lanes.rows];
    let mins = [apps.min, events.min, lanes.min];
    let chrome = [3, 2, 3];
    let total = |h: &[u16; 3]| {
        h.iter()
            .zip(chrome)
            .map(|(&r, c)| if r == 0 { 0 } else { r + c })
            .sum::<u16>()
    };
    // Shrink the lanes first, then the events, then the apps, one line at a time.
    for i in [2, 1, 0] {
        while h[i] > mins[i] && fixed + total(&h) + LOG_ROOM > height {
            h[i] -= 1;
        }
    }
    let mut out = [0; 3];
    for i in 0..3 {
        out[i] = if h[i] == 0 { 0 } else { h[i] + chrome[i] };
    }
    out
}

/// Log lines kept when the other panes shrink.
const LOG_ROOM: u16 = 5;

/// Draws the whole screen.
pub fn draw(f: &mut Frame, m: &Model, t: &Theme) {
    let agents = match &m.lanes {
        Some(Ok(r)) => r.agents.len() as u16,
        _ => 0,
    };
    let [apps_h, events_h, lanes_h] = heights(
        f.area().height,
        Fit {
            rows: (m.apps.len() as u16).clamp(1, MAX_APP_ROWS),
            min: 1,
        },
        Fit {
            rows: EVENT_ROWS,
            min: 2,
        },
        Fit {
            rows: agents.min(MAX_AGENT_ROWS),
            min: agents.min(1),
        },
    );
    let [title, apps, logs, events, lanes, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(apps_h),
        Constraint::Min(3),
        Constraint::Length(events_h),
        Constraint::Length(lanes_h),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    draw_title(f, title, m, t);
    draw_apps(f, apps, m, t);
    draw_logs(f, logs, m, t);
    draw_events(f, events, m, t);
    if let Some(Ok(r)) = &m.lanes {
        if lanes_h > 0 {
            draw_lanes(f, lanes, &r.agents, m, t);
        }
    }
    draw_status(f, status, m, t);
    f.render_widget(Paragraph::new(HELP).style(t.dim()), help);
}

fn draw_title(f: &mut Frame, area: Rect, m: &Model, t: &Theme) {
    let count = |s: Status| m.apps.iter().filter(|a| a.status == s).count();
    let mut spans = vec![
        Span::styled("oxidepm monit", t.header()),
        Span::raw(format!(
            "  {} apps  {} online",
            m.apps.len(),
            count(Status::Online)
        )),
    ];
    let errored = count(Status::Errored);
    if errored > 0 {
        spans.push(Span::styled(format!("  {errored} errored"), t.error()));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn health(h: Option<HealthState>) -> &'static str {
    match h {
        None => "-",
        Some(HealthState::Unknown) => "?",
        Some(HealthState::Healthy) => "ok",
        Some(HealthState::Unhealthy) => "failing",
    }
}

fn draw_apps(f: &mut Frame, area: Rect, m: &Model, t: &Theme) {
    let block = Block::default().borders(Borders::ALL).title("apps");
    if let Some(e) = &m.apps_error {
        let text = Paragraph::new(safe(e).into_owned()).style(t.error());
        return f.render_widget(text.block(block), area);
    }
    if m.apps.is_empty() {
        let text = Paragraph::new("no apps; start one with `oxidepm start -- <command>`");
        return f.render_widget(text.block(block), area);
    }
    let actors = m.last_actors();
    let rows = m.apps.iter().map(|a| {
        Row::new(vec![
            Span::raw(a.name.clone()),
            Span::styled(a.status.as_str(), t.status(a.status)),
            Span::raw(or_dash(a.pid)),
            Span::raw(or_dash(
                a.cpu_percent.map(|c| format!("{:.0}%", f64::from(c))),
            )),
            Span::raw(or_dash(a.memory_bytes.map(bytes))),
            Span::raw(a.restarts.to_string()),
            Span::raw(or_dash(a.uptime_ms.map(short_duration))),
            Span::styled(health(a.health), t.health(a.health)),
            Span::raw(actors.get(&a.id).cloned().unwrap_or_else(|| "-".into())),
        ])
    });
    let widths = [
        Constraint::Min(8),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(3),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(13),
    ];
    let header = Row::new(vec![
        "name",
        "status",
        "pid",
        "cpu",
        "mem",
        "↺",
        "uptime",
        "health",
        "last actor",
    ])
    .style(t.header());
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(t.selected())
        .highlight_symbol("› ")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(Some(m.selected));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_logs(f: &mut Frame, area: Rect, m: &Model, t: &Theme) {
    let mode = if m.paused { "paused" } else { "following" };
    let title = match m.selected_app() {
        Some(a) => format!("logs: {a} ({mode})"),
        None => "logs".into(),
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let room = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = if let Some(e) = &m.logs_error {
        vec![Line::styled(safe(e).into_owned(), t.error())]
    } else if m.log_app.as_deref() != m.selected_app() {
        Vec::new()
    } else {
        let skip = m.logs.len().saturating_sub(room);
        m.logs[skip..]
            .iter()
            .map(|l| {
                let style = match l.stream {
                    LogStream::Err => t.error(),
                    _ => ratatui::style::Style::new(),
                };
                Line::styled(safe(&l.line).into_owned(), style)
            })
            .collect()
    };
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_events(f: &mut Frame, area: Rect, m: &Model, t: &Theme) {
    let block = Block::default().borders(Borders::ALL).title("events");
    let room = area.height.saturating_sub(2) as usize;
    let skip = m.events.len().saturating_sub(room);
    let lines: Vec<Line> = m.events[skip..]
        .iter()
        .map(|e| {
            // `2026-11-30T18:04:11.123Z`: the time of day is enough here.
            let at = e.at.get(11..19).unwrap_or(&e.at);
            Line::from(vec![
                Span::styled(format!("{at} "), t.dim()),
                Span::raw(format!("{} {} ", e.app, e.kind)),
                Span::styled(format!("by {} ", e.actor), t.dim()),
                Span::raw(safe(&e.detail).into_owned()),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// Sums of an agent's streams: inbox length, inbox pending, outbox, dead.
fn lane_sums(a: &AgentLaneReport) -> [i64; 4] {
    let mut s = [0; 4];
    for st in &a.streams {
        if st.key.ends_with(":inbox") {
            s[0] += st.length;
            s[1] += st.pending;
        } else if st.key.ends_with(":outbox") {
            s[2] += st.length;
        } else if st.key.ends_with(":outbox:dead") {
            s[3] += st.length;
        }
    }
    s
}

fn draw_lanes(f: &mut Frame, area: Rect, agents: &[AgentLaneReport], m: &Model, t: &Theme) {
    let title = match m.rates {
        Some(r) => format!(
            "lanes: routed {:.1}/s delivered {:.1}/s unrouted {:.1}/s retried {:.1}/s dead {:.1}/s",
            r.routed, r.delivered, r.unrouted, r.retried, r.dead
        ),
        None => "lanes".into(),
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let rows = agents.iter().map(|a| {
        let [inbox, pending, outbox, dead] = lane_sums(a);
        Row::new(vec![
            a.agent.clone(),
            inbox.to_string(),
            pending.to_string(),
            outbox.to_string(),
            dead.to_string(),
        ])
    });
    let header = Row::new(vec!["agent", "inbox", "pending", "outbox", "dead"]).style(t.header());
    let widths = [
        Constraint::Min(12),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
    ];
    f.render_widget(Table::new(rows, widths).header(header).block(block), area);
}

fn draw_status(f: &mut Frame, area: Rect, m: &Model, t: &Theme) {
    let line = match &m.status {
        Some(Ok(s)) => Line::raw(safe(s).into_owned()),
        Some(Err(e)) => Line::styled(format!("✗ {}", safe(e)), t.error()),
        None => Line::raw(""),
    };
    f.render_widget(Paragraph::new(line), area);
}
