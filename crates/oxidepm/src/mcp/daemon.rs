//! The server's way to the daemon: one connection per tool call (so calls
//! in flight never wait on each other's answers), each request naming the
//! tool it came from for its audit row.

use crate::client::{Client, ClientError};
use oxidepm_proto::{Class, Identity, Op, Via};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a call waits for the daemon before asking whether it is alive
/// (a daemon that answers a `ping` is waited for again).
const DEADLINE: Duration = Duration::from_secs(10);

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

/// The daemon behind one socket.
pub struct Daemon {
    socket: PathBuf,
    agent: bool,
    /// Set once the daemon said this process may use a non-agent socket.
    allowed: OnceLock<()>,
}

impl Daemon {
    /// The daemon at `socket` (`agent`: it is the home's agent.sock).
    pub fn new(socket: PathBuf, agent: bool) -> Daemon {
        Daemon {
            socket,
            agent,
            allowed: OnceLock::new(),
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

    /// A connection for `tool`'s requests, after the identity check.
    pub fn client(&self, tool: &str) -> Result<Client, Failure> {
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
        let via = Via::new(&format!("mcp:{tool}")).map_err(Failure::bad)?;
        self.connect(Some(via))
    }

    /// Sends `op` for `tool` and returns the daemon's answer.
    pub fn call(&self, tool: &str, op: Op) -> Result<Value, Failure> {
        self.client(tool)?.call(op).map_err(failure)
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
