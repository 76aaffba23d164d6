//! Wire types shared by every oxidepm client and the daemon.
//!
//! The protocol is JSON lines over unix stream sockets: one [`Request`] per
//! line, answered by one [`Response`] per line. A streamed answer (such as
//! `logs --follow`) is a sequence of [`Response`]s carrying `stream` items,
//! ending with one that carries `ok`. What `result` holds for each
//! operation is in [`reply`]. This crate does no I/O so that any client
//! can reuse it.

pub mod actor;
pub mod app;
pub mod change;
pub mod import;
pub mod record;
pub mod reply;
pub mod report;
pub mod route;
pub mod stream;
pub mod verbs;
pub mod wire;

pub use actor::{Actor, Class, Tier};
pub use app::LogTarget;
pub use app::WATCH_ALWAYS_IGNORED;
pub use app::{
    check_app_name, AppInfo, AppKind, AppSpec, Dependency, DependencyCondition, HealthProbe,
    HealthSpec, HealthState, RestartPolicy, Status, Waiting, WatchSpec,
};
pub use app::{MAX_LOG_KEEP, MAX_WATCH_DELAY_MS, MAX_WATCH_ENTRIES, MIN_LOG_ROTATE_BYTES};
pub use change::{spec_changes, SpecChange};
pub use import::Imported;
pub use record::{AuditRecord, EventKind, EventRecord, LogLine, LogStream, EVENT_KINDS};
pub use reply::{
    Action, AppAction, Defined, Flushed, Identity, KeysMigrated, Killed, LogsDone, NameReleased,
    Pong, Reply, RouteAdded, RouteRemoved, Saved, Stopped,
};
pub use reply::{ConfigReloaded, NotApplied};
pub use report::{
    AgentLaneReport, BridgeCounters, Counters, LanesReport, RouteOrigin, RouteReport, RoutesReport,
    StreamReport,
};
pub use report::{ConsultRuleReport, ResponderLaneReport, SourceReport};
pub use report::{LanesMemory, NameLease, SharedLanesReport};
pub use route::{Route, RouteError};
pub use stream::{Streamed, Subscribed, REFUSAL_KIND};
pub use verbs::{
    instance_name, instance_of, instance_spec, ReloadHow, Reloaded, ResetDone, Signalled,
    INSTANCE_VAR, MAX_INSTANCES,
};
pub use wire::{ErrorBody, ErrorCode, Op, Request, Response, SignalName, Via};

/// Largest request line on `agent.sock` (and any socket but `daemon.sock`).
pub const MAX_LINE: usize = 1 << 20;

/// The longest request line on `daemon.sock` (a person's socket, 0600):
/// an app file of tens of thousands of apps is one `define`, all or
/// nothing, as pm2 and supervisord take a file of any size.
pub const MAX_DAEMON_LINE: usize = 16 << 20;

/// Protocol version, bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;
