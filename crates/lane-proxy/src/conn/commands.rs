//! Client → Redis, for one connection: read, parse, filter, admit,
//! re-encode, forward.
//!
//! What the pump holds is bounded in bytes:
//!
//! * its read buffer's capacity is held in the lane's [`Budget`]: it grows
//!   (doubling, up to what the command in progress is known to need) only
//!   with budget to match, and shrinks back when the command is done;
//! * a command has `limits.command_timeout_ms` from its first byte to its
//!   last; one that takes longer gets `-OXIDEPM timeout …` and the
//!   connection is closed (the stream cannot be resynchronised), which
//!   gives its budget back;
//! * commands go upstream in batches of at most [`CHUNK`] bytes
//!   ([`Batch`]); a larger command is written from the read buffer itself,
//!   never copied.
//!
//! Each complete command is parsed here, then judged, admitted and acted
//! on by the connection's [`Handler`].
//!
//! [`Budget`]: crate::lane::budget::Budget
//! [`Batch`]: crate::conn::batch::Batch

use crate::conn::batch::{Batch, CHUNK};
use crate::conn::handler::Handler;
use crate::conn::relay_socket::OwnedReadHalf;
use crate::conn::slot::{End, Slot};
use crate::lane::budget::Held;
use crate::lane::settings::LaneSettings;
use crate::resp::{error_reply, CommandParser, ProtocolError};
use std::borrow::Cow;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;

/// The least room a read is given, and what an idle connection keeps.
const SMALL: usize = 16 << 10;

/// Client → upstream, until the client closes, a `Close` is queued, or an
/// I/O error.
pub async fn pump_commands<W: AsyncWrite + Unpin>(
    cr: OwnedReadHalf,
    uw: W,
    tx: UnboundedSender<Slot>,
    permits: &Semaphore,
    s: &LaneSettings,
) -> io::Result<End> {
    let mut input = Input {
        cr,
        parser: CommandParser::new((&s.limits).into()),
        held: Held::new(s.budget.clone()),
        buf: Vec::new(),
        start: 0,
        started: None,
        timeout: Duration::from_millis(s.limits.command_timeout_ms),
        s,
    };
    let mut handler = Handler::new(s, Batch::new(uw, tx, s));
    loop {
        let stop = input.drain(&mut handler, permits).await?;
        handler.batch.flush_all().await?;
        let completed = match stop {
            Stop::Close => return Ok(End::Graceful),
            Stop::Permits => {
                // Backpressure: read nothing more until replies drain.
                drop(permits.acquire().await.map_err(io::Error::other)?);
                continue;
            }
            Stop::Input { completed } => completed,
        };
        match input.read(completed).await? {
            Read::More => {}
            Read::TimedOut => return timed_out(&handler.batch, s),
            Read::Closed => {
                let partial = !input.buf.is_empty();
                return Ok(client_eof(&input.cr, partial, handler.batch.sender()));
            }
        }
    }
}

/// Why the pump stopped taking commands from its read buffer.
enum Stop {
    /// A `Close` is queued.
    Close,
    /// Every pipeline permit is taken.
    Permits,
    /// The buffer holds no complete command (`completed`: it held some).
    Input { completed: bool },
}

/// What a read of the client gave.
enum Read {
    /// More bytes.
    More,
    /// The command in progress passed its deadline.
    TimedOut,
    /// The client's read side ended.
    Closed,
}

/// The client's side of the pump: its read buffer, the budget that buffer
/// holds, and the command in progress.
struct Input<'a> {
    cr: OwnedReadHalf,
    parser: CommandParser,
    held: Held,
    buf: Vec<u8>,
    /// Where the first command not yet handled starts in `buf`.
    start: usize,
    /// When the first byte of the command in progress arrived.
    started: Option<Instant>,
    timeout: Duration,
    s: &'a LaneSettings,
}

