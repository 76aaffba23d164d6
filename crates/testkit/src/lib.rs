//! Test support shared by oxidepm's crates, so that every test suite starts
//! the same Redis with the same ACL, speaks RESP and HTTP the same way and
//! waits the same way:
//!
//! * [`redis`] — a private redis-server whose users and rules are the ones
//!   the daemon writes, with known test passwords;
//! * [`resp`] — a small blocking RESP client;
//! * [`mod@http`] — a one-shot HTTP client, an HTTP sink and free ports;
//! * [`smtp`] — an SMTP server that keeps what it is sent;
//! * [`wait`] — polling until something holds;
//! * [`workspace_bin`] — the path of a workspace binary (built before the
//!   tests run).

// Test support: what blocks here blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

pub mod cluster;
pub mod http;
pub mod redis;
pub mod resp;
pub mod shared;
pub mod smtp;
pub mod tls;
pub mod wait;

pub use http::{free_port, http, Sink, SinkMode};
pub use redis::{agent_user, password, private_redis, Redis};
pub use resp::{bulk, ok, words, Client, Value};
pub use smtp::SmtpSink;
pub use wait::{eventually, Ready};

use std::path::{Path, PathBuf};

/// The path of binary `bin` of the workspace package `package`, in the
/// profile of the running test. `cargo test -p <one package>` builds only
/// that package's binaries, and the daemon finds the lane proxy and the
/// bridge beside itself, so tests that need another package's binary ask
/// here.
///
/// A test never runs cargo: a build inside a test waits on cargo's lock
/// and on the cores every other test is using. `./test.sh` and
/// `scripts/quick.sh` build every binary before the first test starts; a
/// binary that is not there is a clear failure that says what to build.
/// Building with `cargo build --workspace --all-targets` (or `cargo nextest
/// run --workspace`, or `cargo test --workspace`) resolves features over
/// the whole workspace, as the tests need: built for one package alone,
/// tokio, redis, hyper and what depends on them would get other features,
/// hence a second compilation of each.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    // target/<profile>/deps/<test binary> → target/<profile>/<bin>
    let me = std::env::current_exe().expect("the test's own path");
    let dir = me
        .parent()
        .and_then(Path::parent)
        .expect("a test binary lives in target/<profile>/deps");
    let path = dir.join(bin);
    let release = dir.file_name().is_some_and(|n| n == "release");
    assert!(
        path.is_file(),
        "{} (package {package}) is not built: run `cargo build --workspace --all-targets{}` \
         (or ./test.sh, or scripts/quick.sh) before this test",
        path.display(),
        if release { " --release" } else { "" }
    );
    path
}
