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
//! * commands go upstream in batches of at most [`CHUNK`] bytes; a larger
//!   command is written from the read buffer itself, never copied.
//!
//! [`Budget`]: crate::lane::budget::Budget

use crate::conn::answer::{self, not_pending, Answers};
use crate::conn::relay_socket::OwnedReadHalf;
use crate::conn::slot::{release, End, Slot};
use crate::conn::transaction::{Admitted, Session, DISCARD};
use crate::conn::upstream_write;
use crate::filter::decide;
use crate::filter::handshake::{getname_reply, info_reply};
use crate::filter::verdict::{Policy, Verdict};
use crate::lane::budget::Held;
use crate::lane::settings::LaneSettings;
use crate::resp::{error_reply, Command, CommandParser, ProtocolError};
use crate::upstream::redis_version::redis_version;
use std::borrow::Cow;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;

/// The most read at once, and the size of an upstream batch.
pub const CHUNK: usize = 64 << 10;
/// The least room a read is given, and what an idle connection keeps.
const SMALL: usize = 16 << 10;

/// Client → upstream, until the client closes, a `Close` is queued, or an
/// I/O error.
pub async fn pump_commands<W: AsyncWrite + Unpin>(
    mut cr: OwnedReadHalf,
    mut uw: W,
    tx: UnboundedSender<Slot>,
    permits: &Semaphore,
    s: &LaneSettings,
) -> io::Result<End> {
    let policy = Policy {
        agent: &s.agent,
        families: s.meter.families(),
        max_consumer_name: s.limits.max_consumer_name,
        responder: s.responder,
        reply_maxlen: s.bounds.maxlen.unwrap_or(u64::MAX),
        reply_max_bytes: s.bounds.quota.map_or(usize::MAX, |q| q as usize),
    };
    let mut answers = Answers::default();
    let timeout = Duration::from_millis(s.limits.command_timeout_ms);
    let mut parser = CommandParser::new((&s.limits).into());
    let mut session = Session::new(&s.meter, &s.consumers, &s.transactions);
    let mut held = Held::new(s.budget.clone());
    let mut buf: Vec<u8> = Vec::new();
    let mut start = 0usize;
    let mut up: Vec<u8> = Vec::new();
    // When the first byte of the command in progress arrived.
    let mut started: Option<Instant> = None;
    let send = |slot: Slot| {
        tx.send(slot).map_err(|e| {
            // Never to be answered: the connection is ending.
            release(e.0, &s.meter, &s.consumers);
            io::Error::other("reply pump gone")
        })
    };
    loop {
        let mut forwarded = 0usize;
        // What is batched goes out: the slots, then the commands.
        macro_rules! flush {
            () => {
                if forwarded > 0 {
                    send(Slot::Upstream(forwarded))?;
                    forwarded = 0;
                }
                if !up.is_empty() {
                    uw.write_all(&up).await?;
                    up.clear();
                }
            };
        }
        let mut out_of_permits = false;
        let mut closing = false;
        let mut completed = false;
        while start < buf.len() {
            let Ok(permit) = permits.try_acquire() else {
                out_of_permits = true;
                break;
            };
            let n = match parser.parse(&buf[start..]) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    permit.forget();
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    send(Slot::Local(Cow::Owned(error_reply(&refusal(&e, s)))))?;
                    send(Slot::Close)?;
                    closing = true;
                    break;
                }
            };
            permit.forget();
            completed = true;
            let cmd = parser.command(&buf[start..start + n]);
            let mut verdict = decide(&cmd, &policy);
            if let Verdict::Answer { outbox, request } = &verdict {
                if session.in_transaction() {
                    let (outbox, request) = (outbox.clone(), request.clone());
                    let early = if session.answers(&outbox, &request) {
                        Some(Verdict::Reply(Cow::Owned(error_reply(&format!(
                            "{}; this transaction has a reply to it already",
                            not_pending(s.agent.as_str(), &outbox, &request)
                        )))))
                    } else {
                        // What came before goes out first (an XACK, say):
                        // the check then sees Redis after it.
                        flush!();
                        answers.judge(s, &outbox, &request).await
                    };
                    match early {
                        Some(refusal) => verdict = refusal,
                        None => session.answer_queued(outbox, request),
                    }
                }
            }
            if matches!(verdict, Verdict::Exec) && !session.queued_answers().is_empty() {
                // Still pending, or the transaction aborts rather than run
                // with a reply that would fail inside it.
                flush!();
                for (outbox, request) in session.queued_answers().to_vec() {
                    if answers.judge(s, &outbox, &request).await.is_some() {
                        session.refused();
                        break;
                    }
                }
            }
            if matches!(verdict, Verdict::Multi) && !session.in_transaction() && s.rate.is_some() {
                // What came before goes out before this waits.
                flush!();
                rate_wait(s).await;
            }
            if costs_rate(&verdict, session.in_transaction()) && !rate_ok(s) {
                verdict = Verdict::Reply(Cow::Owned(error_reply(&format!(
                    "OXIDEPM rate: agent '{}' sends more than its {} commands per second \
                     (lanes.rate_limit); slow down",
                    s.agent,
                    s.rate
                        .as_ref()
                        .map_or(0.0, |r| r.lock().map_or(0.0, |b| b.rate()))
                ))));
            }
            if session.in_transaction() {
                verdict = queued(verdict, &cmd, n, &mut session, s);
            }
            // What goes upstream, if anything: the new key of an XADD.
            let mut send_up: Option<Option<Vec<u8>>> = None;
            // Or these bytes instead of the command.
            let mut raw_up: Option<Cow<'static, [u8]>> = None;
            // Or a reply's script: its outbox and request.
            let mut reply: Option<(String, Vec<u8>)> = None;
            let mut refused = false;
            match verdict {
                Verdict::Forward => {
                    send_up = Some(None);
                    forwarded += 1;
                }
                Verdict::DelConsumer => {
                    s.consumers.deleted();
                    send_up = Some(None);
                    forwarded += 1;
                }
                Verdict::Consume { arg } => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    let name = cmd.arg(arg);
                    let max = s.limits.max_consumers;
                    match s.consumers.admit(name, max, &s.route, &s.password).await {
                        Ok(()) => {
                            match session.admitted(Admitted::Consumer(name.to_vec())) {
                                Some(_) => send(Slot::Consumer(name.to_vec()))?,
                                None => send(Slot::Upstream(1))?,
                            }
                            send_up = Some(None);
                        }
                        Err(why) => {
                            refused = true;
                            send(Slot::Local(Cow::Owned(error_reply(&why))))?;
                        }
                    }
                }
                Verdict::Append { family, key } => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    let bytes = n as u64;
                    let mut admitted = s.meter.admit(family, bytes);
                    if admitted.is_err() {
                        // The estimate may count what is in flight twice:
                        // send what is admitted, then ask for a new count.
                        if !up.is_empty() {
                            uw.write_all(&up).await?;
                            up.clear();
                        }
                        s.meter.fresh().await;
                        admitted = s.meter.admit(family, bytes);
                    }
                    match admitted {
                        Ok(()) => {
                            match session.admitted(Admitted::Append { family, bytes }) {
                                Some(_) => send(Slot::Append { family, bytes })?,
                                None => send(Slot::Upstream(1))?,
                            }
                            send_up = Some(key);
                        }
                        Err(why) => {
                            log::debug!("lane {}: XADD refused: {why}", s.agent);
                            refused = true;
                            send(Slot::Local(Cow::Owned(error_reply(&why))))?;
                        }
                    }
                }
                Verdict::Multi => {
                    session.multi();
                    send_up = Some(None);
                    forwarded += 1;
                }
                Verdict::Exec | Verdict::Discard => {
                    let exec = matches!(verdict, Verdict::Exec);
                    match session.end(exec) {
                        None => {
                            // Not in a transaction: Redis answers its error.
                            send_up = Some(None);
                            forwarded += 1;
                        }
                        Some(ending) => {
                            if forwarded > 0 {
                                send(Slot::Upstream(forwarded))?;
                                forwarded = 0;
                            }
                            if ending.replace.is_some() {
                                raw_up = Some(Cow::Borrowed(DISCARD));
                            } else {
                                send_up = Some(None);
                            }
                            send(Slot::Settle {
                                replace: ending.replace,
                                held: ending.held,
                            })?;
                        }
                    }
                }
                Verdict::Hello { protover, name } => {
                    if let Some(i) = name {
                        session.name = Some(cmd.arg(i).to_vec());
                    }
                    if let Some(i) = protover {
                        match cmd.arg(i) {
                            b"3" => session.resp3 = true,
                            b"2" => session.resp3 = false,
                            _ => {}
                        }
                    }
                    if name.is_some() {
                        let mut hello = Vec::with_capacity(32);
                        let args: Vec<&[u8]> = cmd.args().take(2).collect();
                        crate::resp::encode_args(&mut hello, &args);
                        raw_up = Some(Cow::Owned(hello));
                    } else {
                        send_up = Some(None);
                    }
                    forwarded += 1;
                }
                Verdict::SetName { arg } => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    session.name = Some(cmd.arg(arg).to_vec());
                    send(Slot::Local(Cow::Borrowed(b"+OK\r\n")))?;
                }
                Verdict::GetName => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    let r = getname_reply(session.name.as_deref(), session.resp3);
                    send(Slot::Local(Cow::Owned(r)))?;
                }
                Verdict::Info => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    let r = match redis_version(&s.route, &s.user(), &s.password).await {
                        Ok(v) => info_reply(v),
                        Err(e) => {
                            log::warn!("lane {}: cannot learn Redis's version: {e}", s.agent);
                            error_reply(&format!(
                                "ERR lane proxy: cannot learn Redis's version for INFO ({e}); \
                                 try again"
                            ))
                        }
                    };
                    send(Slot::Local(Cow::Owned(r)))?;
                }
                Verdict::Reply(r) => {
                    log::debug!("lane {}: answered {:?} locally", s.agent, cmd);
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    refused = r.starts_with(b"-");
                    send(Slot::Local(r))?;
                }
                Verdict::Answer { outbox, request } => {
                    reply = Some((outbox, request));
                    forwarded += 1;
                }
                Verdict::ReplyAndClose(r) => {
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    send(Slot::Local(r))?;
                    send(Slot::Close)?;
                    closing = true;
                }
            }
            if refused {
                session.refused();
            }
            if let Some(raw) = raw_up {
                up.extend_from_slice(&raw);
            }
            if let Some((outbox, request)) = reply {
                let name = s.agent.as_str();
                if n > CHUNK {
                    flush!();
                    answer::write(&mut uw, &cmd, name, &outbox, &request).await?;
                } else {
                    answer::encode(&mut up, &cmd, name, &outbox, &request);
                }
            }
            if let Some(key) = send_up {
                if n > CHUNK {
                    // Large: written as it lies in the read buffer (the
                    // slots for it are queued already).
                    flush!();
                    if key.is_none() && parser.is_canonical() {
                        uw.write_all(&buf[start..start + n]).await?;
                    } else {
                        upstream_write::write_with_key(&mut uw, &cmd, key.as_deref()).await?;
                    }
                } else if key.is_none() && parser.is_canonical() {
                    up.extend_from_slice(&buf[start..start + n]);
                } else {
                    upstream_write::encode_with_key(&mut up, &cmd, key.as_deref());
                }
            }
            start += n;
            parser.reset();
            if closing {
                break;
            }
            if up.len() >= CHUNK {
                // Keep upstream writes (and this buffer) bounded.
                if forwarded > 0 {
                    send(Slot::Upstream(forwarded))?;
                    forwarded = 0;
                }
                uw.write_all(&up).await?;
                up.clear();
            }
        }
        // The slots go out before the commands they stand for.
        if forwarded > 0 {
            send(Slot::Upstream(forwarded))?;
        }
        if !up.is_empty() {
            uw.write_all(&up).await?;
            up.clear();
        }
        // Before waiting for the client: TLS may hold back what was
        // written (a no-op on a socket).
        uw.flush().await?;
        if closing {
            return Ok(End::Graceful);
        }
        if out_of_permits {
            // Backpressure: read nothing more until replies drain.
            drop(permits.acquire().await.map_err(io::Error::other)?);
            continue;
        }
        // Need more input: keep only the incomplete command.
        buf.drain(..start);
        start = 0;
        if buf.is_empty() {
            started = None;
            if buf.capacity() > CHUNK {
                buf.shrink_to(SMALL);
            }
        } else if completed || started.is_none() {
            started = Some(Instant::now());
        }
        if buf.capacity() < held.bytes() {
            held.shrink_to(buf.capacity());
        }
        let first_byte = match started {
            Some(t) => t,
            None => {
                // Between commands: wait, with no deadline and no budget
                // held beyond the buffer, for the next command's first byte.
                cr.readable().await?;
                Instant::now()
            }
        };
        started = Some(first_byte);
        let deadline = tokio::time::Instant::from(first_byte + timeout);
        // Room for the next read: what the command is known to need, within
        // [SMALL, CHUNK]; growing doubles, up to that need. Never more than
        // the whole budget: the buffer then holds only an incomplete
        // command, which is smaller (the configuration says so).
        let want = parser
            .needed()
            .saturating_sub(buf.len())
            .clamp(SMALL, CHUNK);
        let target = (buf.len() + want).min(s.budget.size());
        if buf.capacity() < target {
            let need = parser.needed().max(target).min(s.budget.size());
            let cap = (buf.capacity() * 2).clamp(target, need);
            if tokio::time::timeout_at(deadline, held.grow_to(cap))
                .await
                .is_err()
            {
                return timed_out(&send, s);
            }
            buf.reserve_exact(cap - buf.len());
        }
        let n = match tokio::time::timeout_at(deadline, cr.read_buf(&mut buf)).await {
            Ok(r) => r?,
            Err(_) => return timed_out(&send, s),
        };
        if n == 0 {
            return Ok(client_eof(&cr, !buf.is_empty(), &tx));
        }
    }
}

