//! cgroup v2 primitives: where the hierarchy is mounted, which cgroup a
//! process is in, and killing, signalling and watching a cgroup.
//!
//! Membership of a cgroup is kept by the kernel across fork, `setsid` and
//! re-parenting, and only a process allowed to write the target cgroup's
//! `cgroup.procs` can move a process out, which is what makes a cgroup a
//! container that no descendant escapes. Nothing here needs a controller:
//! `cgroup.procs`, `cgroup.events` and `cgroup.kill` are core files.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// `CGROUP2_SUPER_MAGIC` of statfs(2).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Whether `path` is on a cgroup2 file system.
// `f_type` is i64 on some architectures and narrower on others.
#[allow(clippy::unnecessary_cast)]
pub fn is_cgroup2(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type as i64 == CGROUP2_SUPER_MAGIC)
}

/// Where the cgroup2 hierarchy is mounted: `/sys/fs/cgroup` on a pure v2
/// host, `/sys/fs/cgroup/unified` on a host in systemd's hybrid mode (v1
/// controllers beside it), else the first cgroup2 line of /proc/mounts.
pub fn mount_point() -> Option<PathBuf> {
    for p in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        if is_cgroup2(Path::new(p)) {
            return Some(PathBuf::from(p));
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts_cgroup2(&mounts).filter(|p| is_cgroup2(p))
}

/// The mount point of the first cgroup2 line of a /proc/mounts text.
fn mounts_cgroup2(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        // Spaces in mount points are written as \040; a cgroup mount never
        // has one, and a path that has one is not guessed at.
        (fstype == "cgroup2" && !dir.contains('\\')).then(|| PathBuf::from(dir))
    })
}

/// The cgroup2 path of a `/proc/<pid>/cgroup` text: its `0::` line, as a
/// path from the hierarchy's root (`/system.slice/x.service`).
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_string())
        .filter(|p| p.starts_with('/'))
}

/// The cgroup2 path of process `pid`; `None` when it is gone or has none.
pub fn path_of(pid: u32) -> Option<String> {
    parse_proc_cgroup(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// The cgroup2 path of this process.
pub fn own_path() -> Option<String> {
    parse_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").ok()?)
}

/// Opens `<dir>/cgroup.procs` for writing: a child that writes "0" to it
/// between fork and exec joins the cgroup (see [`crate::exec`]).
pub fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))?;
    Ok(f.into())
}

/// Opens the cgroup directory `dir`, for a child to be born in (see
/// [`crate::spawn`]) or for [`open_procs_at`].
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(dir, flags, Mode::empty())?)
}

/// Opens `cgroup.procs` in the cgroup directory `dir` (from [`open_dir`])
/// for writing, as [`open_procs`] does by path.
pub fn open_procs_at(dir: &OwnedFd) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    Ok(rustix::fs::openat(
        dir,
        "cgroup.procs",
        flags,
        Mode::empty(),
    )?)
}

/// Reads `populated` from a `cgroup.events` text.
fn parse_populated(text: &str) -> Option<bool> {
    text.lines()
        .find_map(|l| l.strip_prefix("populated "))
        .map(|v| v.trim() != "0")
}

fn read_populated(f: &File) -> io::Result<bool> {
    let mut buf = [0u8; 256];
    let n = f.read_at(&mut buf, 0)?;
    parse_populated(&String::from_utf8_lossy(&buf[..n]))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no populated line"))
}

/// Whether any process is in the cgroup `dir` or below it; false when the
/// cgroup does not exist.
pub fn populated(dir: &Path) -> bool {
    File::open(dir.join("cgroup.events"))
        .and_then(|f| read_populated(&f))
        .unwrap_or(false)
}

/// Kills every process in the cgroup `dir` and below it with SIGKILL, in
/// one step that a forking process cannot outrun (`cgroup.kill`, Linux
/// 5.14+).
pub fn kill(dir: &Path) -> io::Result<()> {
    std::fs::write(dir.join("cgroup.kill"), b"1")
}

/// Whether the kernel offers `cgroup.kill` in `dir`.
pub fn has_kill(dir: &Path) -> bool {
    dir.join("cgroup.kill").exists()
}

