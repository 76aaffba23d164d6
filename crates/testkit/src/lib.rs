//! Test support shared by oxidepm's crates: a private redis-server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts redis-server in `dir` with `acl` as its ACL file, listening on
/// `dir/redis.sock` only, and waits until it accepts connections.
pub fn private_redis(dir: &Path, acl: &str) -> (Child, PathBuf) {
    let socket = dir.join("redis.sock");
    std::fs::write(dir.join("users.acl"), acl).unwrap();
    let conf = format!(
        "port 0\nunixsocket {sock}\nunixsocketperm 700\naclfile {dir}/users.acl\n\
         dir {dir}\nsave \"\"\nappendonly no\ndaemonize no\nlogfile {dir}/redis.log\n",
        sock = socket.display(),
        dir = dir.display()
    );
    let conf_path = dir.join("redis.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new("redis-server")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (Debian: redis-server)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server did not start: {}",
            std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, socket)
}

/// The path of binary `bin` of the workspace package `package`, in the
/// profile of the running test, built first if needed. `cargo test` builds
/// only the binaries of the package under test, and the daemon finds the
/// lane proxy and the bridge beside itself, so tests that need them ask
/// here (the build is a no-op when they are up to date).
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
    build.args(["build", "-q", "-p", package, "--bin", bin]);
    if dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status();
    assert!(
        path.is_file(),
        "{} is missing and `cargo build -p {package} --bin {bin}` gave {status:?}",
        path.display()
    );
    built.insert(bin.to_string(), path.clone());
    path
}
