//! How many log bytes each actor may read: a token bucket per actor, so
//! that one agent reading big logs again and again cannot take the disk
//! and the daemon's time from everyone else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// More actors than this and the buckets that are full again are dropped.
const PRUNE_AT: usize = 1024;

/// One actor's bucket; `tokens` goes below zero while a read is in debt.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Per-actor byte budgets for log reads.
pub struct ReadRate {
    /// Bytes a second (an f64's bits, so daemon.toml can change it while
    /// reads go on); 0: no limit. An idle actor may read a second's worth
    /// at once.
    rate: AtomicU64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl ReadRate {
    /// `mib_per_sec` MiB a second per actor, with a second's worth at
    /// once; 0 means no limit.
    pub fn new(mib_per_sec: u64) -> ReadRate {
        ReadRate {
            rate: AtomicU64::new(bytes_per_sec(mib_per_sec).to_bits()),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Sets a new rate (a reloaded daemon.toml); buckets keep what they
    /// hold, capped at the new burst on their next use.
    pub fn set_mib_per_sec(&self, mib_per_sec: u64) {
        self.rate
            .store(bytes_per_sec(mib_per_sec).to_bits(), Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    fn with<T>(&self, actor: &str, f: impl FnOnce(&mut Bucket) -> T) -> T {
        let mut map = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if map.len() >= PRUNE_AT {
            let (rate, burst) = (self.rate(), self.rate());
            map.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let rate = self.rate();
        let b = map.entry(actor.to_string()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(rate);
        b.at = now;
        f(b)
    }

    /// `Err(wait)` when `actor` is in debt: it may read again after `wait`.
    pub fn check(&self, actor: &str) -> Result<(), Duration> {
        if self.rate() == 0.0 {
            return Ok(());
        }
        self.with(actor, |b| {
            if b.tokens >= 0.0 {
                Ok(())
            } else {
                Err(Duration::from_secs_f64(-b.tokens / self.rate()))
            }
        })
    }

    /// Charges `bytes` read by `actor`; returns how long it should wait
    /// before reading more (zero while within its budget).
    pub fn charge(&self, actor: &str, bytes: u64) -> Duration {
        if self.rate() == 0.0 {
            return Duration::ZERO;
        }
        self.with(actor, |b| {
            b.tokens -= bytes as f64;
            if b.tokens >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-b.tokens / self.rate())
            }
        })
    }
}

fn bytes_per_sec(mib_per_sec: u64) -> f64 {
    mib_per_sec as f64 * 1024.0 * 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_actor_in_debt_leaves_others_alone() {
        let r = ReadRate::new(1);
        assert!(r.check("ai:alice").is_ok());
        assert_eq!(r.charge("ai:alice", 512 * 1024), Duration::ZERO);
        let wait = r.charge("ai:alice", 1024 * 1024);
        assert!(wait > Duration::from_millis(100) && wait <= Duration::from_millis(600));
        assert!(r.check("ai:alice").is_err());
        assert!(r.check("ai:bob").is_ok());
        assert_eq!(r.charge("ai:bob", 1024), Duration::ZERO);
    }

    #[test]
    fn zero_is_no_limit() {
        let r = ReadRate::new(0);
        assert_eq!(r.charge("x", u64::MAX / 2), Duration::ZERO);
        assert!(r.check("x").is_ok());
    }
}
