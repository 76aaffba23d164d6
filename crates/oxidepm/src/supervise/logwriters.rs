//! The daemon's side of the log writers: starting them, and keeping an
//! app's pipes read whatever happens to its writer.
//!
//! The writer, not the daemon, reads an app's stdout and stderr pipes, so
//! that the app keeps logging while no daemon runs. The daemon keeps a
//! copy of both read ends and a pidfd of the writer: when the writer dies
//! (`kill -9`, a crash) while any process still holds a write end of the
//! app's pipes, a new writer is started on the same pipes with the same
//! configuration. Meanwhile the daemon's copies keep the pipes open, so the
//! app never gets SIGPIPE or EPIPE; at worst it blocks on a full pipe until
//! the new writer drains it.
//!
//! After a daemon restart, `regain` finds the writers of this home by
//! scanning `/proc` once (the writer's first argument is
//! `oxidepm_logwriter::MARKER`, its `--out` and `--err` name files in the
//! home's logs directory, it runs as the daemon's user) and takes copies of
//! their read ends with `pidfd_getfd` (the daemon, as the same user or
//! root, has ptrace access to them), so the next writer death is survived
//! too. Nothing is stored: the writers themselves are the record.
//!
//! With no daemon running, a writer that dies cannot be replaced (the app
//! then fails at its next write, as before the daemon kept copies).

use super::logshim::{ShimConfig, ERR_INPUT_FD, MARKER};
use oxidepm_sys::pidfd;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The program a writer runs: `oxidepm-logwriter` installed beside the
/// daemon, else the daemon's own program (which runs the same code).
pub fn writer_program(daemon_exe: &Path) -> PathBuf {
    daemon_exe
        .parent()
        .map(|d| d.join(oxidepm_logwriter::PROGRAM))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| daemon_exe.to_path_buf())
}

/// The descriptors that watching one writer takes, if the budget has
/// them. Taken in the order apps start (a start of many forks them on
/// several threads), so that which writers are watched at a low limit is
/// the first ones of the file, as it was with one fork at a time.
pub fn watch_share() -> Option<super::fd_budget::Share> {
    super::fd_budget::take(WATCH_FDS)
}

/// Starts a writer for `cfg` reading `out_r` (the app's stdout pipe) and
/// `err_r` (its stderr pipe), and watches it with `share` (from
/// [`watch_share`]): if it dies while the app's pipes still have a writer,
/// another is started in its place. Returns the writer's pid.
pub fn start(
    daemon_exe: &Path,
    cfg: &ShimConfig,
    out_r: OwnedFd,
    err_r: OwnedFd,
    share: Option<super::fd_budget::Share>,
) -> io::Result<u32> {
    let program = writer_program(daemon_exe);
    // The copies are a safeguard, not a condition: out of descriptors, the
    // app is started as before, with a writer nobody replaces.
    let share = share.ok_or_else(|| {
        io::Error::other("the daemon's descriptors for watching log writers are used up")
    });
    let copies = share.and_then(|s| {
        let o = out_r.try_clone()?;
        Ok((s, o, err_r.try_clone()?))
    });
    let pid = launch(&program, cfg, out_r, err_r)?;
    match copies.and_then(|c| Ok((c, pidfd::open(pid)?))) {
        Ok(((share, out, err), fd)) => watch(
            Watched {
                program,
                cfg: cfg.clone(),
                out,
                err,
                _share: share,
                _kept: Kept::new(&cfg.out_path),
            },
            pid,
            fd,
        ),
        Err(e) => log::warn!(
            "cannot watch the log writer {pid} of {} ({e}); if it dies, its app dies at its next write",
            cfg.out_path.display()
        ),
    }
    Ok(pid)
}

/// Starts the writer process itself.
fn launch(program: &Path, cfg: &ShimConfig, out_r: OwnedFd, err_r: OwnedFd) -> io::Result<u32> {
    // The stderr pipe goes in the writer's stdout slot (ERR_INPUT_FD). It
    // is cloned as the apps are (see `oxidepm_sys::spawn`): no copy of
    // the daemon's page tables, nor of its descriptors (three per app),
    // in a session of its own; the old way where clone3 is not offered.
    debug_assert_eq!(ERR_INPUT_FD, 1);
    let mut args: Vec<OsString> = vec![MARKER.into()];
    args.extend(cfg.to_args());
    let prepared = oxidepm_sys::spawn::Program::new(program.as_os_str(), &args, &[], None)?;
    let setup = oxidepm_sys::spawn::Setup {
        stdin: Some(out_r.as_fd()),
        stdout: err_r.as_fd(),
        stderr: None,
        cgroup: None,
        identity: None,
        oom_score_adj: None,
    };
    if let Some(pid) = oxidepm_sys::spawn::spawn(&prepared, &setup)? {
        return Ok(pid);
    }
    // No pre-exec hook: with an absolute program path and nothing else to
    // do between fork and exec, the standard library spawns with
    // posix_spawn. The writer starts its own session itself.
    let mut cmd = Command::new(program);
    cmd.arg(MARKER)
        .args(cfg.to_args())
        .env_clear()
        .stdin(Stdio::from(out_r))
        .stdout(Stdio::from(err_r));
    Ok(cmd.spawn()?.id())
}

/// A writer's pipes and how to start another on them.
struct Watched {
    program: PathBuf,
    cfg: ShimConfig,
    /// The daemon's copies of the read ends (close-on-exec).
    out: OwnedFd,
    err: OwnedFd,
    /// The copies' and the pidfd's share of the descriptor budget.
    _share: super::fd_budget::Share,
    /// Its entry in [`KEPT`], while it is watched.
    _kept: Kept,
}

