//! Layer 1: supervision of apps — spawning, reaping, restart policy, logs.

pub mod app;
pub mod arming;
pub mod automation;
pub mod cgroup;
pub mod control;
pub mod define;
pub mod deps;
mod error;
pub mod fd_budget;
pub mod health;
pub mod launchable;
pub mod lifecycle;
pub mod logfile;
pub mod logshim;
pub mod logwriters;
pub mod marker;
pub mod oom;
pub mod policy;
pub mod procfs;
pub mod program;
pub mod reaper;
pub mod recovery;
pub mod restart_queue;
pub mod restarts;
pub mod sampler;
pub mod snapshot;
pub mod spawn;
pub mod supervisor;
pub mod validate;
pub mod verbs;
pub mod watch;

pub use error::{Error, SelectError};
pub use supervisor::{lock, Shared, Supervisor};
