//! Routes of the bridge as requests and daemon.toml carry them: which agent
//! gets a message from outside. The type is the bridge's own, so a route is
//! one shape everywhere; here its agent is a name not yet checked (the
//! daemon checks it, and says why one is not an agent in its own words).

pub use oxidepm_lanes::bridge_routes::RouteError;

/// One route, its agent as given.
pub type Route = oxidepm_lanes::bridge_routes::Route<String>;
