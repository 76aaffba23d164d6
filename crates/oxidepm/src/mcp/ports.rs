//! The TCP ports each app's processes listen on, for `status`: what a
//! model asks first of a dev server it started. Read from /proc as this
//! server's user can see it (the kernel's listening sockets, then the
//! descriptors of each app's process tree); an app whose processes this
//! user may not look into gets no list rather than a wrong one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;

/// The listening sockets' inodes and their ports, from /proc/net/tcp{,6}.
/// Each read of those files walks the kernel's whole TCP hash table (about
/// a millisecond on a host with much memory, however few sockets it has),
/// and a read in small pieces walks it once per piece: each is read whole,
/// in one buffer.
fn listening() -> HashMap<u64, u16> {
    use std::io::Read;
    let mut out = HashMap::new();
    let mut buf = Vec::with_capacity(256 << 10);
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        buf.clear();
        let Ok(mut f) = fs::File::open(file) else {
            continue;
        };
        if f.read_to_end(&mut buf).is_err() {
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let port = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(port), Ok(inode)) = (port, f[9].parse::<u64>()) {
                out.insert(inode, port);
            }
        }
    }
    out
}

/// The socket inodes `pid` holds open; `None` when they cannot be read.
fn sockets(pid: u32) -> Option<HashSet<u64>> {
    let dir = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| fs::read_link(e.path()).ok())
            .filter_map(|l| {
                let l = l.to_string_lossy();
                l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
            })
            .collect(),
    )
}

/// The children of `pid`, from its threads' `children` files: only the
/// apps' trees are read, never every process of the host.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// For each of `pids` (an app's main process), the ports its process tree
/// listens on; a pid whose tree cannot be read is left out. The kernel's
/// table of listening sockets is read only when some tree holds a socket.
pub fn of(pids: &[u32]) -> HashMap<u32, Vec<u16>> {
    let mut held: Vec<(u32, HashSet<u64>)> = Vec::new();
    for &root in pids {
        let mut inodes = HashSet::new();
        let mut todo = vec![root];
        let mut readable = true;
        while let Some(pid) = todo.pop() {
            match sockets(pid) {
                Some(s) => inodes.extend(s),
                None if pid == root => readable = false,
                None => {}
            }
            todo.extend(children(pid));
        }
        if readable {
            held.push((root, inodes));
        }
    }
    let listen = if held.iter().any(|(_, s)| !s.is_empty()) {
        listening()
    } else {
        HashMap::new()
    };
    held.into_iter()
        .map(|(root, inodes)| {
            let ports: BTreeSet<u16> = inodes
                .iter()
                .filter_map(|i| listen.get(i))
                .copied()
                .collect();
            (root, ports.into_iter().collect())
        })
        .collect()
}