/// Whether `v` sends work upstream, and so takes from the rate limit
/// (refused past it). The MULTI that opens a transaction, and the EXEC or
/// DISCARD that ends it, do not: refusing one of them would run the
/// commands around it outside the transaction the client asked for; that
/// MULTI waits for its token instead ([`rate_wait`]). A nested MULTI, or
/// EXEC or DISCARD without a transaction, is a plain error of Redis's,
/// work like any other.
fn costs_rate(v: &Verdict, in_transaction: bool) -> bool {
    match v {
        Verdict::Forward
        | Verdict::Append { .. }
        | Verdict::Consume { .. }
        | Verdict::DelConsumer
        | Verdict::Answer { .. }
        | Verdict::Hello { .. } => true,
        Verdict::Multi => in_transaction,
        Verdict::Exec | Verdict::Discard => !in_transaction,
        _ => false,
    }
}

/// Waits for a token of the lane's rate limit, and takes it: how the
/// MULTI that opens a transaction is limited without being refused
/// (otherwise empty transactions would pass the limit).
async fn rate_wait(s: &LaneSettings) {
    let Some(rate) = &s.rate else {
        return;
    };
    loop {
        let wait = match rate.lock() {
            Ok(mut b) => b.take_or_wait(Instant::now()),
            Err(_) => None,
        };
        match wait {
            None => return,
            Some(d) => tokio::time::sleep(d).await,
        }
    }
}

