//! One client connection: its set-up, its two pumps (client → Redis and
//! Redis → client) and the state a connection keeps between commands.

pub mod answer;
pub mod batch;
pub mod commands;
pub mod handler;
pub mod relay_socket;
pub mod replies;
pub mod reply_scanner;
pub mod serve;
pub mod slot;
pub mod transaction;
pub mod upstream_write;
