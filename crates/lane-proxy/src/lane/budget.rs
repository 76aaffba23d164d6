//! A lane's byte budget for buffered client commands.
//!
//! Every connection of a lane reads into a buffer whose capacity it must
//! first hold in the lane's [`Budget`] (`limits.lane_buffer` bytes). A
//! connection that needs more than is free waits, reading nothing, until
//! others give some back (when their commands complete, when they close,
//! or when the command deadline closes them). So however many connections
//! a lane has and however they stall, its buffers never hold more than the
//! budget, and one lane's clients cannot take another lane's memory.

use std::sync::Arc;
use tokio::sync::Semaphore;

/// The bytes one lane may buffer; shared by its connections.
#[derive(Debug)]
pub struct Budget {
    sem: Semaphore,
    size: usize,
}

impl Budget {
    /// A budget of `size` bytes (at most 4 GiB - 1, the most one wait can
    /// ask for; more is clamped).
    pub fn new(size: usize) -> Arc<Budget> {
        let size = size.min(u32::MAX as usize);
        Arc::new(Budget {
            sem: Semaphore::new(size),
            size,
        })
    }

    /// The budget's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes no connection holds now.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.sem.available_permits()
    }
}

/// What one connection holds of its lane's budget; given back on drop.
#[derive(Debug)]
pub struct Held {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Held {
    /// Nothing held yet.
    pub fn new(budget: Arc<Budget>) -> Held {
        Held { budget, bytes: 0 }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` in all, waiting until enough is free. `bytes` above
    /// the budget's size can never be had: that is the caller's error
    /// (the configuration guarantees a command fits).
    pub async fn grow_to(&mut self, bytes: usize) {
        if bytes <= self.bytes {
            return;
        }
        let more = (bytes - self.bytes).min(self.budget.size);
        // `more` fits in u32: the size is clamped so at `new`.
        let Ok(permits) = self.budget.sem.acquire_many(more as u32).await else {
            // The semaphore is never closed.
            return;
        };
        permits.forget();
        self.bytes += more;
    }

    /// Holds only `bytes` (when fewer than now), giving the rest back.
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.budget.sem.add_permits(self.bytes - bytes);
            self.bytes = bytes;
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn holders_share_and_give_back() {
        let b = Budget::new(100);
        let mut a = Held::new(b.clone());
        a.grow_to(60).await;
        assert_eq!((a.bytes(), b.free()), (60, 40));
        let mut c = Held::new(b.clone());
        // 50 is not free: c waits until a gives some back.
        let wait = tokio::spawn(async move {
            c.grow_to(50).await;
            c
        });
        tokio::task::yield_now().await;
        assert!(!wait.is_finished());
        a.shrink_to(10);
        let c = wait.await.unwrap();
        assert_eq!((a.bytes(), c.bytes(), b.free()), (10, 50, 40));
        drop(a);
        drop(c);
        assert_eq!(b.free(), 100);
    }
}
