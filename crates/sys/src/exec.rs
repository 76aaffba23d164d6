//! What a child does between fork and exec: a session of its own, another
//! identity, an inherited descriptor at a fixed number.
//!
//! Each function installs a `pre_exec` hook on a `Command`. The hook runs in
//! the forked child of a possibly multi-threaded parent, so it may only make
//! async-signal-safe system calls and must not allocate: whatever it needs
//! is built before the fork and moved into it.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

pub use nix::unistd::{Gid, Uid};

/// The user a child becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// User id.
    pub uid: Uid,
    /// Primary group.
    pub gid: Gid,
    /// Supplementary groups.
    pub groups: Vec<Gid>,
}

/// Makes `cmd` start in a session (and process group) of its own.
pub fn own_session(cmd: &mut Command) {
    own_session_as(cmd, None);
}

/// Makes `cmd` start in a session of its own and, with `id`, as that user
/// (supplementary groups, then group, then user: the order in which root
/// can still drop each).
pub fn own_session_as(cmd: &mut Command, id: Option<Identity>) {
    own_session_in(cmd, None, id);
}

/// Like [`own_session_as`], and first, with `cgroup_procs` (a
/// `cgroup.procs` file opened for writing, see
/// [`crate::cgroup::open_procs`]), moves the child into that cgroup. The
/// child joins before it execs and before it drops privileges, so the
/// program's first instruction already runs inside the cgroup and the
/// write is checked against the daemon's rights, not the app user's. A
/// failed join fails the spawn: an app is never started outside its
/// cgroup.
pub fn own_session_in(cmd: &mut Command, cgroup_procs: Option<OwnedFd>, id: Option<Identity>) {
    // SAFETY: the hook only makes async-signal-safe system calls (write,
    // setsid, setgroups, setgid, setuid) and allocates nothing: the group
    // list and the descriptor were made before the fork and are only
    // borrowed here.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = &cgroup_procs {
                // "0" names the writing process itself.
                if rustix::io::write(fd, b"0")? != 1 {
                    return Err(std::io::Error::from(std::io::ErrorKind::WriteZero));
                }
            }
            nix::unistd::setsid()?;
            if let Some(id) = &id {
                nix::unistd::setgroups(&id.groups)?;
                nix::unistd::setgid(id.gid)?;
                nix::unistd::setuid(id.uid)?;
            }
            Ok(())
        });
    }
}

/// Makes `cmd` change to `dir` after the hooks installed before it (call
/// it after [`own_session_in`]): as the app's user, as systemd's
/// `WorkingDirectory=`. Changed to as root, a directory the user cannot
/// reach (another user's home, the daemon's logs) would be the app's to
/// read. Fails (before the fork) on a path with a NUL byte.
pub fn change_dir_after(cmd: &mut Command, dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: the hook makes one async-signal-safe system call on a string
    // made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chdir(dir.as_ptr()) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// `value` in decimal ASCII, and its length: what a child writes to
/// `/proc/self/oom_score_adj` without formatting after the fork.
pub(crate) fn decimal(value: i32) -> ([u8; 12], usize) {
    let mut buf = [0u8; 12];
    let text = value.to_string();
    let len = text.len().min(buf.len());
    buf[..len].copy_from_slice(&text.as_bytes()[..len]);
    (buf, len)
}

/// Writes `digits[..len]` to this process's `oom_score_adj`; a failure
/// (no /proc, a value it may not set) leaves the inherited one.
///
/// # Safety
/// Async-signal-safe: open, write and close on a static path.
pub(crate) unsafe fn write_oom_score_adj(digits: &[u8; 12], len: usize) {
    // SAFETY: three system calls on a static string and a borrowed buffer.
    unsafe {
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, digits.as_ptr().cast(), len);
            libc::close(fd);
        }
    }
}

/// Makes `cmd`'s child set its `oom_score_adj` to `value` before it execs
/// (a daemon that shields itself from the OOM killer does not pass the
/// shield on to its apps).
pub fn set_oom_score_adj(cmd: &mut Command, value: i32) {
    let (digits, len) = decimal(value);
    // SAFETY: see `write_oom_score_adj`.
    unsafe {
        cmd.pre_exec(move || {
            write_oom_score_adj(&digits, len);
            Ok(())
        });
    }
}

/// This process's `oom_score_adj`, and sets it to `value` (which a process
/// without `CAP_SYS_RESOURCE` may only raise); the value in force after.
pub fn own_oom_score_adj(value: Option<i32>) -> std::io::Result<i32> {
    const PATH: &str = "/proc/self/oom_score_adj";
    if let Some(v) = value {
        std::fs::write(PATH, v.to_string())?;
    }
    let now = std::fs::read_to_string(PATH)?;
    now.trim()
        .parse()
        .map_err(|_| std::io::Error::other(format!("{PATH} holds {now:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn run(mut cmd: Command) -> String {
        let out = cmd.stdout(Stdio::piped()).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn starts_a_session() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat /proc/$$/stat"]);
        own_session(&mut cmd);
        let s = crate::procfs::parse_stat(&run(cmd)).unwrap();
        assert_eq!(s.session, s.pid);
        assert_eq!(s.pgrp, s.pid);
    }

    #[test]
    fn becomes_the_user() {
        let me = Identity {
            uid: nix::unistd::getuid(),
            gid: nix::unistd::getgid(),
            groups: vec![nix::unistd::getgid()],
        };
        if !me.uid.is_root() {
            // Only root may set groups; the same call must then fail.
            let mut cmd = Command::new("true");
            own_session_as(&mut cmd, Some(me));
            assert!(cmd.status().is_err());
            return;
        }
        let mut cmd = Command::new("id");
        cmd.args(["-u"]);
        own_session_as(&mut cmd, Some(me));
        assert_eq!(run(cmd).trim(), "0");
    }
}
