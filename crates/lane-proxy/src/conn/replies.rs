//! Redis → client, for one connection.
//!
//! Bytes are relayed as they arrive; the [`ReplyScanner`] finds where each
//! reply ends, so that the proxy's own replies go out in their place and
//! pipeline permits come back as replies are written. At most
//! `reply_buffer` bytes are read from Redis (plus one incomplete header
//! line) before they are written to the client: while the client does not
//! read, neither does the proxy, and what Redis has to say waits in Redis.

use crate::conn::relay_socket::OwnedWriteHalf;
use crate::conn::reply_scanner::{ReplyError, ReplyScanner};
use crate::conn::slot::{release, Slot};
use crate::lane::consumers::Consumers;
use crate::lane::meter::Meter;
use crate::lane::settings::LaneSettings;
use crate::upstream::cluster_map::Moved;
use std::collections::VecDeque;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Semaphore;

/// The replies a client is owed. Admitted XADDs still owed when the
/// connection ends will never be answered: dropping this counts them
/// answered for the meter, whichever way the pump ends.
struct Owed<'a> {
    queue: VecDeque<Slot>,
    rx: UnboundedReceiver<Slot>,
    meter: &'a Meter,
    consumers: &'a Consumers,
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(slot) = self.rx.try_recv() {
            self.queue.push_back(slot);
        }
        for slot in self.queue.drain(..) {
            release(slot, self.meter, self.consumers);
        }
    }
}

/// Upstream → client, until the client's connection closes (or a `Close`
/// slot is reached).
pub async fn pump_replies<R: AsyncRead + Unpin>(
    mut ur: R,
    mut cw: OwnedWriteHalf,
    rx: UnboundedReceiver<Slot>,
    permits: &Semaphore,
    s: &LaneSettings,
) -> io::Result<()> {
    let reply_buffer = s.limits.reply_buffer;
    let mut owed = Owed {
        queue: VecDeque::new(),
        rx,
        meter: &s.meter,
        consumers: &s.consumers,
    };
    let mut scanner = ReplyScanner::new();
    if !s.route.is_unix() {
        scanner.watch_moves();
    }
    let mut inbuf: Vec<u8> = Vec::new();
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut upstream_closed = false;
    loop {
        while let Ok(slot) = owed.rx.try_recv() {
            push_slot(&mut owed.queue, slot);
        }
        let mut p = Pass {
            inbuf: &inbuf,
            start,
            relayed_from: start,
            answered: 0,
        };
        let passed = owed
            .pass(&mut scanner, &mut p, &mut out)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let (relayed_from, answered) = (p.relayed_from, p.answered);
        start = p.start;
        if let Passed::Moved(m) = passed {
            return lane_moved(cw, out, m, s).await;
        }
        write_out(&mut cw, &inbuf[relayed_from..start], &mut out, reply_buffer).await?;
        if answered > 0 {
            permits.add_permits(answered);
        }
        if matches!(passed, Passed::Close) {
            let _ = cw.shutdown().await;
            return Ok(());
        }
        if upstream_closed {
            return Err(io::Error::other("Redis closed the connection"));
        }
        // Keep only an incomplete header line, and room for one read.
        inbuf.drain(..start);
        start = 0;
        if inbuf.capacity() > 2 * reply_buffer && inbuf.len() < reply_buffer {
            inbuf.shrink_to(reply_buffer);
        }
        inbuf.reserve(reply_buffer);
        match owed.read(&mut ur, &mut inbuf, reply_buffer).await? {
            Some(closed) => upstream_closed = closed,
            None => return Ok(()),
        }
    }
}

/// Where a pass over the read buffer is.
struct Pass<'b> {
    inbuf: &'b [u8],
    /// Scanned up to here.
    start: usize,
    /// Relayed bytes are written from `inbuf` itself, from here; they are
    /// copied into `out` only when a reply of the proxy's own comes between.
    relayed_from: usize,
    /// Replies passed, whose pipeline permits come back.
    answered: usize,
}

/// How a pass ended.
enum Passed {
    /// Everything owed that the buffer holds is passed.
    More,
    /// A `Close` is next.
    Close,
    /// The server said the lane is elsewhere.
    Moved(Moved),
}

/// How the replies of one upstream slot went.
enum Step {
    /// All of them are passed.
    Whole,
    /// The buffer ends first.
    Partial,
    /// The server said the lane is elsewhere.
    Moved(Moved),
}

