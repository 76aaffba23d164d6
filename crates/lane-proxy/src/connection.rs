//! One client connection on one agent's lane.
//!
//! At accept: the peer's uid is checked, an upstream connection is opened
//! and authenticated as `agent_<name>` — all before a byte is read from the
//! client. Then two pumps run side by side in the connection's task:
//!
//! * commands: client bytes → [`CommandParser`] → [`decide`] → re-encoded
//!   into one upstream write per batch. Each command takes a permit of the
//!   pipeline semaphore; with none left the pump stops reading the client
//!   (backpressure), so a client that never reads its replies cannot make
//!   the proxy buffer without bound.
//! * replies: upstream bytes → [`ReplyScanner`] → client, interleaved in
//!   order with the replies the proxy makes itself. The pump learns what to
//!   expect from an ordered queue of `Slot`s that the command pump fills
//!   *before* it writes upstream. Permits come back once replies are
//!   written to the client.

use crate::command_filter::{decide, Policy, Verdict};
use crate::rate_limit::TokenBucket;
use crate::reply_scanner::ReplyScanner;
use crate::resp::{encode_args, encode_command, error_reply, CommandParser};
use oxidepm_lanes::{AclUser, AgentName, LimitsConfig, Secret};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;

/// How long connecting and authenticating upstream may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5);
/// Read size, and the write size the pumps aim for.
const CHUNK: usize = 64 << 10;

/// What a connection on one lane needs; a snapshot taken at accept (a
/// reload changes it for new connections only).
pub struct LaneSettings {
    pub agent: AgentName,
    pub upstream: PathBuf,
    pub password: Secret,
    /// The uid allowed besides the proxy's own.
    pub uid: Option<u32>,
    pub check_peer_uid: bool,
    pub maxlen: Option<u64>,
    pub limits: LimitsConfig,
    pub max_connections: usize,
    /// Shared by every connection of the lane.
    pub rate: Option<Arc<Mutex<TokenBucket>>>,
}

impl std::fmt::Debug for LaneSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneSettings")
            .field("agent", &self.agent)
            .field("upstream", &self.upstream)
            .field("password", &"<redacted>")
            .field("uid", &self.uid)
            .field("check_peer_uid", &self.check_peer_uid)
            .field("maxlen", &self.maxlen)
            .field("limits", &self.limits)
            .field("max_connections", &self.max_connections)
            .field("rate", &self.rate.is_some())
            .finish()
    }
}

impl LaneSettings {
    pub fn user(&self) -> String {
        AclUser::Agent(self.agent.clone()).to_string()
    }
}

/// One reply the client is owed, in order.
#[derive(Debug)]
enum Slot {
    /// This many replies from upstream.
    Upstream(usize),
    /// A reply the proxy makes.
    Local(Cow<'static, [u8]>),
    /// Close once everything before is written.
    Close,
}

/// How the command pump ended.
enum End {
    /// A `Close` slot was queued: let the reply pump finish.
    Graceful,
    /// Stop now.
    Abort,
}

/// Serves one accepted client to the end. Never panics on client input.
pub async fn serve(client: UnixStream, settings: Arc<LaneSettings>) {
    let agent = settings.agent.as_str();
    if let Err(why) = check_peer(&client, &settings) {
        log::warn!("lane {agent}: refused a connection: {why}");
        refuse(client, &format!("ERR lane proxy: {why}")).await;
        return;
    }
    let upstream = match tokio::time::timeout(UPSTREAM_TIMEOUT, connect_upstream(&settings)).await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            log::error!("lane {agent}: upstream unavailable: {e}");
            refuse(client, &format!("ERR lane unavailable: {e}")).await;
            return;
        }
        Err(_) => {
            log::error!("lane {agent}: upstream did not answer within {UPSTREAM_TIMEOUT:?}");
            refuse(client, "ERR lane unavailable: Redis did not answer in time").await;
            return;
        }
    };
    log::debug!("lane {agent}: connection open");
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    let permits = Semaphore::new(settings.limits.max_pipeline);
    let (tx, rx) = unbounded_channel();
    let commands = pump_commands(cr, uw, tx, &permits, &settings);
    let replies = pump_replies(ur, cw, rx, &permits);
    tokio::pin!(commands, replies);
    let result = tokio::select! {
        end = &mut commands => match end {
            Ok(End::Graceful) => replies.await,
            Ok(End::Abort) => Ok(()),
            Err(e) => Err(e),
        },
        r = &mut replies => r,
    };
    match result {
        Ok(()) => log::debug!("lane {agent}: connection closed"),
        Err(e) => log::debug!("lane {agent}: connection ended: {e}"),
    }
}

