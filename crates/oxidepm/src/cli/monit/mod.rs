//! `oxidepm monit`: a live terminal dashboard of the apps, the selected
//! app's log, recent events and the lanes.
//!
//! It is a client like any other: it polls read requests while someone
//! watches, and the daemon does nothing for it otherwise. Restart and stop
//! go through the same requests as the CLI's, under the caller's tier; a
//! refusal is shown on the status line.

mod model;
mod source;
mod term;
mod theme;
mod view;

#[cfg(test)]
mod tests;

pub use term::TermError;

use model::{Model, Step};
use ratatui::crossterm::event::{self, Event};
use source::{Ask, Polling, Update};
use std::process::ExitCode;
use std::time::Duration;

/// How often the daemon is asked again.
const INTERVAL: Duration = Duration::from_secs(1);
/// How long the loop waits for a key before it looks at updates and
/// signals again.
const TICK: Duration = Duration::from_millis(100);

/// `oxidepm monit`: runs the dashboard and says why it could not.
pub fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            errln!("oxidepm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the dashboard until `q`, Ctrl-C or a signal; the exit code is
/// 128 + the signal when a signal ended it.
pub fn run() -> Result<ExitCode, TermError> {
    let theme = theme::Theme::from_env();
    let mut model = Model::default();
    let mut screen = term::Screen::take()?;
    let feed = source::spawn(Polling::default(), INTERVAL, model.want());
    loop {
        if let Some(sig) = screen.signalled() {
            return Ok(ExitCode::from(128u8.saturating_add(sig as u8)));
        }
        while let Ok(u) = feed.updates.try_recv() {
            match u {
                Update::Snapshot(s) => {
                    let before = model.want();
                    model.apply(*s);
                    // The first read selects an app: ask for its log.
                    if model.want() != before {
                        let _ = feed.ask.send(Ask::Want(model.want()));
                    }
                }
                Update::Done(r) => model.status = Some(r),
            }
        }
        screen.terminal.draw(|f| view::draw(f, &model, &theme))?;
        match event::poll(TICK) {
            Ok(true) => {}
            Ok(false) => continue,
            // A signal woke the wait: the loop's top looks at it.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
        let step = match event::read()? {
            Event::Key(k) => model.key(k),
            _ => Step::Stay,
        };
        match step {
            Step::Stay => {}
            Step::Quit => return Ok(ExitCode::SUCCESS),
            Step::Want(w) => {
                let _ = feed.ask.send(Ask::Want(w));
            }
            Step::Act(a) => {
                let _ = feed.ask.send(Ask::Act(a));
            }
        }
    }
}
