//! Reading processes from /proc: identity (pid + start time + boot id),
//! parentage, sessions, and resource use.

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;

/// The fields of `/proc/<pid>/stat` that oxidepm uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: u32,
    /// One-letter state (R, S, Z, ...).
    pub state: u8,
    /// Parent pid.
    pub ppid: u32,
    /// Process group.
    pub pgrp: u32,
    /// Session id.
    pub session: u32,
    /// User CPU time in clock ticks.
    pub utime: u64,
    /// System CPU time in clock ticks.
    pub stime: u64,
    /// User CPU time of waited-for children in clock ticks.
    pub cutime: u64,
    /// System CPU time of waited-for children in clock ticks.
    pub cstime: u64,
    /// Start time in clock ticks since boot: with the boot id, it tells a
    /// process apart from a later one that got the same pid.
    pub start_ticks: u64,
    /// Resident set size in pages.
    pub rss_pages: u64,
}

impl ProcStat {
    /// A sleeping process with these ids and start time and no CPU or
    /// memory used, as a scan could see it (for tests and tools that build
    /// process tables).
    pub fn sleeping(pid: u32, ppid: u32, pgrp: u32, session: u32, start_ticks: u64) -> ProcStat {
        ProcStat {
            pid,
            state: b'S',
            ppid,
            pgrp,
            session,
            utime: 0,
            stime: 0,
            cutime: 0,
            cstime: 0,
            start_ticks,
            rss_pages: 0,
        }
    }

    /// User + system CPU time in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist.
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of a `/proc/<pid>/stat` file.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name is in parentheses and may itself contain ") ", so
    // fields are counted from the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    // rest[0] is field 3 (state) of proc(5).
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        pid,
        state: *rest.first()?.as_bytes().first()?,
        ppid: field(4)? as u32,
        pgrp: field(5)? as u32,
        session: field(6)? as u32,
        utime: field(14)?,
        stime: field(15)?,
        cutime: field(16)?,
        cstime: field(17)?,
        start_ticks: field(22)?,
        rss_pages: field(24)?,
    })
}

/// Every process currently visible in /proc.
pub fn all() -> Vec<ProcStat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: u32 = name.to_str()?.parse().ok()?;
        stat(pid)
    })
    .collect()
}

/// The entries of a /proc directory, with the directory open so that each
/// is reached from its descriptor: a path from the root is looked up again,
/// component by component, for every entry, which is most of the cost of
/// walking many processes' descriptors.
fn entries(path: &str) -> Option<(OwnedFd, Vec<CString>)> {
    use rustix::fs::{openat, Dir, Mode, OFlags, CWD};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = openat(CWD, path, flags, Mode::empty()).ok()?;
    let names = Dir::read_from(&fd)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    Some((fd, names))
}

/// The inodes of the sockets `pid` holds open (`socket:[N]` descriptors);
/// `None` when its descriptors cannot be read (gone, or not this user's).
pub fn socket_inodes(pid: u32) -> Option<Vec<u64>> {
    let (dir, fds) = entries(&format!("/proc/{pid}/fd"))?;
    Some(
        fds.iter()
            .filter_map(|fd| rustix::fs::readlinkat(&dir, fd.as_c_str(), Vec::new()).ok())
            .filter_map(|link| {
                let link = link.to_str().ok()?;
                link.strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse()
                    .ok()
            })
            .collect(),
    )
}

/// The children of `pid`, from each of its threads' `children` file.
pub fn children(pid: u32) -> Vec<u32> {
    use rustix::fs::{openat, Mode, OFlags};
    let Some((dir, tasks)) = entries(&format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut text = String::new();
    for task in tasks {
        let mut path = task.into_bytes();
        path.extend_from_slice(b"/children");
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if let Ok(fd) = openat(&dir, path.as_slice(), flags, Mode::empty()) {
            let _ = fs::File::from(fd).read_to_string(&mut text);
            text.push(' ');
        }
    }
    text.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The kernel's boot id (changes at every boot).
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Clock ticks per second (USER_HZ), the unit of the stat times.
pub fn ticks_per_second() -> u64 {
    match rustix::param::clock_ticks_per_second() {
        0 => 100,
        t => t,
    }
}

/// Page size in bytes, the unit of `rss_pages`.
pub fn page_size() -> u64 {
    match rustix::param::page_size() {
        0 => 4096,
        p => p as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parens() {
        let s = "123 (a) b) S 1 123 123 0 -1 4194560 100 0 0 0 5 6 7 8 20 0 1 0 777 1000 33 18446744073709551615";
        let p = parse_stat(s).unwrap();
        assert_eq!(p.pid, 123);
        assert_eq!(p.state, b'S');
        assert_eq!(p.ppid, 1);
        assert_eq!(p.session, 123);
        assert_eq!((p.utime, p.stime, p.cutime, p.cstime), (5, 6, 7, 8));
        assert_eq!(p.cpu_ticks(), 11);
        assert_eq!(p.start_ticks, 777);
        assert_eq!(p.rss_pages, 33);
    }

    #[test]
    fn reads_self() {
        let me = std::process::id();
        let s = stat(me).unwrap();
        assert_eq!(s.pid, me);
        assert_eq!(s.ppid, std::os::unix::process::parent_id());
        assert!(all().iter().any(|p| p.pid == me));
        assert!(!boot_id().is_empty());
        assert!(ticks_per_second() > 0);
        assert!(page_size() >= 4096);
    }
}