/// Answers `text` as an error reply and closes (best effort).
///
/// The client's first command may still be on its way: closing a unix
/// socket with unread input resets the peer, which could then lose the
/// reply. So the proxy half-closes, discards what arrives for a moment,
/// and only then closes.
pub async fn refuse(mut client: UnixStream, text: &str) {
    let reply = error_reply(text);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        client.write_all(&reply).await?;
        client.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64usize << 10;
        while left > 0 {
            let n = client.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        io::Result::Ok(())
    })
    .await;
}

/// Why a client may not use a lane; the client is told and it is logged.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("cannot read the peer's credentials: {0}")]
    Credentials(#[source] io::Error),
    #[error("uid {uid} may not use the lane of agent '{agent}'")]
    Uid { uid: u32, agent: AgentName },
}

fn check_peer(client: &UnixStream, s: &LaneSettings) -> Result<(), PeerError> {
    if !s.check_peer_uid {
        return Ok(());
    }
    let uid = client.peer_cred().map_err(PeerError::Credentials)?.uid();
    let own = oxidepm_sys::ids::euid();
    if uid == own || Some(uid) == s.uid {
        Ok(())
    } else {
        Err(PeerError::Uid {
            uid,
            agent: s.agent.clone(),
        })
    }
}

/// Connects to Redis and authenticates as `agent_<name>`.
async fn connect_upstream(s: &LaneSettings) -> io::Result<UnixStream> {
    let mut up = UnixStream::connect(&s.upstream).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot connect to {}: {e}", s.upstream.display()),
        )
    })?;
    let user = s.user();
    let mut auth = Vec::with_capacity(64);
    encode_args(
        &mut auth,
        &[
            b"AUTH".as_slice(),
            user.as_bytes(),
            s.password.expose().as_bytes(),
        ],
    );
    up.write_all(&auth).await?;
    let mut reply = Vec::with_capacity(64);
    loop {
        if reply.len() > 4096 {
            return Err(io::Error::other("oversized reply to AUTH"));
        }
        let mut b = [0u8; 256];
        let n = up.read(&mut b).await?;
        if n == 0 {
            return Err(io::Error::other("Redis closed the connection during AUTH"));
        }
        reply.extend_from_slice(&b[..n]);
        if reply.ends_with(b"\r\n") {
            break;
        }
    }
    if reply == b"+OK\r\n" {
        return Ok(up);
    }
    let text = String::from_utf8_lossy(reply.strip_prefix(b"-").unwrap_or(&reply))
        .trim_end()
        .to_string();
    Err(io::Error::other(format!(
        "Redis refused AUTH as {user}: {text}"
    )))
}

