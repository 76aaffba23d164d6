//! oxidepm's system calls, each behind a small safe function.
//!
//! This is the only crate of the workspace allowed `unsafe` code, so that the
//! places where soundness rests on a comment instead of the compiler can be
//! read in one sitting. Every `unsafe` block says why it is sound in a
//! `// SAFETY:` comment; calls that `rustix` or `nix` already offer safely
//! go through them.
//!
//! * [`cgroup`] — cgroup v2: membership, kill, watching for emptiness;
//! * [`procfs`] — `/proc/<pid>/stat`, boot id, clock ticks, page size;
//! * [`pidfd`] — process descriptors: open, liveness, waiting for exit;
//! * [`peer`] — who is on the other end of a unix socket;
//! * [`subreaper`] — adopting orphaned descendants;
//! * [`signal`] — sending, ignoring and waiting for signals;
//! * [`exec`] — what a child does between fork and exec;
//! * [`spawn`] — a child born inside a cgroup (`clone3`);
//! * [`fd`] — descriptors inherited across exec;
//! * [`fdlimit`] — the limit on open descriptors (RLIMIT_NOFILE);
//! * [`activation`] — sockets inherited from systemd (`LISTEN_FDS`);
//! * [`umask`] — a umask that lasts for a scope;
//! * [`flock`] — advisory whole-file locks;
//! * [`dir`] — files opened relative to a directory, never through a link;
//! * [`poll`] — readiness of descriptors;
//! * [`rusage`] — CPU time of this process and its children;
//! * [`clock`] — the monotonic and boot clocks;
//! * [`cnproc`] — the kernel's process events (netlink proc connector).
//! * [`sockdiag`] — the listening TCP sockets (netlink sock_diag);
//! * [`memory`] — the C allocator's arenas; the start-up's code pages handed back;
//! * [`memfd`] — a payload sent as a sealed memory file (journald's large entries);
//! * [`async_fd`] — descriptors the runtime watches for chosen readiness,
//!   read into spare room without zeroing it.

// The system calls behind safe functions: a caller on the daemon's runtime
// thread is checked where it calls them.
#![allow(clippy::disallowed_methods)]

pub mod activation;
pub mod async_fd;
pub mod cgroup;
pub mod clock;
pub mod cnproc;
pub mod dir;
pub mod exec;
pub mod fd;
pub mod fdlimit;
pub mod flock;
pub mod ids;
pub mod memfd;
pub mod memory;
pub mod peer;
pub mod pidfd;
pub mod poll;
pub mod procfs;
pub mod runtime;
pub mod rusage;
pub mod signal;
pub mod sockdiag;
pub mod spawn;
pub mod subreaper;
pub mod umask;
