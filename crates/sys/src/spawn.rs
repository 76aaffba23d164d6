//! Starting a program directly inside a cgroup: `clone3` with
//! `CLONE_INTO_CGROUP` (Linux 5.7+).
//!
//! A child that moves itself into a cgroup between fork and exec (see
//! [`crate::exec::own_session_in`]) makes the kernel take
//! `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace
//! period when no migration happened recently: milliseconds per spawn. A
//! child created inside the cgroup never migrates.
//!
//! The child shares this (multi-threaded) process's memory on x86-64 (as
//! with `posix_spawn`; a copy elsewhere) and only makes raw system calls
//! between `clone3` and `execve`: no allocation, no lock, and no libc
//! function that believes the parent's other threads are its own (glibc's
//! `setuid` and friends would signal them), so the credential changes are
//! made with `syscall` directly.

use crate::exec::Identity;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

mod slots;
use slots::LowSlots;

/// The kernel's `struct clone_args` (all fields are 64-bit on every
/// architecture, so one definition fits all).
#[repr(C, align(8))]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (libc's constant is a truncated `c_int`).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `CLONE_CLEAR_SIGHAND` (likewise).
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// Set once the kernel refused `clone3` into a cgroup, so that later
/// spawns go straight to the fallback.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// A program ready to be executed: its resolved path, argv, environment
/// and working directory, all as C strings made before the clone.
#[derive(Debug)]
pub struct Program {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
}

impl Program {
    /// Prepares `program` (looked up in the `PATH` of `env` when it has no
    /// `/`, as `std::process::Command` does) with `args`, exactly the
    /// environment `env`, and working directory `cwd`. A program found
    /// nowhere is `NotFound`, one found only without execute permission
    /// `PermissionDenied`, a NUL byte anywhere `InvalidInput`.
    pub fn new<A: AsRef<OsStr>>(
        program: &OsStr,
        args: &[A],
        env: &[(OsString, OsString)],
        cwd: Option<&Path>,
    ) -> io::Result<Program> {
        let search = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_else(|| "/bin:/usr/bin".into());
        let path = resolve(program, &search, cwd)?;
        let mut argv = vec![cstring(program.as_bytes())?];
        for a in args {
            argv.push(cstring(a.as_ref().as_bytes())?);
        }
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                cstring(&kv)
            })
            .collect::<io::Result<_>>()?;
        Ok(Program {
            path: cstring(path.as_os_str().as_bytes())?,
            argv,
            envp,
            cwd: cwd.map(|c| cstring(c.as_os_str().as_bytes())).transpose()?,
        })
    }
}

fn cstring(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program, argument, variable or directory contains a NUL byte",
        )
    })
}

/// Where `program` is: as given when it has a `/`, else the first file of
/// the `search` directories that is executable. A relative directory is
/// looked at from `cwd`, where the child will be when it execs.
fn resolve(program: &OsStr, search: &OsStr, cwd: Option<&Path>) -> io::Result<PathBuf> {
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "empty program name",
        ));
    }
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    let mut denied = false;
    for dir in search.as_bytes().split(|b| *b == b':') {
        // An empty entry is the working directory, as for execvp.
        let dir = if dir.is_empty() { b"." as &[u8] } else { dir };
        let candidate = Path::new(OsStr::from_bytes(dir)).join(program);
        let seen = match cwd {
            Some(c) if candidate.is_relative() => c.join(&candidate),
            _ => candidate.clone(),
        };
        match std::fs::metadata(&seen) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(candidate),
            // execvp goes on past a directory or a file it may not run,
            // and reports EACCES if nothing else is found.
            Ok(_) => denied = true,
            Err(_) => {}
        }
    }
    Err(io::Error::from(if denied {
        io::ErrorKind::PermissionDenied
    } else {
        io::ErrorKind::NotFound
    }))
}

