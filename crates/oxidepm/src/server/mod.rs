//! The daemon's sockets: binding, the accept loop with its connection caps
//! (per socket, per peer, slots kept for a person), line framing with its
//! limits, and the reply sink. Generic over a [`Handler`], which decides who
//! a connection is and answers its requests.

pub mod conn;
pub mod listener;
pub mod slots;

pub use conn::{Limits, Sink};
pub use listener::bind;
pub use slots::{Caps, Holder, PeerKey};

use oxidepm_proto::Request;
use slots::{Refusal, Slots};
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{UnixListener, UnixStream};

/// Whoever answers the connections of a socket.
pub trait Handler: Send + Sync + 'static {
    /// What is decided about a connection's peer when it is accepted.
    type Peer: Send + Sync;

    /// Decides who a new connection is, once, before its first request;
    /// `accepted` is when it was accepted, in clock ticks since boot (the
    /// unit of process start times).
    fn identify(&self, stream: &UnixStream, accepted: u64) -> Self::Peer;

    /// Whose quota a connection of `peer` counts against, and whether it
    /// may take the slots kept for persons.
    fn holder(&self, peer: &Self::Peer) -> Holder;

    /// Answers one request; an error closes the connection.
    fn handle(
        &self,
        peer: &Self::Peer,
        req: Request,
        sink: &mut Sink,
    ) -> impl Future<Output = io::Result<()>> + Send;
}

/// Accepts connections on `listener` for ever, each served by `handler`
/// under `limits`. `name` says which socket in the log.
pub async fn run<H: Handler>(
    listener: UnixListener,
    name: &'static str,
    limits: Limits,
    handler: Arc<H>,
) {
    let slots = Slots::new(limits.caps);
    let mut notices = Notices::new(name);
    let mut reserve = listener::Reserve::new();
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) if reserve.release_for(&e) => {
                log::warn!("{name} socket: out of descriptors ({e}); the reserve is used");
                continue;
            }
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                log::warn!("{name} socket: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                reserve.refill();
                continue;
            }
        };
        // Taken before the peer is identified: a process that started
        // after this cannot be the one that connected.
        let accepted = oxidepm_sys::clock::boot_ticks();
        let peer = handler.identify(&stream, accepted);
        let holder = handler.holder(&peer);
        let admitted = match slots.admit(holder.clone()) {
            Ok(a) => a,
            Err(r) => {
                notices.refused(r, &holder, &limits.caps);
                continue;
            }
        };
        if let Some(from) = &admitted.evicted {
            notices.evicted(from, &holder);
        }
        let handler = handler.clone();
        let slot = admitted.slot;
        tokio::spawn(async move {
            conn::serve(stream, peer, limits, &*handler, slot.activity.clone()).await;
            drop(slot);
        });
        reserve.refill();
    }
}

/// Says in the log when connections are refused or taken, without writing
/// one line per connection of a flood.
struct Notices {
    name: &'static str,
    last: Option<Instant>,
    quiet: u64,
}

/// At most one notice this often; the others are counted.
const NOTICE_EVERY: Duration = Duration::from_secs(10);

impl Notices {
    fn new(name: &'static str) -> Notices {
        Notices {
            name,
            last: None,
            quiet: 0,
        }
    }

    fn say(&mut self, what: std::fmt::Arguments<'_>) {
        if self.last.is_some_and(|t| t.elapsed() < NOTICE_EVERY) {
            self.quiet += 1;
            log::debug!("{} socket: {what}", self.name);
            return;
        }
        let more = match std::mem::take(&mut self.quiet) {
            0 => String::new(),
            n => format!(" ({n} more since the last notice)"),
        };
        log::warn!("{} socket: {what}{more}", self.name);
        self.last = Some(Instant::now());
    }

    fn refused(&mut self, r: Refusal, holder: &Holder, caps: &Caps) {
        match r {
            Refusal::PeerFull => self.say(format_args!(
                "closed a new connection of {}: it already holds {} (the cap per peer)",
                holder.key.0, caps.per_peer
            )),
            Refusal::SocketFull => self.say(format_args!(
                "closed a new connection of {}: all {} connections are taken and none can be given up",
                holder.key.0, caps.max_conns
            )),
        }
    }

    fn evicted(&mut self, from: &PeerKey, to: &Holder) {
        self.say(format_args!(
            "full: closed an idle connection of {} to serve {}",
            from.0, to.key.0
        ));
    }
}
