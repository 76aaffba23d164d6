//! The terminal, taken and given back: raw mode and the alternate screen
//! are undone on every way out — a return, a panic, SIGTERM, SIGHUP or
//! SIGINT — so the person's shell is never left unusable.

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

/// The signals that end monit; the handlers only note them, and the loop
/// leaves through [`Screen`]'s drop.
const SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGINT,
];

/// Why the terminal could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum TermError {
    /// Standard input or output is not a terminal.
    #[error("monit draws on a terminal, and standard input or output is not one; run it in a terminal (or `ssh -t`), or use `oxidepm status` in scripts")]
    NotATerminal,
    /// The terminal refused raw mode or the alternate screen.
    #[error("the terminal could not be set up: {0}")]
    Setup(#[from] std::io::Error),
}

/// Puts the terminal back as it was; safe to call more than once.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
}

/// The terminal while monit draws on it.
pub struct Screen {
    /// The ratatui terminal.
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
    /// The signal that asked monit to end, 0 until one did.
    pub signal: Arc<AtomicUsize>,
}

impl Screen {
    /// Takes the terminal: raw mode, the alternate screen, the panic hook
    /// and the signal handlers.
    pub fn take() -> Result<Screen, TermError> {
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            return Err(TermError::NotATerminal);
        }
        let signal = Arc::new(AtomicUsize::new(0));
        for s in SIGNALS {
            // A signal's number, noted for the loop to see within a tick.
            signal_hook::flag::register_usize(s, Arc::clone(&signal), s as usize)?;
        }
        install_panic_hook();
        terminal::enable_raw_mode()?;
        let screen = Screen {
            terminal: Terminal::new(CrosstermBackend::new(std::io::stdout()))?,
            signal,
        };
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }

    /// Whether the terminal is gone (its other end closed: a tmux pane
    /// killed, an ssh session dropped). Its input then reads nothing for
    /// ever, and waiting on it would spin: monit ends instead.
    pub fn terminal_gone(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let stdin = std::io::stdin();
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0].revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
            }),
            Err(_) => false,
        }
    }

    /// The signal that asked monit to end, if one did.
    pub fn signalled(&self) -> Option<i32> {
        match self.signal.load(Ordering::Relaxed) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// A panic restores the terminal before its message is printed, so the
/// message is readable and the shell usable.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
