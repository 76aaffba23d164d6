//! The server's way to the daemon: a connection per tool call in flight (so
//! calls never wait on each other's answers), each request naming the tool
//! it came from for its audit row.
//!
//! The daemon caps the connections one process holds on agent.sock (8 by
//! default, `agent_max_connections_per_peer`): past the cap it closes new
//! ones. So every connection, a call's or a subscription's stream, is held
//! under one of [`CONNECTIONS`] leases, and a call's connection is kept for
//! the next call instead of closed: a closed one is counted by the daemon
//! until it has seen the close, and opening the next at once could pass
//! the cap.

use crate::client::{Client, ClientError};
use oxidepm_proto::{Class, Identity, Op, Via};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a call waits for the daemon before asking whether it is alive
/// (a daemon that answers a `ping` is waited for again).
const DEADLINE: Duration = Duration::from_secs(10);
/// Connections to the daemon open at once: agent.sock's default cap per
/// process.
pub const CONNECTIONS: usize = 8;
/// Of those, the most a session's subscriptions hold: a call always has
/// the others.
pub const STREAMS: usize = CONNECTIONS - 2;
/// A kept connection idle this long is closed rather than used again:
/// well under agent.sock's idle timeout, so that the daemon does not close
/// it as a request goes out.
const KEEP_IDLE: Duration = Duration::from_secs(10);

/// A daemon error as a tool shows it: the stable code and the message.
#[derive(Debug, Clone)]
pub struct Failure {
    /// `E_POLICY_DENIED`, `E_NOT_FOUND`, … or `E_UNAVAILABLE` when the
    /// daemon could not be reached.
    pub code: String,
    /// What went wrong and what to do, as the CLI says it.
    pub message: String,
}

impl Failure {
    /// As the structured part of a tool error.
    pub fn to_json(&self) -> Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }

    /// A failure found by this server (bad arguments).
    pub fn bad(message: impl Into<String>) -> Failure {
        Failure {
            code: "E_BAD_REQUEST".into(),
            message: message.into(),
        }
    }
}

/// Why the server will not speak for this process on a person's socket.
pub enum Refusal {
    /// The process is in an agent's or an AI-defined app's tree.
    Tree(String),
    /// The daemon could not be asked.
    Unreachable(Failure),
}

/// A subscription's leases: on the streams' share and on connections.
pub struct Leases {
    _streams: OwnedSemaphorePermit,
    _calls: OwnedSemaphorePermit,
}

/// The daemon behind one socket.
pub struct Daemon {
    socket: PathBuf,
    agent: bool,
    /// Set once the daemon said this process may use a non-agent socket.
    allowed: OnceLock<()>,
    /// One per connection that may be open.
    leases: Arc<Semaphore>,
    /// One per connection a subscription may hold.
    streams: Arc<Semaphore>,
    /// Connections of finished calls, kept for the next.
    idle: Mutex<Vec<(Client, Instant)>>,
}

