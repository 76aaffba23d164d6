//! The TCP ports each app's processes listen on, for `status`: what a
//! model asks first of a dev server it started. Read from /proc as this
//! server's user can see it (the kernel's listening sockets, then the
//! descriptors of each app's process tree); an app whose processes this
//! user may not look into gets no list rather than a wrong one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;

/// The listening sockets' inodes and their ports, from /proc/net/tcp{,6}.
fn listening() -> HashMap<u64, u16> {
    let mut out = HashMap::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
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
/// listens on; a pid whose tree cannot be read is left out.
pub fn of(pids: &[u32]) -> HashMap<u32, Vec<u16>> {
    let mut out = HashMap::new();
    if pids.is_empty() {
        return out;
    }
    let listen = listening();
    for &root in pids {
        let mut ports = BTreeSet::new();
        let mut todo = vec![root];
        let mut readable = true;
        while let Some(pid) = todo.pop() {
            if listen.is_empty() {
                break;
            }
            match sockets(pid) {
                Some(s) => ports.extend(s.iter().filter_map(|i| listen.get(i))),
                None if pid == root => readable = false,
                None => {}
            }
            todo.extend(children(pid));
        }
        if readable {
            out.insert(root, ports.into_iter().collect());
        }
    }
    out
}