impl Owed<'_> {
    /// Passes what the buffer of `p` holds of the replies owed, in order,
    /// with the proxy's own in their places, into `out` (and `p`).
    fn pass(
        &mut self,
        scanner: &mut ReplyScanner,
        p: &mut Pass<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Passed, ReplyError> {
        loop {
            match self.queue.front_mut() {
                Some(Slot::Local(r)) => {
                    out.extend_from_slice(&p.inbuf[p.relayed_from..p.start]);
                    p.relayed_from = p.start;
                    out.extend_from_slice(r);
                    self.queue.pop_front();
                    p.answered += 1;
                }
                Some(Slot::Close) => return Ok(Passed::Close),
                Some(
                    slot @ (Slot::Upstream(_)
                    | Slot::Append { .. }
                    | Slot::Consumer(_)
                    | Slot::Settle { .. }),
                ) => match upstream_replies(slot, scanner, p, out)? {
                    Step::Whole => {
                        if let Some(slot) = self.queue.pop_front() {
                            release(slot, self.meter, self.consumers);
                        }
                    }
                    Step::Partial => return Ok(Passed::More),
                    Step::Moved(m) => return Ok(Passed::Moved(m)),
                },
                None => {
                    // Nothing owed: only RESP3 pushes may pass.
                    let (used, _) = scanner.scan(&p.inbuf[p.start..], 0)?;
                    p.start += used;
                    return Ok(Passed::More);
                }
            }
        }
    }

    /// Reads Redis into `inbuf`, at most `reply_buffer` bytes; with nothing
    /// owed, until a slot comes first. `Some(true)`: Redis closed the
    /// connection; `None`: the command pump is gone.
    async fn read<R: AsyncRead + Unpin>(
        &mut self,
        ur: &mut R,
        inbuf: &mut Vec<u8>,
        reply_buffer: usize,
    ) -> io::Result<Option<bool>> {
        let mut limited = ur.take(reply_buffer as u64);
        if !self.queue.is_empty() {
            return Ok(Some(limited.read_buf(inbuf).await? == 0));
        }
        tokio::select! {
            slot = self.rx.recv() => match slot {
                Some(slot) => {
                    push_slot(&mut self.queue, slot);
                    Ok(Some(false))
                }
                None => Ok(None),
            },
            r = limited.read_buf(inbuf) => Ok(Some(r? == 0)),
        }
    }
}

/// Passes what `p` holds of the replies of `slot`, one of upstream's.
fn upstream_replies(
    slot: &mut Slot,
    scanner: &mut ReplyScanner,
    p: &mut Pass<'_>,
    out: &mut Vec<u8>,
) -> Result<Step, ReplyError> {
    let want = match slot {
        Slot::Upstream(n) => *n,
        _ => 1,
    };
    // A reply replaced by the proxy's own (an aborted transaction's
    // EXEC): relay what came before it, never its own bytes.
    let replaced = matches!(
        slot,
        Slot::Settle {
            replace: Some(_),
            ..
        }
    );
    if replaced {
        out.extend_from_slice(&p.inbuf[p.relayed_from..p.start]);
    }
    let (used, done) = scanner.scan(&p.inbuf[p.start..], want)?;
    if let Some(m) = scanner.take_moved() {
        // A replaced reply's bytes before it are in `out` already.
        let from = if replaced { p.start } else { p.relayed_from };
        out.extend_from_slice(&p.inbuf[from..p.start + used]);
        return Ok(Step::Moved(m));
    }
    if let Slot::Settle {
        replace: Some(r), ..
    } = slot
    {
        if done == 1 {
            out.extend_from_slice(r);
        }
    }
    p.start += used;
    if replaced {
        p.relayed_from = p.start;
    }
    p.answered += done;
    if done < want {
        if let Slot::Upstream(n) = slot {
            *n -= done;
        }
        return Ok(Step::Partial);
    }
    Ok(Step::Whole)
}

/// Writes what was passed: `relayed` straight from the read buffer, or
/// after `out` when the proxy's own replies are in it.
async fn write_out(
    cw: &mut OwnedWriteHalf,
    relayed: &[u8],
    out: &mut Vec<u8>,
    reply_buffer: usize,
) -> io::Result<()> {
    if out.is_empty() {
        if !relayed.is_empty() {
            cw.write_all(relayed).await?;
        }
        return Ok(());
    }
    out.extend_from_slice(relayed);
    cw.write_all(out).await?;
    out.clear();
    if out.capacity() > 2 * reply_buffer {
        out.shrink_to(reply_buffer);
    }
    Ok(())
}

/// The server said the lane is elsewhere (a slot moved, a failover): the
/// client gets what came before, then a plain error in place of the
/// redirection (an agent never follows a cluster address itself), and the
/// connection closes, so that the client reconnects: its next connection
/// goes where the lane is now. Switching nodes under a live connection
/// would lose what the old node held for it (a blocked read, an open
/// transaction, its place in the replies).
async fn lane_moved(
    mut cw: OwnedWriteHalf,
    mut out: Vec<u8>,
    m: Moved,
    s: &LaneSettings,
) -> io::Result<()> {
    log::info!(
        "lane {}: Redis says the lane is served elsewhere ({m:?}); the client is told to \
         reconnect",
        s.agent
    );
    s.route.moved(s.agent.as_str(), m);
    out.extend_from_slice(LANE_MOVED);
    cw.write_all(&out).await?;
    let _ = cw.shutdown().await;
    Ok(())
}

/// What a client gets instead of a redirection.
pub const LANE_MOVED: &[u8] = b"-TRYAGAIN the lane moved to another node; reconnect\r\n";

fn push_slot(queue: &mut VecDeque<Slot>, slot: Slot) {
    if let (Slot::Upstream(n), Some(Slot::Upstream(m))) = (&slot, queue.back_mut()) {
        *m += n;
        return;
    }
    queue.push_back(slot);
}
