//! Layer 3 — lanes, the daemon's side: each AI agent's private slice of the
//! message bus.
//!
//! [`admin`] runs the private Redis, provisions ACL users and the auth proxy
//! app; [`bridge_admin`] runs the bridge app and keeps its routes, as the
//! user [`bridge_user`] picks, and hands it the rules of agents consulting
//! each other ([`consult`]); [`ops`] is the ops responder, [`responders`]
//! the lanes of responder apps; [`purge`] deletes what a deleted agent's
//! lane held; [`shared_routes`] the routes every host shares on a shared
//! Redis. The proxy itself is the `oxidepm-lane-proxy`
//! crate, the bridge the `oxidepm-bridge` crate, and the vocabulary they
//! share with the daemon (names, ACL rules, secrets, configuration files)
//! the `oxidepm-lanes` crate.

pub mod admin;
pub mod bridge_admin;
pub mod bridge_user;
pub mod budgets;
mod conf_file;
pub mod consult;
pub mod error;
mod handle;
pub mod layout;
mod live;
mod login;
pub mod migrate;
pub mod ops;
pub mod own_users;
mod private_file;
mod programs;
mod proxy_admin;
pub mod purge;
pub mod registry;
mod report;
pub mod responders;
pub mod server;
pub mod settings;
mod shared;
pub mod shared_routes;
pub mod source_secret;
mod system_apps;

pub use error::Error;

#[cfg(test)]
mod tests;