/// Client → upstream.
async fn pump_commands(
    mut cr: OwnedReadHalf,
    mut uw: OwnedWriteHalf,
    tx: UnboundedSender<Slot>,
    permits: &Semaphore,
    s: &LaneSettings,
) -> io::Result<End> {
    let policy = Policy {
        agent: &s.agent,
        maxlen: s.maxlen,
    };
    let mut parser = CommandParser::new((&s.limits).into());
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
    let mut start = 0usize;
    let mut up: Vec<u8> = Vec::with_capacity(CHUNK);
    let send = |slot: Slot| {
        tx.send(slot)
            .map_err(|_| io::Error::other("reply pump gone"))
    };
    loop {
        let mut forwarded = 0usize;
        let mut out_of_permits = false;
        let mut closing = false;
        while start < buf.len() {
            let Ok(permit) = permits.try_acquire() else {
                out_of_permits = true;
                break;
            };
            let n = match parser.parse(&buf[start..]) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    log::info!("lane {}: protocol error: {e}", s.agent);
                    permit.forget();
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    send(Slot::Local(Cow::Owned(error_reply(&format!(
                        "ERR protocol error: {e}"
                    )))))?;
                    send(Slot::Close)?;
                    closing = true;
                    break;
                }
            };
            permit.forget();
            let cmd = parser.command(&buf[start..start + n]);
            let mut verdict = decide(&cmd, &policy);
            if matches!(verdict, Verdict::Forward | Verdict::Rewrite(_)) {
                if let Some(rate) = &s.rate {
                    let ok = rate
                        .lock()
                        .map(|mut b| b.try_take(Instant::now()))
                        .unwrap_or(true);
                    if !ok {
                        verdict = Verdict::Reply(Cow::Borrowed(b"-ERR rate limit exceeded\r\n"));
                    }
                }
            }
            match verdict {
                Verdict::Forward => {
                    if parser.is_canonical() {
                        up.extend_from_slice(&buf[start..start + n]);
                    } else {
                        encode_command(&mut up, &cmd);
                    }
                    forwarded += 1;
                }
                Verdict::Rewrite(args) => {
                    encode_args(&mut up, &args);
                    forwarded += 1;
                }
                Verdict::Reply(r) => {
                    log::debug!("lane {}: answered {:?} locally", s.agent, cmd);
                    if forwarded > 0 {
                        send(Slot::Upstream(forwarded))?;
                        forwarded = 0;
                    }
                    send(Slot::Local(r))?;
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
        if closing {
            return Ok(End::Graceful);
        }
        if out_of_permits {
            // Backpressure: read nothing more until replies drain.
            drop(permits.acquire().await.map_err(io::Error::other)?);
            continue;
        }
        // Need more input: keep only the incomplete command.
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        let want = parser.needed().saturating_sub(buf.len()).max(CHUNK);
        buf.reserve(want);
        if cr.read_buf(&mut buf).await? == 0 {
            return Ok(client_eof(&cr, !buf.is_empty(), &tx));
        }
    }
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

/// Upstream → client.
async fn pump_replies(
    mut ur: OwnedReadHalf,
    mut cw: OwnedWriteHalf,
    mut rx: UnboundedReceiver<Slot>,
    permits: &Semaphore,
) -> io::Result<()> {
    let mut queue: VecDeque<Slot> = VecDeque::new();
    let mut scanner = ReplyScanner::new();
    let mut inbuf: Vec<u8> = Vec::with_capacity(CHUNK);
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(CHUNK);
    let mut upstream_closed = false;
    loop {
        while let Ok(slot) = rx.try_recv() {
            push_slot(&mut queue, slot);
        }
        let mut answered = 0usize;
        let mut close = false;
        loop {
            match queue.front_mut() {
                Some(Slot::Local(r)) => {
                    out.extend_from_slice(r);
                    queue.pop_front();
                    answered += 1;
                }
                Some(Slot::Close) => {
                    close = true;
                    break;
                }
                Some(Slot::Upstream(n)) => {
                    let (used, done) = scanner
                        .scan(&inbuf[start..], *n)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    out.extend_from_slice(&inbuf[start..start + used]);
                    start += used;
                    *n -= done;
                    answered += done;
                    if *n > 0 {
                        break;
                    }
                    queue.pop_front();
                }
                None => {
                    // Nothing owed: only RESP3 pushes may pass.
                    let (used, _) = scanner
                        .scan(&inbuf[start..], 0)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    out.extend_from_slice(&inbuf[start..start + used]);
                    start += used;
                    break;
                }
            }
        }
        if !out.is_empty() {
            cw.write_all(&out).await?;
            if out.capacity() > 4 * CHUNK {
                out = Vec::with_capacity(CHUNK);
            } else {
                out.clear();
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
        if start == inbuf.len() {
            inbuf.clear();
            start = 0;
        } else if start > 0 {
            inbuf.drain(..start);
            start = 0;
        }
        inbuf.reserve(CHUNK);
        if queue.is_empty() {
            tokio::select! {
                slot = rx.recv() => match slot {
                    Some(slot) => push_slot(&mut queue, slot),
                    None => return Ok(()),
                },
                r = ur.read_buf(&mut inbuf) => upstream_closed = r? == 0,
            }
        } else {
            upstream_closed = ur.read_buf(&mut inbuf).await? == 0;
        }
    }
}

fn push_slot(queue: &mut VecDeque<Slot>, slot: Slot) {
    if let (Slot::Upstream(n), Some(Slot::Upstream(m))) = (&slot, queue.back_mut()) {
        *m += n;
        return;
    }
    queue.push_back(slot);
}