/// What the child is given besides its program.
#[derive(Debug)]
pub struct Setup<'a> {
    /// Its standard input; `None` is `/dev/null`.
    pub stdin: Option<BorrowedFd<'a>>,
    /// Its standard output.
    pub stdout: BorrowedFd<'a>,
    /// Its standard error; `None` keeps this process's.
    pub stderr: Option<BorrowedFd<'a>>,
    /// The directory of the cgroup it is born in (opened with
    /// [`crate::cgroup::open_dir`]); `None` is this process's cgroup.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// The user it runs as; `None` keeps this process's.
    pub identity: Option<&'a Identity>,
    /// Its `oom_score_adj`; `None` keeps this process's.
    pub oom_score_adj: Option<i32>,
}

/// Starts `program` (inside the cgroup of `setup`, if any) in a session
/// of its own, and returns its pid. `Ok(None)` means this kernel (or a
/// seccomp filter) does not offer `clone3` (into a cgroup): the caller
/// then starts it the old way (joining the cgroup between fork and exec).
/// A failure in the child before its exec (no such directory, permission
/// denied, ...) is returned as the child's errno, and that child is
/// reaped here.
///
/// The child gets none of this process's descriptors but its three (and
/// the few low ones every child had, all close-on-exec): it shares the
/// descriptor table until its first step, which copies only the low part
/// of it (`close_range` with `CLOSE_RANGE_UNSHARE`), the three having
/// been moved there first. A copy of the whole table at each clone, and
/// its close at each exec, cost time in the number of descriptors the
/// daemon holds (three per app), so a start of many apps grew with the
/// square of their number.
///
/// The caller must keep any `waitpid(-1)` loop of this process from
/// running until this returns, or the failed child's pid could be reaped
/// there first and reused before it is reaped here.
pub fn spawn(program: &Program, setup: &Setup) -> io::Result<Option<u32>> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let null = std::fs::File::open("/dev/null")?;
    let stdin = setup.stdin.unwrap_or(null.as_fd());
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // Only where the parent waits for the exec (CLONE_VFORK): elsewhere
    // the slots could be given back before the child copied them.
    let low = if !cfg!(target_arch = "x86_64") || NO_UNSHARE.load(Ordering::Relaxed) {
        None
    } else {
        LowSlots::take()
    };
    let result = match low {
        Some(slots) => {
            let placed = slots.place([
                stdin,
                setup.stdout,
                setup.stderr.unwrap_or(stdio(2)),
                err_w.as_fd(),
            ]);
            let r = placed.and_then(|fds| {
                let unshare_from = slots.pool.below;
                clone_child(program, setup, fds, Some(unshare_from))
            });
            // The slots let go of the pipes before the parent reads: its
            // own write end must be the last one closed, by the exec.
            slots.give_back();
            r
        }
        None => {
            // Every descriptor the child dup2s onto 0..2 is made to sit
            // above 2 first, so no dup2 overwrites a source still to be
            // copied.
            let i = above_stdio(stdin)?;
            let o = above_stdio(setup.stdout)?;
            let e = match setup.stderr {
                Some(fd) => Some(above_stdio(fd)?),
                None => None,
            };
            // The parent must hold no write end but the one it drops after
            // the clone, or its read never sees the exec's EOF.
            let w = above_stdio(err_w.as_fd())?;
            let fds = [i.raw(), o.raw(), e.as_ref().map_or(2, Spare::raw), w.raw()];
            let r = clone_child(program, setup, fds, None);
            drop((i, o, e, w));
            r
        }
    };
    let pid = match result {
        Ok(pid) => pid,
        Err(e) => {
            return match e.raw_os_error() {
                // No clone3 (or filtered), no CLONE_INTO_CGROUP, not allowed.
                Some(libc::ENOSYS | libc::EINVAL | libc::EPERM | libc::E2BIG) => {
                    UNSUPPORTED.store(true, Ordering::Relaxed);
                    Ok(None)
                }
                _ => Err(e),
            };
        }
    };
    drop(err_w);
    match read_errno(&err_r) {
        Ok(None) => Ok(Some(pid)),
        Ok(Some(UNSHARE_FAILED)) => {
            // A kernel before 5.9: the child could not take a table of its
            // own, and did nothing else. Children copy the whole table from
            // now on.
            reap(pid);
            NO_UNSHARE.store(true, Ordering::Relaxed);
            spawn(program, setup)
        }
        Ok(Some(errno)) => {
            reap(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
        Err(e) => {
            reap(pid);
            Err(e)
        }
    }
}

/// Descriptor `n` of this process (0, 1 or 2, which are always open).
fn stdio(n: RawFd) -> BorrowedFd<'static> {
    // SAFETY: 0, 1 and 2 stay open for this process's life (the daemon
    // points them at /dev/null or its log, never closes them).
    unsafe { BorrowedFd::borrow_raw(n) }
}

