//! The daemon's sockets: binding, the accept loop with its connection cap,
//! line framing with its limits, and the reply sink. Generic over a
//! [`Handler`], which decides who a connection is and answers its requests.

pub mod conn;
pub mod listener;

pub use conn::{Limits, Sink};
pub use listener::bind;

use oxidepm_proto::Request;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};

/// Whoever answers the connections of a socket.
pub trait Handler: Send + Sync + 'static {
    /// What is decided about a connection's peer when it is accepted.
    type Peer: Send + Sync;

    /// Decides who a new connection is, once, before its first request;
    /// `accepted` is when it was accepted, in clock ticks since boot (the
    /// unit of process start times).
    fn identify(&self, stream: &UnixStream, accepted: u64) -> Self::Peer;

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
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                log::warn!("{name} socket: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Some(max) = limits.max_conns {
            if active.load(Ordering::Relaxed) >= max {
                log::warn!("{name} socket: {max} connections already open; closing a new one");
                drop(stream);
                continue;
            }
        }
        // Taken here, before the task that identifies the peer runs: a
        // process that started after this cannot be the one that connected.
        let accepted = oxidepm_sys::clock::boot_ticks();
        active.fetch_add(1, Ordering::Relaxed);
        let active = active.clone();
        let handler = handler.clone();
        tokio::spawn(async move {
            conn::serve(stream, accepted, limits, &*handler).await;
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
