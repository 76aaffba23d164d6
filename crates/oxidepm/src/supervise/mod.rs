//! Layer 1: supervision of apps — spawning, reaping, restart policy, logs.

pub mod app;
pub mod control;
pub mod logfile;
pub mod logshim;
pub mod policy;
pub mod procfs;
pub mod reaper;
pub mod sampler;
pub mod spawn;
pub mod supervisor;

pub use supervisor::{lock, Shared, Supervisor};
