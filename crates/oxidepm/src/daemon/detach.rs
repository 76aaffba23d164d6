//! Starting the daemon in the background.

use crate::paths::Home;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Starts `oxidepmd --foreground` detached (own session, output to
/// daemon.log), waits until it answers on its socket, and reports its pid.
pub fn detach(home: &Home, resurrect: bool) -> ExitCode {
    match spawn_detached(home, resurrect) {
        Ok(pid) => {
            println!("{pid}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oxidepmd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Spawns the daemon and waits for its socket; returns its pid.
pub fn spawn_detached(home: &Home, resurrect: bool) -> Result<u32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find oxidepmd: {e}"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.daemon_log())
        .map_err(|e| format!("cannot open {}: {e}", home.daemon_log().display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--foreground")
        .arg("--home")
        .arg(home.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    if resurrect {
        cmd.arg("--resurrect");
    }
    oxidepm_sys::exec::own_session(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if std::os::unix::net::UnixStream::connect(home.daemon_socket()).is_ok() {
            return Ok(pid);
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!(
                "the daemon exited at start ({st}); see {}",
                home.daemon_log().display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the daemon did not answer within 10 s; see {}",
                home.daemon_log().display()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
