//! The restart queue: every app's automatic restarts to come, by the time
//! each is due, with each app's recent restarts (the start limit) and the
//! daemon-wide rate limit's token bucket. Plain data: the task that serves
//! it is `restarts`.

use super::policy::StartLimit;
use oxidepm_proto::Actor;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The daemon-wide restart rate limit (`daemon.toml`: `restart_rate` and
/// `restart_burst`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSettings {
    /// Restarts a second in the long run.
    pub per_sec: u32,
    /// Restarts allowed at once after a quiet spell.
    pub burst: u32,
}

/// A token bucket: `burst` tokens, refilled at `per_sec` a second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_sec: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket as of `now`.
    pub fn new(s: RateSettings, now: Instant) -> TokenBucket {
        let burst = f64::from(s.burst.max(1));
        TokenBucket {
            per_sec: f64::from(s.per_sec.max(1)),
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes one token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let gained = now.saturating_duration_since(self.at).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + gained).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.per_sec))
        }
    }
}

/// One restart waiting in the queue.
#[derive(Debug, Clone)]
pub struct Due {
    /// When it may be spawned.
    pub at: Instant,
    seq: u64,
    /// The app.
    pub id: u64,
    /// The app's generation when it was queued; any other means that the
    /// app was stopped, started or queued again since.
    pub generation: u64,
    /// Whom the restart is credited to.
    pub actor: Actor,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    // Reversed: the heap's top is the earliest.
    fn cmp(&self, other: &Due) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The restarts to come, and each app's recent restarts (start limit).
#[derive(Debug, Default)]
pub struct RestartQueue {
    due: BinaryHeap<Due>,
    seq: u64,
    limits: HashMap<u64, StartLimit>,
    wake: Arc<Notify>,
}

impl RestartQueue {
    /// Queues a restart of app `id` at `at`, and wakes the restart task.
    pub fn push(&mut self, at: Instant, id: u64, generation: u64, actor: Actor) {
        self.seq += 1;
        self.due.push(Due {
            at,
            seq: self.seq,
            id,
            generation,
            actor,
        });
        self.wake.notify_one();
    }

    /// When the earliest restart is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.due.peek().map(|d| d.at)
    }

    /// The earliest restart, if it is due at `now`.
    pub fn peek_due(&self, now: Instant) -> Option<&Due> {
        self.due.peek().filter(|d| d.at <= now)
    }

    /// Takes the earliest restart out of the queue.
    pub fn pop(&mut self) -> Option<Due> {
        self.due.pop()
    }

    /// The start limit of app `id`.
    pub fn limit(&mut self, id: u64) -> &mut StartLimit {
        self.limits.entry(id).or_default()
    }

    /// Forgets app `id`'s recent restarts (a person started it, or it is
    /// gone).
    pub fn forget(&mut self, id: u64) {
        self.limits.remove(&id);
    }

    /// What wakes the restart task.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            RateSettings {
                per_sec: 100,
                burst: 5,
            },
            t0,
        );
        for _ in 0..5 {
            assert!(b.take(t0).is_ok());
        }
        let w = b.take(t0).unwrap_err();
        assert!(
            w > Duration::ZERO && w <= Duration::from_millis(10),
            "{w:?}"
        );
        // 10 ms later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(10);
        assert!(b.take(t1).is_ok());
        assert!(b.take(t1).is_err());
        // After a long quiet spell the bucket holds `burst`, no more.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..5 {
            assert!(b.take(t2).is_ok());
        }
        assert!(b.take(t2).is_err());
    }

    #[test]
    fn bucket_bounds_restarts_over_time() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(
            RateSettings {
                per_sec: 100,
                burst: 20,
            },
            t0,
        );
        // Asking every millisecond for 2 s: burst + 2 s × rate, about.
        let granted = (0..2000)
            .filter(|ms| b.take(t0 + Duration::from_millis(*ms)).is_ok())
            .count();
        assert!((215..=221).contains(&granted), "{granted}");
    }

    #[test]
    fn queue_gives_the_earliest_first() {
        let t0 = Instant::now();
        let mut q = RestartQueue::default();
        let a = Actor::system("crash");
        q.push(t0 + Duration::from_millis(30), 1, 1, a.clone());
        q.push(t0 + Duration::from_millis(10), 2, 1, a.clone());
        q.push(t0 + Duration::from_millis(10), 3, 1, a);
        assert_eq!(q.next_at(), Some(t0 + Duration::from_millis(10)));
        assert!(q.peek_due(t0).is_none());
        let now = t0 + Duration::from_millis(20);
        let order: Vec<u64> = std::iter::from_fn(|| {
            q.peek_due(now)?;
            q.pop().map(|d| d.id)
        })
        .collect();
        assert_eq!(order, vec![2, 3]);
        assert_eq!(q.pop().map(|d| d.id), Some(1));
    }
}
