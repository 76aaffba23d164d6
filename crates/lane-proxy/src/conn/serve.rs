//! One client connection on one agent's lane.
//!
//! At accept: the peer's uid is checked, an upstream connection is opened
//! and authenticated as `agent_<name>` — all before a byte is read from the
//! client. Then two pumps run side by side in the connection's task:
//!
//! * [`crate::conn::commands`]: client bytes → parsed → filtered → re-encoded
//!   upstream, within the lane's byte budget and the command deadline;
//! * [`crate::conn::replies`]: upstream bytes → client, interleaved in order
//!   with the replies the proxy makes itself.
//!
//! The command pump tells the reply pump what to expect through an ordered
//! queue of [`Slot`](super::slot::Slot)s, filled *before* it writes upstream. Each command
//! takes a permit of the pipeline semaphore, given back once its reply is
//! written to the client: with none left the command pump stops reading
//! the client, so a client that never reads its replies cannot make the
//! proxy buffer them; and the reply pump reads Redis only when the client
//! has taken what came before, so Redis keeps what the client does not
//! take, in its own client output buffer.
//!
//! The upstream connection goes where [`Route`](crate::upstream::route::Route) says: the private Redis's
//! unix socket, or a shared server over TCP or TLS (the primary Sentinel
//! names, or the cluster node of the agent's slot: every key of an agent
//! carries its hash tag, so one node serves its whole lane). Unix and TCP
//! sockets are relayed at the descriptor level (`relay_socket`), TLS
//! through its session. When a shared server answers that the lane is
//! served elsewhere (`-MOVED`, `-ASK`, `-READONLY`, a blocked read
//! `-UNBLOCKED` by a failover), the client gets `-TRYAGAIN … reconnect` in
//! place of that reply and the connection closes (see `crate::conn::replies`):
//! its next connection goes to the node that serves the lane now.

use crate::conn::commands::pump_commands;
use crate::conn::relay_socket::{self, OwnedReadHalf, OwnedWriteHalf};
use crate::conn::replies::pump_replies;
use crate::conn::slot::End;
use crate::lane::settings::LaneSettings;
use crate::resp::error_reply;
use crate::upstream::link::Link;
use crate::upstream::route::lane_of;
use oxidepm_lanes::AgentName;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc::unbounded_channel;
use tokio::sync::Semaphore;

/// How long connecting and authenticating upstream may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one accepted client to the end. Never panics on client input.
pub async fn serve(client: UnixStream, settings: Arc<LaneSettings>) {
    let agent = settings.agent.as_str();
    if let Err(why) = check_peer(&client, &settings) {
        log::warn!("lane {agent}: refused a connection: {why}");
        refuse(client, &format!("ERR lane proxy: {why}")).await;
        return;
    }
    let user = settings.user();
    let lane = lane_of(&user);
    let connect = settings.route.connect(&lane, &user, &settings.password);
    let upstream = match tokio::time::timeout(UPSTREAM_TIMEOUT, connect).await {
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
    let (cr, cw) = match relay_socket::split(client) {
        Ok(h) => h,
        Err(e) => {
            log::error!("lane {agent}: cannot register the connection: {e}");
            return;
        }
    };
    // Sockets are relayed at the descriptor level; TLS through its
    // session, split by tokio.
    let result = match upstream {
        Link::Unix(u) => match relay_socket::split(u) {
            Ok((ur, uw)) => relay(cr, cw, ur, uw, &settings).await,
            Err(e) => Err(e),
        },
        Link::Tcp(u) => match relay_socket::split_tcp(u) {
            Ok((ur, uw)) => relay(cr, cw, ur, uw, &settings).await,
            Err(e) => Err(e),
        },
        Link::Tls(u) => {
            let (ur, uw) = tokio::io::split(*u);
            relay(cr, cw, ur, uw, &settings).await
        }
    };
    match result {
        Ok(()) => log::debug!("lane {agent}: connection closed"),
        Err(e) => log::debug!("lane {agent}: connection ended: {e}"),
    }
}

/// Runs the two pumps of a connection until it ends.
async fn relay(
    cr: OwnedReadHalf,
    cw: OwnedWriteHalf,
    ur: impl AsyncRead + Unpin,
    uw: impl AsyncWrite + Unpin,
    settings: &LaneSettings,
) -> io::Result<()> {
    let permits = Semaphore::new(settings.limits.max_pipeline);
    let (tx, rx) = unbounded_channel();
    let commands = pump_commands(cr, uw, tx, &permits, settings);
    let replies = pump_replies(ur, cw, rx, &permits, settings);
    tokio::pin!(commands, replies);
    tokio::select! {
        end = &mut commands => match end {
            Ok(End::Graceful) => replies.await,
            Ok(End::Abort) => Ok(()),
            Err(e) => Err(e),
        },
        r = &mut replies => r,
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
