//! Automatic restarts: one timer queue for every app, served by one task
//! that spawns a bounded number per wakeup under a daemon-wide rate limit.
//!
//! Exit handling never forks: it puts the restart in this queue (with the
//! time it is due) and goes on. So a crash storm costs the reaper a few
//! writes per exit, requests get the lock between batches, and the number
//! of forks a second is bounded whatever the apps do.

use super::supervisor::{lock, Shared};
use std::time::Instant;

pub use super::restart_queue::RateSettings;
use super::restart_queue::TokenBucket;

/// Restarts spawned per lock hold before the task yields: a spawn is two
/// forks, and a request waits for the lock at most this many.
const PER_WAKEUP: usize = 2;

/// Spawns the queued restarts as they fall due, forever: at most
/// `PER_WAKEUP` per lock hold, then it yields to requests and to the
/// reaper; never faster than `rate` allows (a new rate, from a reloaded
/// daemon.toml, starts a full bucket of its own).
pub async fn run(shared: Shared, mut rate: tokio::sync::watch::Receiver<RateSettings>) {
    let wake = lock(&shared).restarts.waker();
    let mut bucket = TokenBucket::new(*rate.borrow_and_update(), Instant::now());
    loop {
        if rate.has_changed().unwrap_or(false) {
            bucket = TokenBucket::new(*rate.borrow_and_update(), Instant::now());
        }
        let next = lock(&shared).restarts.next_at();
        let now = Instant::now();
        match next {
            None => {
                wake.notified().await;
                continue;
            }
            Some(at) if at > now => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = wake.notified() => {}
                }
                continue;
            }
            Some(_) => {}
        }
        let mut wait = None;
        {
            let mut s = lock(&shared);
            let mut spawned = 0;
            while spawned < PER_WAKEUP {
                let now = Instant::now();
                let Some(d) = s.restarts.peek_due(now) else {
                    break;
                };
                if !s.restart_current(d) {
                    s.restarts.pop();
                    continue;
                }
                if let Err(w) = bucket.take(now) {
                    wait = Some(w);
                    break;
                }
                let d = s.restarts.pop().expect("peeked");
                s.restart_now(d);
                spawned += 1;
            }
        }
        match wait {
            Some(w) => tokio::time::sleep(w).await,
            None => tokio::task::yield_now().await,
        }
    }
}
