//! An optional `perf` profile of the proxy during the runs through it.
//!
//! With `OXIDEPM_BENCH_PERF=<dir>` in the environment, every
//! redis-benchmark run through the proxy is recorded with
//! `perf record -e cpu-clock -g -p <proxy pid>` into `<dir>/<n>-<what>.data`
//! (cpu-clock: virtual machines often have no hardware counters). Read
//! them with `perf report -i <file> --no-children`.

use oxidepm_sys::signal::{kill, Signal};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable naming the directory for the profiles.
pub const ENV: &str = "OXIDEPM_BENCH_PERF";

static RECORDED: AtomicUsize = AtomicUsize::new(0);

/// A `perf record` running; stopped (SIGINT, so it writes its file) and
/// waited for on drop.
pub struct Recording {
    child: Child,
    file: PathBuf,
}

/// Starts recording `pid` when [`ENV`] asks for it; `what` names the file.
pub fn start(pid: Option<u32>, what: &str) -> Option<Recording> {
    let dir = PathBuf::from(std::env::var_os(ENV)?);
    let pid = pid?;
    if let Err(e) = std::fs::create_dir_all(&dir) {
        say!("  perf: cannot create {}: {e}", dir.display());
        return None;
    }
    let n = RECORDED.fetch_add(1, Ordering::Relaxed);
    let name: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let file = dir.join(format!("{n:02}-{name}.data"));
    let child = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-g", "-p"])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn();
    match child {
        Ok(child) => {
            // perf attaches to the process after it starts: give it a
            // moment, or the run's beginning goes unrecorded.
            std::thread::sleep(std::time::Duration::from_millis(300));
            Some(Recording { child, file })
        }
        Err(e) => {
            say!("  perf: cannot run perf record: {e}");
            None
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = kill(self.child.id(), Signal::SIGINT);
        match self.child.wait() {
            Ok(_) => say!("  perf: {}", self.file.display()),
            Err(e) => say!("  perf: waiting for perf record: {e}"),
        }
    }
}
