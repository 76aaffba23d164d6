//! What the command pump has for upstream and has not sent yet: the
//! commands' bytes, and the count of replies they are owed, whose slot is
//! queued for the reply pump *before* the bytes go (the reply pump must
//! know what a reply is before it can arrive).
//!
//! Commands are batched while the client's input holds complete ones, and
//! go out when it is consumed, before the pump waits for anything, or when
//! the batch reaches [`CHUNK`]: one write upstream for many commands.

use crate::conn::slot::{release, Slot};
use crate::lane::settings::LaneSettings;
use std::io;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedSender;

/// The most read at once, and the size of an upstream batch: a larger
/// command is written from the read buffer itself, never copied.
pub const CHUNK: usize = 64 << 10;

/// The batch of one connection, and the ways out of it: the upstream
/// stream and the slot queue.
pub struct Batch<'a, W> {
    uw: W,
    tx: UnboundedSender<Slot>,
    s: &'a LaneSettings,
    /// Commands' bytes not yet written upstream.
    up: Vec<u8>,
    /// Replies from upstream owed to commands batched since the last slot.
    forwarded: usize,
}

impl<'a, W: AsyncWrite + Unpin> Batch<'a, W> {
    /// An empty batch for upstream `uw`, its slots queued on `tx`.
    pub fn new(uw: W, tx: UnboundedSender<Slot>, s: &'a LaneSettings) -> Self {
        Batch {
            uw,
            tx,
            s,
            up: Vec::new(),
            forwarded: 0,
        }
    }

    /// The slot queue (to queue a last `Close` that owes nothing).
    pub fn sender(&self) -> &UnboundedSender<Slot> {
        &self.tx
    }

    /// Queues `slot` now. The reply pump gone, what it holds is released:
    /// it will never be answered (the connection is ending).
    pub fn send(&self, slot: Slot) -> io::Result<()> {
        self.tx.send(slot).map_err(|e| {
            release(e.0, &self.s.meter, &self.s.consumers);
            io::Error::other("reply pump gone")
        })
    }

    /// One more command owed a plain reply from upstream; its slot goes
    /// with the next.
    pub fn forwarded(&mut self) {
        self.forwarded += 1;
    }

    /// Queues the slot of the commands counted [`Batch::forwarded`].
    pub fn slots(&mut self) -> io::Result<()> {
        if self.forwarded > 0 {
            self.send(Slot::Upstream(self.forwarded))?;
            self.forwarded = 0;
        }
        Ok(())
    }

    /// Queues `slot` after the slot of the commands before it.
    pub fn queue(&mut self, slot: Slot) -> io::Result<()> {
        self.slots()?;
        self.send(slot)
    }

    /// The bytes batched, to append a command to.
    pub fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.up
    }

    /// Whether the batch is as large as it may grow: it goes out then,
    /// which keeps upstream writes (and the batch) bounded.
    pub fn is_full(&self) -> bool {
        self.up.len() >= CHUNK
    }

    /// Writes the batched bytes upstream (their slots are queued already).
    pub async fn write(&mut self) -> io::Result<()> {
        if !self.up.is_empty() {
            self.uw.write_all(&self.up).await?;
            self.up.clear();
        }
        Ok(())
    }

    /// Everything batched goes out: the slots, then the commands.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.slots()?;
        self.write().await
    }

    /// Flushes the batch, then hands out the upstream stream, to write a
    /// large command from where it lies.
    pub async fn direct(&mut self) -> io::Result<&mut W> {
        self.flush().await?;
        Ok(&mut self.uw)
    }

    /// Flushes the batch and the stream itself: TLS may hold back what was
    /// written (a no-op on a socket). Before the pump waits for the client.
    pub async fn flush_all(&mut self) -> io::Result<()> {
        self.flush().await?;
        self.uw.flush().await
    }
}
