//! Waiting for something to hold, polled often and given up on loudly.

use std::time::{Duration, Instant};

/// The longest pause between two checks: short, so that a wait ends soon
/// after what it waits for, and long enough not to starve what it waits
/// for on a 2-core machine.
const MAX_PAUSE: Duration = Duration::from_millis(10);

/// What a check of [`eventually`] gives: `true` or `Some(value)` when done.
pub trait Ready {
    /// What the wait returns.
    type Output;
    /// `Some` once done.
    fn ready(self) -> Option<Self::Output>;
}

impl Ready for bool {
    type Output = ();
    fn ready(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Ready for Option<T> {
    type Output = T;
    fn ready(self) -> Option<T> {
        self
    }
}

/// Runs `check` until it gives `true` or `Some`, and returns what it gave;
/// panics naming `what` after `timeout`. The timeout only bounds a hung
/// test: it is never what a test asserts.
#[track_caller]
pub fn eventually<R: Ready>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> R,
) -> R::Output {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(v) = check().ready() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_check_found() {
        let mut n = 0;
        let got = eventually(Duration::from_secs(5), "the third try", || {
            n += 1;
            (n == 3).then_some(n * 10)
        });
        assert_eq!(got, 30);
        eventually(Duration::from_secs(5), "true", || true);
    }

    #[test]
    #[should_panic(expected = "waiting for what never comes")]
    fn gives_up_naming_what_it_waited_for() {
        eventually(Duration::from_millis(30), "what never comes", || false);
    }
}