impl Input<'_> {
    /// Hands every complete command of the buffer to `handler`, each with
    /// a pipeline permit, until one closes the connection, the permits run
    /// out, or only an incomplete command is left.
    async fn drain<W: AsyncWrite + Unpin>(
        &mut self,
        handler: &mut Handler<'_, W>,
        permits: &Semaphore,
    ) -> io::Result<Stop> {
        let mut completed = false;
        while self.start < self.buf.len() {
            let Ok(permit) = permits.try_acquire() else {
                return Ok(Stop::Permits);
            };
            let n = match self.parser.parse(&self.buf[self.start..]) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    permit.forget();
                    let text = refusal(&e, self.s);
                    handler
                        .batch
                        .queue(Slot::Local(Cow::Owned(error_reply(&text))))?;
                    handler.batch.send(Slot::Close)?;
                    return Ok(Stop::Close);
                }
            };
            permit.forget();
            completed = true;
            let raw = &self.buf[self.start..self.start + n];
            let canonical = self.parser.is_canonical();
            let cmd = self.parser.command(raw);
            let closing = handler.command(&cmd, raw, canonical).await?;
            self.start += n;
            self.parser.reset();
            if closing {
                return Ok(Stop::Close);
            }
            if handler.batch.is_full() {
                handler.batch.flush().await?;
            }
        }
        Ok(Stop::Input { completed })
    }

    /// Keeps only the incomplete command, then reads more of it, within
    /// its deadline and the lane's budget (`completed`: the buffer held
    /// complete commands, so what is left started arriving now).
    async fn read(&mut self, completed: bool) -> io::Result<Read> {
        self.buf.drain(..self.start);
        self.start = 0;
        if self.buf.is_empty() {
            self.started = None;
            if self.buf.capacity() > CHUNK {
                self.buf.shrink_to(SMALL);
            }
        } else if completed || self.started.is_none() {
            self.started = Some(Instant::now());
        }
        if self.buf.capacity() < self.held.bytes() {
            self.held.shrink_to(self.buf.capacity());
        }
        let first_byte = match self.started {
            Some(t) => t,
            None => {
                // Between commands: wait, with no deadline and no budget
                // held beyond the buffer, for the next command's first byte.
                self.cr.readable().await?;
                Instant::now()
            }
        };
        self.started = Some(first_byte);
        let deadline = tokio::time::Instant::from(first_byte + self.timeout);
        if !self.room(deadline).await {
            return Ok(Read::TimedOut);
        }
        let n = match tokio::time::timeout_at(deadline, self.cr.read_buf(&mut self.buf)).await {
            Ok(r) => r?,
            Err(_) => return Ok(Read::TimedOut),
        };
        Ok(if n == 0 { Read::Closed } else { Read::More })
    }

    /// Room for the next read: what the command is known to need, within
    /// [SMALL, CHUNK]; growing doubles, up to that need. Never more than
    /// the whole budget: the buffer then holds only an incomplete
    /// command, which is smaller (the configuration says so). `false`:
    /// the budget was not had by `deadline`.
    async fn room(&mut self, deadline: tokio::time::Instant) -> bool {
        let budget = self.s.budget.size();
        let want = self
            .parser
            .needed()
            .saturating_sub(self.buf.len())
            .clamp(SMALL, CHUNK);
        let target = (self.buf.len() + want).min(budget);
        if self.buf.capacity() < target {
            let need = self.parser.needed().max(target).min(budget);
            let cap = (self.buf.capacity() * 2).clamp(target, need);
            if tokio::time::timeout_at(deadline, self.held.grow_to(cap))
                .await
                .is_err()
            {
                return false;
            }
            self.buf.reserve_exact(cap - self.buf.len());
        }
        true
    }
}

/// The error reply for a command the parser refused.
fn refusal(e: &ProtocolError, s: &LaneSettings) -> String {
    log::info!("lane {}: {e}", s.agent);
    match e.limit() {
        Some(key) => {
            format!("OXIDEPM too large: {e} (lanes.limits.{key}); the connection is closed")
        }
        None => format!("ERR protocol error: {e}"),
    }
}

/// Queues the deadline's error and the close.
fn timed_out<W: AsyncWrite + Unpin>(batch: &Batch<'_, W>, s: &LaneSettings) -> io::Result<End> {
    log::info!(
        "lane {}: a command was not completed within {} ms; closing",
        s.agent,
        s.limits.command_timeout_ms
    );
    batch.send(Slot::Local(Cow::Owned(error_reply(&format!(
        "OXIDEPM timeout: a command was not completed within {} ms of its first byte \
         (lanes.limits.command_timeout_ms); the connection is closed",
        s.limits.command_timeout_ms
    )))))?;
    batch.send(Slot::Close)?;
    Ok(End::Graceful)
}

/// The client's read side ended. A peer that only shut down its write
/// side still gets its outstanding replies; one that is gone entirely (or
/// left a command half sent) is dropped now, as Redis would drop it, so a
/// blocking read it left behind does not linger upstream.
fn client_eof(cr: &OwnedReadHalf, partial: bool, tx: &UnboundedSender<Slot>) -> End {
    let hung_up = oxidepm_sys::poll::hung_up(cr.as_ref());
    if partial || hung_up || tx.send(Slot::Close).is_err() {
        End::Abort
    } else {
        End::Graceful
    }
}