/// What a child that failed to take a descriptor table of its own
/// reports instead of an errno (errnos are positive).
const UNSHARE_FAILED: i32 = -1;

/// Set once a child could not take a table of its own (`close_range`
/// without `CLOSE_RANGE_UNSHARE`: Linux before 5.9).
static NO_UNSHARE: AtomicBool = AtomicBool::new(false);

/// `CLOSE_RANGE_UNSHARE`.
const CLOSE_RANGE_UNSHARE: libc::c_uint = 1 << 1;

/// Prepares the child's data and clones it; `fds` are the sources of its
/// stdin, stdout and stderr and the error pipe's write end; with
/// `unshare_from`, the child shares this table and keeps only what is
/// below that number.
fn clone_child(
    program: &Program,
    setup: &Setup,
    fds: [RawFd; 4],
    unshare_from: Option<RawFd>,
) -> io::Result<u32> {
    let argv = pointers(&program.argv);
    let envp = pointers(&program.envp);
    let groups: Vec<libc::gid_t> = setup
        .identity
        .map(|id| id.groups.iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    let child = Child {
        path: program.path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: program.cwd.as_ref().map(|c| c.as_ptr()),
        fds: [fds[0], fds[1], fds[2]],
        ids: setup.identity.map(|id| {
            (
                groups.as_ptr(),
                groups.len(),
                id.gid.as_raw(),
                id.uid.as_raw(),
            )
        }),
        err: fds[3],
        oom: setup.oom_score_adj.map(crate::exec::decimal),
        unshare_from,
    };
    clone_and_exec(setup.cgroup.map(|c| c.as_raw_fd()), &child)
}

/// Bytes of the stack a child cloned with `CLONE_VM` runs on until its
/// exec (the steps before it are a few system calls).
#[cfg(target_arch = "x86_64")]
const CHILD_STACK: usize = 64 * 1024;

/// Clones a child (into the cgroup `cgroup`) that runs `child.exec()`, and
/// returns its pid (the kernel's errno when the clone failed).
///
/// On x86-64 the child shares this address space (`CLONE_VM`) and runs on
/// a stack of its own until its exec, while this thread waits
/// (`CLONE_VFORK`), as `posix_spawn` does: no page table is copied, no
/// page of the daemon becomes copy-on-write, and the exec has no copy to
/// tear down. Elsewhere it is a copy, as with fork.
fn clone_and_exec(cgroup: Option<RawFd>, child: &Child) -> io::Result<u32> {
    // CLEAR_SIGHAND: no handler of this process (tokio's) can run in the
    // child before it execs.
    let mut args = CloneArgs {
        flags: CLONE_CLEAR_SIGHAND,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cg) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cg as u64;
    }
    if child.unshare_from.is_some() {
        // The child's first step takes the low part of the table for
        // itself: nothing else is copied.
        args.flags |= libc::CLONE_FILES as u64;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // 16-byte units: the top of the stack is aligned as the ABI wants.
        let mut stack = vec![0u128; CHILD_STACK / 16];
        args.flags |= (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        args.stack = stack.as_mut_ptr() as u64;
        args.stack_size = CHILD_STACK as u64;
        // SAFETY: `args` is a valid clone_args of the size passed, its
        // stack is ours and outlives the child's use of it: with
        // CLONE_VFORK this thread resumes only once the child has exec'd
        // or exited. The child starts in `vm_child` on that stack (see the
        // trampoline), where it only runs `Child::exec`, which makes system
        // calls on memory the parent prepared and never returns.
        let ret = unsafe {
            oxidepm_clone3_call(
                &args,
                std::mem::size_of::<CloneArgs>(),
                vm_child,
                (child as *const Child).cast_mut().cast(),
            )
        };
        drop(stack);
        if ret < 0 {
            return Err(io::Error::from_raw_os_error(-ret as i32));
        }
        Ok(ret as u32)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: `args` is a valid clone_args of the size passed. Without
        // CLONE_VM the child gets a copy of this address space (as with
        // fork) and runs on its copy of this stack, so returning from
        // `syscall` in it is sound; it then only runs `Child::exec`, which
        // never returns.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        if ret == 0 {
            // SAFETY: this is the child just cloned; every pointer in
            // `child` points into this copy of the parent's memory.
            unsafe { child.exec() }
        }
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ret as u32)
    }
}