impl Daemon {
    /// The daemon at `socket` (`agent`: it is the home's agent.sock).
    pub fn new(socket: PathBuf, agent: bool) -> Daemon {
        Daemon {
            socket,
            agent,
            allowed: OnceLock::new(),
            leases: Arc::new(Semaphore::new(CONNECTIONS)),
            streams: Arc::new(Semaphore::new(STREAMS)),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// On any socket but agent.sock: refuses when the daemon counts this
    /// process as anything but a person, which is what it does inside an
    /// agent's tree or an app an AI defined. Asked of the daemon, not of
    /// the path: a symlink or another path to daemon.sock is the same
    /// socket.
    pub fn check_identity(&self) -> Result<(), Refusal> {
        if self.agent || self.allowed.get().is_some() {
            return Ok(());
        }
        let who: Identity = self
            .connect(None)
            .and_then(|mut c| c.call_as(Op::Whoami).map_err(failure))
            .map_err(Refusal::Unreachable)?;
        if who.class != Class::Human {
            return Err(Refusal::Tree(format!(
                "refusing --socket {}: the daemon counts this process as {} (it runs in an agent's \
                 tree or in an app an AI or adapter defined), so it cannot serve a person's rights; \
                 run `oxidepm mcp` without --socket (agent.sock), or from a terminal of your own",
                self.socket.display(),
                who.actor
            )));
        }
        let _ = self.allowed.set(());
        Ok(())
    }

    fn connect(&self, via: Option<Via>) -> Result<Client, Failure> {
        let claim = std::env::var("OXIDEPM_ACTOR")
            .ok()
            .filter(|c| !c.is_empty());
        let mut c = Client::connect(&self.socket, claim, Some(DEADLINE)).map_err(|e| Failure {
            code: "E_UNAVAILABLE".into(),
            message: format!(
                "no daemon answers on {}: {e}; a person can start it with `oxidepm ping` \
                 (this server never starts one unless run with --start-daemon)",
                self.socket.display()
            ),
        })?;
        let me = nix::unistd::geteuid().as_raw();
        if !matches!(c.peer_uid(), Some(uid) if uid == me || uid == 0) {
            return Err(Failure {
                code: "E_UNAVAILABLE".into(),
                message: format!(
                    "the daemon on {} runs as another user: refusing to send it anything",
                    self.socket.display()
                ),
            });
        }
        c.set_via(via);
        Ok(c)
    }

    /// A connection for `tool`'s requests: a kept one still open, or a new
    /// one after the identity check. Call it under a lease.
    pub fn client(&self, tool: &str) -> Result<Client, Failure> {
        let via = Via::new(&format!("mcp:{tool}")).map_err(Failure::bad)?;
        loop {
            let kept = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match kept {
                Some((mut c, since)) if since.elapsed() < KEEP_IDLE && c.reusable() => {
                    c.set_via(Some(via));
                    return Ok(c);
                }
                Some(_) => continue,
                None => return self.open(via),
            }
        }
    }

    /// Keeps `c`, whose last answer was read whole, for the next call.
    pub fn give_back(&self, c: Client) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < CONNECTIONS {
            idle.push((c, Instant::now()));
        }
    }

    /// Waits for a lease on a connection; it ends when the permit drops.
    pub async fn lease(&self) -> OwnedSemaphorePermit {
        self.leases
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// `n` leases for a subscription's streams, which hold them until it
    /// ends: refused at once past [`STREAMS`] (the rest are the calls'),
    /// else waited for while calls hold them.
    pub async fn stream_leases(&self, n: u32) -> Result<Leases, Failure> {
        let streams = self
            .streams
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| Failure {
                code: "E_LIMIT".into(),
                message: format!(
                    "subscriptions hold {STREAMS} connections to the daemon at most (an app's log \
                 takes 2, the events 1) and this session's hold them: unsubscribe from one first"
                ),
            })?;
        let calls = self
            .leases
            .clone()
            .acquire_many_owned(n)
            .await
            .expect("the semaphore is never closed");
        Ok(Leases {
            _streams: streams,
            _calls: calls,
        })
    }

    fn open(&self, via: Via) -> Result<Client, Failure> {
        match self.check_identity() {
            Ok(()) => {}
            Err(Refusal::Tree(m)) => {
                return Err(Failure {
                    code: "E_POLICY_DENIED".into(),
                    message: m,
                })
            }
            Err(Refusal::Unreachable(f)) => return Err(f),
        }
        self.connect(Some(via))
    }

    /// Sends `op` for `tool` and returns the daemon's answer. Call it
    /// under a lease.
    pub fn call(&self, tool: &str, op: Op) -> Result<Value, Failure> {
        let mut c = self.client(tool)?;
        let answer = c.call(op);
        if matches!(answer, Ok(_) | Err(ClientError::Daemon(_))) {
            self.give_back(c);
        }
        answer.map_err(failure)
    }

    /// Runs blocking daemon work under a lease, off the runtime's thread.
    pub async fn leased<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Daemon) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let lease = self.lease().await;
        let daemon = self.clone();
        blocking(move || {
            let _lease = lease;
            f(&daemon)
        })
        .await
    }
}

/// A client error as a tool failure.
pub fn failure(e: ClientError) -> Failure {
    match e {
        ClientError::Daemon(body) => Failure {
            code: body.code.as_str().to_string(),
            message: body.message,
        },
        ClientError::Closed | ClientError::Cut => Failure {
            code: "E_UNAVAILABLE".into(),
            message: "the daemon closed the connection before it answered (it stopped or \
                      restarted); nothing is known of the request's effect: check with `status`, \
                      then ask again"
                .into(),
        },
        other => Failure {
            code: "E_UNAVAILABLE".into(),
            message: other.to_string(),
        },
    }
}

/// Runs blocking daemon work off the runtime's thread.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(Failure {
            code: "E_INTERNAL".into(),
            message: format!("the call failed inside the MCP server: {e}"),
        })
    })
}
