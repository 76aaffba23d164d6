//! Redis → client, for one connection.
//!
//! Bytes are relayed as they arrive; the [`ReplyScanner`] finds where each
//! reply ends, so that the proxy's own replies go out in their place and
//! pipeline permits come back as replies are written. At most
//! `reply_buffer` bytes are read from Redis (plus one incomplete header
//! line) before they are written to the client: while the client does not
//! read, neither does the proxy, and what Redis has to say waits in Redis.

use crate::conn::relay_socket::OwnedWriteHalf;
use crate::conn::reply_scanner::ReplyScanner;
use crate::conn::slot::{release, Slot};
use crate::lane::consumers::Consumers;
use crate::lane::meter::Meter;
use crate::lane::settings::LaneSettings;
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
    let Owed {
        queue,
        rx,
        meter,
        consumers,
    } = &mut owed;
    let mut scanner = ReplyScanner::new();
    if !s.route.is_unix() {
        scanner.watch_moves();
    }
    let mut inbuf: Vec<u8> = Vec::new();
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut upstream_closed = false;
    let bad = |e| io::Error::new(io::ErrorKind::InvalidData, e);
    loop {
        while let Ok(slot) = rx.try_recv() {
            push_slot(queue, slot);
        }
        let mut answered = 0usize;
        let mut close = false;
        // Relayed bytes are written from `inbuf` itself; they are copied
        // into `out` only when a reply of the proxy's own comes between.
        let mut relayed_from = start;
        loop {
            match queue.front_mut() {
                Some(Slot::Local(r)) => {
                    out.extend_from_slice(&inbuf[relayed_from..start]);
                    relayed_from = start;
                    out.extend_from_slice(r);
                    queue.pop_front();
                    answered += 1;
                }
                Some(Slot::Close) => {
                    close = true;
                    break;
                }
                Some(
                    slot @ (Slot::Upstream(_)
                    | Slot::Append { .. }
                    | Slot::Consumer(_)
                    | Slot::Settle { .. }),
                ) => {
                    let want = match slot {
                        Slot::Upstream(n) => *n,
                        _ => 1,
                    };
                    // A reply replaced by the proxy's own (an aborted
                    // transaction's EXEC): relay what came before it, never
                    // its own bytes.
                    let replaced = matches!(
                        slot,
                        Slot::Settle {
                            replace: Some(_),
                            ..
                        }
                    );
                    if replaced {
                        out.extend_from_slice(&inbuf[relayed_from..start]);
                    }
                    let (used, done) = scanner.scan(&inbuf[start..], want).map_err(bad)?;
                    if let Some(m) = scanner.take_moved() {
                        // A replaced reply's bytes before it are in `out` already.
                        let from = if replaced { start } else { relayed_from };
                        out.extend_from_slice(&inbuf[from..start + used]);
                        return lane_moved(cw, out, m, s).await;
                    }
                    if let Slot::Settle {
                        replace: Some(r), ..
                    } = slot
                    {
                        if done == 1 {
                            out.extend_from_slice(r);
                        }
                    }
                    start += used;
                    if replaced {
                        relayed_from = start;
                    }
                    answered += done;
                    if done < want {
                        if let Slot::Upstream(n) = slot {
                            *n -= done;
                        }
                        break;
                    }
                    if let Some(slot) = queue.pop_front() {
                        release(slot, meter, consumers);
                    }
                }
                None => {
                    // Nothing owed: only RESP3 pushes may pass.
                    let (used, _) = scanner.scan(&inbuf[start..], 0).map_err(bad)?;
                    start += used;
                    break;
                }
            }
        }
        if out.is_empty() {
            if relayed_from < start {
                cw.write_all(&inbuf[relayed_from..start]).await?;
            }
        } else {
            out.extend_from_slice(&inbuf[relayed_from..start]);
            cw.write_all(&out).await?;
            out.clear();
            if out.capacity() > 2 * reply_buffer {
                out.shrink_to(reply_buffer);
            }
        }
        if answered > 0 {
            permits.add_permits(answered);
        }
        if close {
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
        let mut limited = (&mut ur).take(reply_buffer as u64);
        if queue.is_empty() {
            tokio::select! {
                slot = rx.recv() => match slot {
                    Some(slot) => push_slot(queue, slot),
                    None => return Ok(()),
                },
                r = limited.read_buf(&mut inbuf) => upstream_closed = r? == 0,
            }
        } else {
            upstream_closed = limited.read_buf(&mut inbuf).await? == 0;
        }
    }
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
    m: crate::upstream::cluster_map::Moved,
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
