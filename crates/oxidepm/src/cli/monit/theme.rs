//! Colours, or none: `NO_COLOR` (set and not empty) leaves only bold and
//! reverse video, which every terminal shows.

use oxidepm_proto::{HealthState, Status};
use ratatui::style::{Color, Modifier, Style};

/// How the screen is styled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    /// Whether colours are used.
    pub color: bool,
}

impl Theme {
    /// Colours unless `NO_COLOR` says otherwise (<https://no-color.org>).
    pub fn from_env() -> Theme {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme { color: !no_color }
    }

    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    /// A table's header row and the panes' titles.
    pub fn header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    /// The selected row: reverse video, so it shows without colour too.
    pub fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// An app's status.
    pub fn status(&self, s: Status) -> Style {
        match s {
            Status::Online => self.fg(Color::Green),
            Status::Errored => self.fg(Color::Red).add_modifier(Modifier::BOLD),
            Status::Starting | Status::Stopping => self.fg(Color::Yellow),
            Status::Stopped => self.fg(Color::DarkGray),
        }
    }

    /// An app's health.
    pub fn health(&self, h: Option<HealthState>) -> Style {
        match h {
            Some(HealthState::Healthy) => self.fg(Color::Green),
            Some(HealthState::Unhealthy) => self.fg(Color::Red),
            _ => Style::new(),
        }
    }

    /// Standard error lines, refusals and read errors.
    pub fn error(&self) -> Style {
        self.fg(Color::Red)
    }

    /// Quiet text: timestamps, hints.
    pub fn dim(&self) -> Style {
        self.fg(Color::DarkGray)
    }
}