/// Inside a transaction: what the proxy would answer itself is refused
/// (it cannot be queued), and a command to be queued upstream must fit
/// the transaction's bounds.
fn queued(
    verdict: Verdict,
    cmd: &Command<'_>,
    n: usize,
    session: &mut Session<'_>,
    s: &LaneSettings,
) -> Verdict {
    match verdict {
        Verdict::Forward
        | Verdict::Append { .. }
        | Verdict::Consume { .. }
        | Verdict::DelConsumer => match session.queue(n, cmd.len(), &s.limits) {
            Ok(()) => verdict,
            Err(why) => Verdict::Reply(Cow::Owned(error_reply(&why))),
        },
        // It goes upstream as the script of `crate::conn::answer`.
        Verdict::Answer { .. } => {
            match session.queue(n + answer::OVERHEAD, cmd.len() + 6, &s.limits) {
                Ok(()) => verdict,
                Err(why) => Verdict::Reply(Cow::Owned(error_reply(&why))),
            }
        }
        Verdict::SetName { .. } | Verdict::GetName | Verdict::Info | Verdict::Hello { .. } => {
            Verdict::Reply(Cow::Owned(Session::local_inside(cmd.arg(0))))
        }
        Verdict::Reply(r) if !r.starts_with(b"-") => {
            Verdict::Reply(Cow::Owned(Session::local_inside(cmd.arg(0))))
        }
        other => other,
    }
}

fn rate_ok(s: &LaneSettings) -> bool {
    match &s.rate {
        Some(rate) => rate
            .lock()
            .map(|mut b| b.try_take(Instant::now()))
            .unwrap_or(true),
        None => true,
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
fn timed_out(send: &impl Fn(Slot) -> io::Result<()>, s: &LaneSettings) -> io::Result<End> {
    log::info!(
        "lane {}: a command was not completed within {} ms; closing",
        s.agent,
        s.limits.command_timeout_ms
    );
    send(Slot::Local(Cow::Owned(error_reply(&format!(
        "OXIDEPM timeout: a command was not completed within {} ms of its first byte \
         (lanes.limits.command_timeout_ms); the connection is closed",
        s.limits.command_timeout_ms
    )))))?;
    send(Slot::Close)?;
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
