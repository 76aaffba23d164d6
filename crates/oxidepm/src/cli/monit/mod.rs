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
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
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
    let (keys, keys_failed) = read_keys();
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
        if screen.terminal_gone() {
            return Ok(ExitCode::from(
                128u8 + nix::sys::signal::Signal::SIGHUP as u8,
            ));
        }
        let step = match keys.recv_timeout(TICK) {
            Ok(Event::Key(k)) => model.key(k),
            Ok(_) | Err(RecvTimeoutError::Timeout) => Step::Stay,
            Err(RecvTimeoutError::Disconnected) => return Err(reader_error(&keys_failed)),
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

/// Reads the terminal's events on a thread of its own. The terminal
/// library's reader loops for ever on a terminal whose other end closed
/// (each read gives nothing, without blocking): on this thread that spin
/// cannot keep the loop from seeing the lost terminal or a signal within a
/// tick, and it ends with the process.
fn read_keys() -> (Receiver<Event>, Arc<Mutex<Option<std::io::Error>>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = Arc::new(Mutex::new(None));
    let note = Arc::clone(&failed);
    let spawned = std::thread::Builder::new()
        .name("monit-keys".into())
        .spawn(move || loop {
            match event::read() {
                Ok(ev) => {
                    if tx.send(ev).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    *note.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }
    (rx, failed)
}

/// Why the key reader stopped.
fn reader_error(failed: &Mutex<Option<std::io::Error>>) -> TermError {
    let e = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    e.unwrap_or_else(|| std::io::Error::other("the terminal's reader stopped"))
        .into()
}