/// Where a child cloned with `CLONE_VM` starts, on its own stack.
#[cfg(target_arch = "x86_64")]
extern "C" fn vm_child(child: *mut libc::c_void) -> ! {
    // SAFETY: `child` is the `Child` the suspended parent passed, alive
    // until this exec's or exits.
    unsafe { (*(child as *const Child)).exec() }
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `clone3(args, size)`; in the child (on the stack `args` names)
    /// calls `f(arg)`, which must not return. Returns the child's pid, or
    /// the negated errno.
    fn oxidepm_clone3_call(
        args: *const CloneArgs,
        size: usize,
        f: extern "C" fn(*mut libc::c_void) -> !,
        arg: *mut libc::c_void,
    ) -> libc::c_long;
}

// The child of clone3 with a new stack starts at the instruction after
// `syscall` with its stack pointer at the top of that stack and every other
// register as the parent had it: the function and its argument are kept
// in callee-saved registers across the call, so the child finds them
// there, and the parent restores them before it returns.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".text",
    ".globl oxidepm_clone3_call",
    ".type oxidepm_clone3_call,@function",
    "oxidepm_clone3_call:",
    "push r12",
    "push r13",
    "mov r12, rdx",
    "mov r13, rcx",
    "mov eax, 435", // SYS_clone3
    "syscall",
    "test rax, rax",
    "jnz 2f",
    "xor ebp, ebp",
    "mov rdi, r13",
    "call r12",
    "ud2",
    "2:",
    "pop r13",
    "pop r12",
    "ret",
    ".size oxidepm_clone3_call, .-oxidepm_clone3_call",
);

/// A descriptor above 2: the one given, or a close-on-exec copy of it.
enum Spare<'a> {
    Same(BorrowedFd<'a>),
    Copy(OwnedFd),
}

impl Spare<'_> {
    fn raw(&self) -> RawFd {
        match self {
            Spare::Same(fd) => fd.as_raw_fd(),
            Spare::Copy(fd) => fd.as_raw_fd(),
        }
    }
}

/// `fd` itself when it is above 2, else a copy that is.
fn above_stdio(fd: BorrowedFd) -> io::Result<Spare> {
    if fd.as_raw_fd() > 2 {
        return Ok(Spare::Same(fd));
    }
    Ok(Spare::Copy(rustix::io::fcntl_dupfd_cloexec(fd, 3)?))
}

