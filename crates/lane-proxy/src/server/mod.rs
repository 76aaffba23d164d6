//! The listening side: one socket per lane (bound, or inherited from
//! systemd), kept in step with the configuration file.

pub mod activation;
pub mod lane_socket;
pub mod proxy;
