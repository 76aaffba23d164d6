//! A token bucket: an agent's commands per second (Redis has no per-user
//! quota). Shared by all of one agent's connections.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `rate` tokens per second, holding at most one second's worth (and
    /// at least one token).
    pub fn new(rate: f64, now: Instant) -> Self {
        let burst = rate.max(1.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.take_or_wait(now).is_none()
    }

    /// Takes one token if there is one, else says how long until there is.
    pub fn take_or_wait(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, t0);
        assert_eq!((0..20).filter(|_| b.try_take(t0)).count(), 10);
        assert!(!b.try_take(t0));
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!((0..20).filter(|_| b.try_take(t1)).count(), 5);
        // Never more than the burst, however long it was idle.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!((0..20).filter(|_| b.try_take(t2)).count(), 10);
    }

    #[test]
    fn slow_rates_still_allow_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0.5, t0);
        assert!(b.try_take(t0));
        assert!(!b.try_take(t0 + Duration::from_secs(1)));
        assert!(b.try_take(t0 + Duration::from_secs(2)));
        let wait = b.take_or_wait(t0 + Duration::from_millis(2500)).unwrap();
        assert_eq!(wait, Duration::from_millis(1500));
    }
}
