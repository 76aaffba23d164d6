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
//! * [`workspace_bin`] — the path of a workspace binary, built if needed.

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
pub use resp::{bulk, ok, Client, Value};
pub use smtp::SmtpSink;
pub use wait::{eventually, Ready};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of binary `bin` of the workspace package `package`, in the
/// profile of the running test, built first if needed. `cargo test` builds
/// only the binaries of the package under test, and the daemon finds the
/// lane proxy and the bridge beside itself, so tests that need them ask
/// here (the build is a no-op when they are up to date).
///
/// The build resolves features over the whole workspace, as `cargo test
/// --workspace` does: built for `package` alone, tokio, redis, hyper and
/// what depends on them would get other features, hence a second
/// compilation of each in the middle of a test run.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(p) = built.get(bin) {
        return p.clone();
    }
    // target/<profile>/deps/<test binary> → target/<profile>/<bin>
    let me = std::env::current_exe().expect("the test's own path");
    let dir = me
        .parent()
        .and_then(Path::parent)
        .expect("a test binary lives in target/<profile>/deps")
        .to_path_buf();
    let path = dir.join(bin);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-q", "--workspace", "--bin", bin]);
    if dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status();
    assert!(
        path.is_file(),
        "{} of {package} is missing and `cargo build --workspace --bin {bin}` gave {status:?}",
        path.display()
    );
    built.insert(bin.to_string(), path.clone());
    path
}
