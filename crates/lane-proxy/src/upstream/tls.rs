//! TLS to the lanes' Redis: the one strict rule of `oxidepm-lanes-net` (a
//! CA file must hold a usable certificate; empty system roots are refused),
//! as the daemon and the bridge have it.

pub use oxidepm_lanes_net::tls::{client_config, handshake, TlsError};