/// The stdout log files whose app's pipes the daemon holds copies of, with
/// how many writers of each are watched (an app restarted while its old
/// processes still write has two). An app not in it dies at its next write
/// if its writer dies: `show` says so.
static KEPT: std::sync::Mutex<std::collections::BTreeMap<PathBuf, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// A watched writer's entry in [`KEPT`], removed when it is dropped.
struct Kept(PathBuf);

impl Kept {
    fn new(out_path: &Path) -> Kept {
        let mut k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        *k.entry(out_path.to_path_buf()).or_default() += 1;
        Kept(out_path.to_path_buf())
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let mut k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = k.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                k.remove(&self.0);
            }
        }
    }
}

/// Whether the pipes of the app that logs to `out_path` are kept by the
/// daemon (its writer is watched and replaced if it dies).
pub fn kept(out_path: &Path) -> bool {
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(out_path)
}

/// Descriptors held per watched writer: a pidfd and two pipe copies.
const WATCH_FDS: u64 = 3;

/// Watches writer `pid` (through `fd`) until it exits, then replaces it
/// while the app's pipes are written to.
fn watch(w: Watched, pid: u32, fd: OwnedFd) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        // Outside the daemon's runtime (a tool, a test): nothing to watch with.
        return;
    };
    rt.spawn(async move {
        let (mut pid, mut fd) = (pid, fd);
        loop {
            if let Err(e) = pidfd::exited(fd).await {
                log::warn!("cannot watch the log writer {pid} ({e}); it will not be replaced");
                return;
            }
            loop {
                // Every write end closed: the app and all its processes
                // are gone, and the writer ended at EOF (or died with them).
                if oxidepm_sys::poll::hung_up(&w.out) && oxidepm_sys::poll::hung_up(&w.err) {
                    return;
                }
                match relaunch(&w) {
                    Ok((new_pid, new_fd)) => {
                        log::warn!(
                            "the log writer {pid} of {} died while its app runs; started {new_pid} on the same pipes",
                            w.cfg.out_path.display()
                        );
                        (pid, fd) = (new_pid, new_fd);
                        break;
                    }
                    Err(e) => {
                        // The copies stay open meanwhile: the app blocks
                        // on a full pipe at worst, and never dies of it.
                        log::error!(
                            "cannot replace the log writer of {}: {e}; retrying in a second",
                            w.cfg.out_path.display()
                        );
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        }
    });
}

/// Starts another writer on the watched pipes.
fn relaunch(w: &Watched) -> io::Result<(u32, OwnedFd)> {
    let pid = launch(&w.program, &w.cfg, w.out.try_clone()?, w.err.try_clone()?)?;
    Ok((pid, pidfd::open(pid)?))
}

/// Finds the live writers of the logs in `logs_dir` (started by an earlier
/// daemon) and watches them as `start` does, with copies of their read
/// ends taken from them. Returns how many were regained.
pub fn regain(logs_dir: &Path, daemon_exe: &Path) -> usize {
    let program = writer_program(daemon_exe);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut regained = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Some(cfg) = writer_config(pid, logs_dir, me) else {
            continue;
        };
        let Some(share) = super::fd_budget::take(WATCH_FDS) else {
            log::warn!(
                "descriptors are short: the log writer {pid} and later ones are not watched; if one dies, its app dies at its next write"
            );
            break;
        };
        match take_pipes(pid, logs_dir, me, &cfg) {
            Ok(Some((fd, out, err))) => {
                let w = Watched {
                    program: program.clone(),
                    _kept: Kept::new(&cfg.out_path),
                    cfg,
                    out,
                    err,
                    _share: share,
                };
                watch(w, pid, fd);
                regained += 1;
            }
            Ok(None) => {}
            Err(e) => log::warn!(
                "cannot take over the pipes of the log writer {pid} ({e}); if it dies, its app dies at its next write"
            ),
        }
    }
    regained
}

/// The configuration of process `pid` if it is a writer of `logs_dir`
/// running as user `uid`.
fn writer_config(pid: u32, logs_dir: &Path, uid: u32) -> Option<ShimConfig> {
    let meta = std::fs::metadata(format!("/proc/{pid}")).ok()?;
    if meta.uid() != uid {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<OsString> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(a).to_os_string())
        .collect();
    if argv.get(1).is_none_or(|a| a != MARKER) {
        return None;
    }
    let cfg = ShimConfig::from_args(&argv[2..]).ok()?;
    let ours = |p: &Path| p.parent() == Some(logs_dir);
    (ours(&cfg.out_path) && ours(&cfg.err_path)).then_some(cfg)
}

/// A pidfd of writer `pid` and copies of its two read ends; None when the
/// pid no longer names the writer that was found.
fn take_pipes(
    pid: u32,
    logs_dir: &Path,
    uid: u32,
    cfg: &ShimConfig,
) -> io::Result<Option<(OwnedFd, OwnedFd, OwnedFd)>> {
    let fd = pidfd::open(pid)?;
    // Looked at again with the pidfd held: a pid reused in between is
    // never taken for the writer.
    if writer_config(pid, logs_dir, uid).as_ref() != Some(cfg) {
        return Ok(None);
    }
    let out = pidfd::get_fd(&fd, 0)?;
    let err = pidfd::get_fd(&fd, ERR_INPUT_FD)?;
    for (name, p) in [("stdout", &out), ("stderr", &err)] {
        let meta = std::fs::File::from(p.try_clone()?).metadata()?;
        if !meta.file_type().is_fifo() {
            return Err(io::Error::other(format!("its {name} input is not a pipe")));
        }
    }
    Ok(Some((fd, out, err)))
}