/// The pids in `<dir>/cgroup.procs` (not those of child cgroups).
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The child cgroups of `dir`.
pub fn children(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Whether cgroup path `path` is `dir` or inside it (both as in
/// `/proc/<pid>/cgroup`).
pub fn is_within(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path == dir || (path.starts_with(dir) && path[dir.len()..].starts_with('/'))
}

/// Sends `sig` to every process of the cgroup `dir` (the hierarchy path
/// `rel`) and of its child cgroups. Each process is pinned with a pidfd
/// and checked to be in the cgroup still before it is signalled, so a pid
/// reused after a read of `cgroup.procs` is never signalled. Returns how
/// many were.
pub fn signal_all(dir: &Path, rel: &str, sig: i32) -> usize {
    let mut n = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        dirs.extend(children(&d));
        for pid in procs(&d) {
            let Ok(fd) = crate::pidfd::open(pid) else {
                continue;
            };
            // Read after the pidfd is open: while it names a live process,
            // the pid names that same process.
            let inside = path_of(pid).is_some_and(|p| is_within(&p, rel));
            if inside && crate::pidfd::signal(&fd, sig).is_ok() {
                n += 1;
            }
        }
    }
    n
}

/// Waits until no process is left in the cgroup `dir` or below it
/// (`populated 0` in `cgroup.events`), woken by the kernel's notification
/// of that file rather than by polling. Returns at once when the cgroup
/// does not exist. Must be called within a tokio runtime.
pub async fn emptied(dir: &Path) -> io::Result<()> {
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    let f = match File::open(dir.join("cgroup.events")) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    // kernfs signals a change of the file as POLLPRI. Registered before the
    // first read, so a change after that read is never missed.
    // SAFETY: the AsyncFd takes the File by value, so the descriptor stays
    // open, and `as_raw_fd` keeps returning it, until the AsyncFd is
    // dropped (and deregistered) at the end of this function.
    let afd = unsafe { AsyncFd::register_with_interest(f, Interest::PRIORITY) }
        .map_err(|e| e.into_parts().1)?;
    loop {
        match read_populated(afd.get_ref()) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            // The cgroup was removed: nothing is left in it.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut guard = afd.ready(Interest::PRIORITY).await?;
        guard.clear_ready();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_files() {
        let text = "12:pids:/\n1:name=systemd:/x\n0::/system.slice/a b.service\n";
        assert_eq!(
            parse_proc_cgroup(text).as_deref(),
            Some("/system.slice/a b.service")
        );
        assert_eq!(parse_proc_cgroup("1:cpu:/\n"), None);
        assert_eq!(parse_populated("populated 1\nfrozen 0\n"), Some(true));
        assert_eq!(parse_populated("populated 0\nfrozen 0\n"), Some(false));
        assert_eq!(parse_populated("frozen 0\n"), None);
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            mounts_cgroup2(mounts),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(mounts_cgroup2("tmpfs / tmpfs rw 0 0\n"), None);
    }

    #[test]
    fn nesting_is_by_whole_components() {
        assert!(is_within("/a/app-1", "/a/app-1"));
        assert!(is_within("/a/app-1/run-2", "/a/app-1/"));
        assert!(!is_within("/a/app-10", "/a/app-1"));
        assert!(!is_within("/a", "/a/app-1"));
        assert!(is_within("/anything", "/"));
    }

    /// A fresh cgroup beside this process's, where cgroup2 can be written;
    /// whatever is left in it is killed and it is removed on drop.
    pub(crate) struct Scratch {
        pub(crate) dir: PathBuf,
        pub(crate) rel: String,
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = kill(&self.dir);
            for _ in 0..1000 {
                if std::fs::remove_dir(&self.dir).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }

    pub(crate) fn scratch() -> Option<Scratch> {
        // Unique per call: tests run in parallel in one process.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let rel = format!(
            "{}/oxidepm-sys-test-{}-{}",
            own_path()?.trim_end_matches('/'),
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let dir = PathBuf::from(format!("{}{rel}", mount_point()?.display()));
        match std::fs::create_dir(&dir) {
            Ok(()) if has_kill(&dir) => Some(Scratch { dir, rel }),
            Ok(()) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
            Err(e) => {
                eprintln!("skipped: no writable cgroup2 hierarchy here ({e})");
                None
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_child_joins_and_its_fork_cannot_leave() {
        let Some(sc) = scratch() else { return };
        let (dir, rel) = (sc.dir.clone(), sc.rel.clone());
        let mut cmd = std::process::Command::new("sh");
        // The grandchild starts a session of its own.
        cmd.args(["-c", "setsid sleep 1000 & sleep 1000"]);
        crate::exec::own_session_in(&mut cmd, Some(open_procs(&dir).unwrap()), None);
        let mut child = cmd.spawn().unwrap();
        assert_eq!(path_of(child.id()).as_deref(), Some(rel.as_str()));
        let grandchild = loop {
            let found = procs(&dir).into_iter().find(|p| {
                *p != child.id()
                    && crate::procfs::stat(*p).is_some_and(|s| s.session == *p)
                    && std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| c.starts_with(b"sleep\0"))
            });
            if let Some(p) = found {
                break p;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(populated(&dir));
        assert!(signal_all(&dir, &rel, libc::SIGSTOP) >= 2);
        kill(&dir).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(20), emptied(&dir))
            .await
            .expect("emptied in time")
            .unwrap();
        child.wait().unwrap();
        assert!(!populated(&dir));
        assert!(crate::procfs::stat(grandchild).is_none_or(|s| s.state == b'Z'));
        drop(sc);
        // A cgroup that is gone is empty.
        emptied(&dir).await.unwrap();
    }

    #[test]
    fn reads_its_own() {
        if mount_point().is_some() {
            assert!(own_path().is_some());
        }
        assert!(!populated(Path::new("/nonexistent")));
    }
}
