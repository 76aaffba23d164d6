//! Test support shared by the lanes' tests: a private redis-server.

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