/// A null-terminated array of pointers to `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The errno a failed child wrote; `None` at end of file (it exec'd, and
/// the close-on-exec pipe closed).
fn read_errno(r: &OwnedFd) -> io::Result<Option<i32>> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(r, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match got {
        0 => Ok(None),
        4 => Ok(Some(i32::from_ne_bytes(buf))),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a child reported a truncated error before its exec",
        )),
    }
}

/// Waits for the failed child `pid` (it exits at once).
fn reap(pid: u32) {
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
}

/// Everything the child needs, as raw pointers and numbers into memory
/// prepared by the parent.
struct Child {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: Option<*const libc::c_char>,
    /// Sources of stdin, stdout and stderr, all above 2.
    fds: [RawFd; 3],
    /// Supplementary groups (pointer, count), group, user.
    ids: Option<(*const libc::gid_t, usize, libc::gid_t, libc::uid_t)>,
    /// Write end of the error pipe (close-on-exec).
    err: RawFd,
    /// The `oom_score_adj` to write, in decimal, and its length.
    oom: Option<([u8; 12], usize)>,
    /// Shares the parent's descriptor table until it keeps, as its own,
    /// only the descriptors below this.
    unshare_from: Option<RawFd>,
}

impl Child {
    /// Sets the child up and execs; on any failure writes errno to the
    /// error pipe and exits 127.
    ///
    /// # Safety
    /// Only in the child of `clone3`, with every pointer valid.
    unsafe fn exec(&self) -> ! {
        // SAFETY: each call is a system call on descriptors, strings and
        // arrays the parent prepared; nothing allocates or takes a lock.
        // Credentials are changed with raw system calls: glibc's wrappers
        // would try to change them in the parent's other threads too,
        // which this copy does not have.
        unsafe {
            if let Some(below) = self.unshare_from {
                // Before anything else: until then this table is the
                // parent's, and a dup2 would change the parent's 0..2.
                if libc::syscall(
                    libc::SYS_close_range,
                    below as libc::c_uint,
                    libc::c_uint::MAX,
                    CLOSE_RANGE_UNSHARE,
                ) < 0
                {
                    let bytes = UNSHARE_FAILED.to_ne_bytes();
                    libc::write(self.err, bytes.as_ptr().cast(), bytes.len());
                    libc::_exit(127)
                }
            }
            let ok = self.setup();
            if ok {
                libc::execve(self.path, self.argv, self.envp);
            }
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(self.err, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    }

    /// The steps before exec: stdio and signals as std's `Command` takes
    /// them, those of `exec::own_session_in` (session, then groups, group,
    /// user), then the working directory, as the user. False on the first
    /// failure, with errno set.
    unsafe fn setup(&self) -> bool {
        // SAFETY: see `exec`.
        unsafe {
            for (src, dst) in self.fds.iter().zip(0..) {
                if libc::dup2(*src, dst) < 0 {
                    return false;
                }
            }
            // Rust ignores SIGPIPE and an ignored signal stays ignored
            // across exec; the program gets the default, as with std.
            let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            if libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) < 0
                || libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR
            {
                return false;
            }
            if libc::setsid() < 0 {
                return false;
            }
            if let Some((digits, len)) = &self.oom {
                crate::exec::write_oom_score_adj(digits, *len);
            }
            if let Some((groups, n, gid, uid)) = self.ids {
                if libc::syscall(libc::SYS_setgroups, n, groups) < 0
                    || libc::syscall(libc::SYS_setgid, gid) < 0
                    || libc::syscall(libc::SYS_setuid, uid) < 0
                {
                    return false;
                }
            }
            // As the app's user, as systemd's WorkingDirectory=: changed
            // to as root, a directory the user cannot reach (another
            // user's home, the daemon's logs) would be the app's to read.
            if let Some(cwd) = self.cwd {
                if libc::chdir(cwd) < 0 {
                    return false;
                }
            }
            true
        }
    }
}

#[cfg(test)]
mod tests;
