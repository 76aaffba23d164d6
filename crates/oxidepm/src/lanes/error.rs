//! Why the lanes could not be brought up, read or changed. The daemon
//! gives each kind its wire code in `daemon/errors.rs`. The errors of the
//! lanes' modules are all here, so that this module depends on none of
//! them (every one of them depends on it).

pub use super::server::ConnectError;
use crate::supervise;
use oxidepm_lanes::{NameError, SecretError};
use oxidepm_proto::{Route, RouteError};
use std::io;

/// An error of the lanes, with what a person needs to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// redis-server is not on PATH.
    #[error(
        "agent lanes need redis-server, which is not on PATH; install it (Debian: apt-get install redis-server) or set [lanes] backend = \"off\" in daemon.toml"
    )]
    NoRedisServer,
    /// The proxy's program is not installed beside the daemon.
    #[error("oxidepm-lane-proxy is missing beside oxidepmd; reinstall oxidepm")]
    NoProxyProgram,
    /// The directories of Redis, the secrets or the sockets could not be made.
    #[error("cannot prepare the lanes' directories: {0}")]
    Dirs(#[source] io::Error),
    /// A lane password could not be read or made.
    #[error("cannot read or make lane passwords: {0}")]
    Passwords(#[source] io::Error),
    /// redis.conf or the ACL file could not be written.
    #[error("cannot write the Redis configuration: {0}")]
    RedisConf(#[source] io::Error),
    /// The proxy's configuration could not be written.
    #[error("cannot write the proxy configuration: {0}")]
    ProxyConf(#[source] io::Error),
    /// The bridge's configuration could not be written.
    #[error("cannot write the bridge configuration: {0}")]
    BridgeConf(#[source] io::Error),
    /// A source's secret the daemon makes (the webhook's bearer token)
    /// could not be made.
    #[error("cannot make the {source_name} token: {error}")]
    SourceToken {
        /// The source.
        source_name: &'static str,
        /// Why.
        #[source]
        error: io::Error,
    },
    /// The admin password cannot be read: the lanes were never set up.
    #[error("lanes are not set up: {0}")]
    NotSetUp(#[source] SecretError),
    /// The private Redis cannot be reached as a user.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A command to the private Redis failed.
    #[error("lanes: {command}: {source}")]
    Redis {
        /// The command, with its key or user.
        command: String,
        /// The failure.
        source: redis::RedisError,
    },
    /// A stored route names an agent that cannot be one.
    #[error("route {}: {source}", .route.describe())]
    RouteAgent {
        /// The route.
        route: Box<Route>,
        /// Why its agent is not a name.
        source: NameError,
    },
    /// The supervisor could not define or start a lanes app.
    #[error(transparent)]
    Supervise(#[from] supervise::Error),
    /// An agent's name cannot be a lane's.
    #[error(transparent)]
    BadName(#[from] NameError),
    /// A responder app's name cannot be a family.
    #[error(transparent)]
    ResponderName(#[from] NameRefused),
    /// An app would run as the user of one of oxidepm's own processes.
    #[error(transparent)]
    OwnUser(#[from] OwnUserTaken),
    /// A route given at runtime is malformed.
    #[error(transparent)]
    BadRoute(#[from] RouteError),
    /// A route given at runtime names a source the lanes do not have.
    #[error(
        "{family:?} is not a source of the lanes ({}); add it to [lanes] sources in daemon.toml",
        .sources.join(", ")
    )]
    UnknownSource {
        /// The source as given.
        family: String,
        /// The lanes' sources.
        sources: Vec<String>,
    },
    /// A route given at runtime matches the messages of an existing route
    /// to another agent.
    #[error(
        "{} matches the same messages as {}, which gets them; remove that route first \
         (`oxidepm route rm`, or daemon.toml for a configured one)",
        .route.describe(),
        .existing.describe()
    )]
    RouteConflict {
        /// The route given.
        route: Box<Route>,
        /// The route already there.
        existing: Box<Route>,
    },
    /// A route given at runtime names no agent.
    #[error("no agent named {agent:?}; define it first")]
    NoSuchAgent {
        /// The agent as given.
        agent: String,
    },
    /// An ops request's `request` field is not JSON.
    #[error("field `request` is not JSON: {0}")]
    RequestNotJson(#[source] serde_json::Error),
    /// An ops request is not a protocol request.
    #[error("not a request: {0}; write a field `request` with e.g. {{\"op\":\"status\"}}")]
    NotARequest(#[source] serde_json::Error),
    /// The daemon is shutting down and answers no ops request.
    #[error("the daemon is stopping")]
    DaemonStopping,
    /// The daemon did not answer an ops request.
    #[error("the daemon did not answer in time")]
    DaemonTimeout,
    /// An ops entry has a field name or value that is not UTF-8 text.
    #[error("the entry's field {field} is not UTF-8 text; write field names and values as UTF-8, e.g. a field `request` with {{\"op\":\"status\"}}")]
    EntryNotText {
        /// Which field (its position, and its name where it is text).
        field: String,
    },
    /// An ops request took longer than `ops_timeout_secs`.
    #[error("not finished within {secs} s (daemon.toml ops_timeout_secs); it may still complete: ask for `status` to see")]
    OpsTimeout {
        /// The bound.
        secs: u64,
    },
    /// An ops answer is larger than `ops_max_reply_bytes` and cannot be cut.
    #[error("the answer is {bytes} bytes, over the {max} bytes an ops reply may have (daemon.toml ops_max_reply_bytes); ask for less, or use a socket")]
    ReplyTooLarge {
        /// Its size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The shared server's admin credential cannot be used.
    #[error("lanes: {0}")]
    AdminCredential(#[source] super::server::CredentialError),
    /// Another host holds the name in the shared server's registry.
    #[error("the name {name:?} is taken on the shared Redis by host {host} (its lease ends in {secs_left} s unless that host renews it); pick another name, or, if host {host} is gone for good, free it with `oxidepm lanes release {name} --force`")]
    NameTaken {
        /// The agent or responder name.
        name: String,
        /// The host holding it.
        host: String,
        /// Seconds until its lease ends.
        secs_left: u64,
    },
    /// `lanes release --force` of a name this host holds.
    #[error("{name:?} is this host's own ({host}); delete the agent or responder instead")]
    ReleaseOwn {
        /// The name.
        name: String,
        /// This host's id.
        host: String,
    },
    /// `lanes migrate-keys` with the plain key form in force.
    #[error("the key form in force is plain: there is nothing to migrate to; set [lanes] key_form = \"tagged\" (the default with redis_url), restart the daemon, then migrate")]
    NothingToMigrate,
    /// A registry command needs `[lanes] redis_url`.
    #[error(
        "there is no registry of names without [lanes] redis_url: names are this host's alone"
    )]
    NoRegistry,
}

/// Why a responder app cannot have the name it was given.
#[derive(Debug, thiserror::Error)]
#[error("responder name {name:?} refused: {why}; choose another name")]
pub struct NameRefused {
    /// The name as given.
    pub name: String,
    /// What it collides with, or what is wrong with its shape.
    pub why: String,
}

/// An app that would run as the user of one of oxidepm's own processes.
#[derive(Debug, thiserror::Error)]
#[error(
    "{app:?} may not run as {user}: that is the user of {whose}, and {holds}; give {app:?} a \
     user of its own (`user`), or {whose} another one"
)]
pub struct OwnUserTaken {
    /// The app refused.
    pub app: String,
    /// Its user, as a person reads it.
    pub user: String,
    /// Whose user it is: "the bridge", "responder \"x\"", "agent \"y\"".
    pub whose: String,
    /// What that user holds.
    pub holds: &'static str,
}
