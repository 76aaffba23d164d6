//! The TCP ports each app's processes listen on, for `status`: what a
//! model asks first of a dev server it started. The kernel says which
//! sockets listen (sock_diag, every call); which app's process tree holds
//! each is found by walking the trees' descriptors in /proc, as this
//! server's user can see them, and remembered until a listener or an app
//! process appears that the last walk did not see. An app whose processes
//! this user may not look into gets no list rather than a wrong one.

use oxidepm_sys::{procfs, sockdiag};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::sync::Mutex;

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

/// What the last walk found: the tree holding each listening socket
/// (`None`: no app's), and the roots it walked. A walk costs a few system
/// calls per process of every tree, most of a `status` of many apps; a
/// socket handed to another tree with no new listener is the one change
/// this misses until the next walk.
#[derive(Default)]
struct Walked {
    owner: HashMap<u64, Option<u32>>,
    roots: HashSet<u32>,
    unreadable: HashSet<u32>,
}

/// One `oxidepm mcp` serves one client: its last walk is process-wide.
static WALKED: Mutex<Option<Walked>> = Mutex::new(None);

/// The listening sockets' inodes and ports, from the kernel's dump, or
/// from /proc/net/tcp where sock_diag is not there.
fn listeners() -> HashMap<u64, u16> {
    match sockdiag::listening_tcp() {
        Ok(list) => list.into_iter().map(|l| (l.inode, l.port)).collect(),
        Err(_) => listening(),
    }
}

/// The socket inodes of the process tree below `root`; `None` when its
/// root's descriptors cannot be read.
fn tree_sockets(root: u32) -> Option<HashSet<u64>> {
    let mut inodes = HashSet::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        match procfs::socket_inodes(pid) {
            Some(s) => inodes.extend(s),
            None if pid == root => return None,
            None => {}
        }
        todo.extend(procfs::children(pid));
    }
    Some(inodes)
}

/// Walks every tree of `pids`, remembering which holds each of `listen`.
fn walk(pids: &[u32], listen: &HashMap<u64, u16>) -> Walked {
    let mut w = Walked {
        owner: listen.keys().map(|&i| (i, None)).collect(),
        ..Walked::default()
    };
    for &root in pids {
        match tree_sockets(root) {
            Some(held) => {
                for inode in held {
                    if let Some(o) = w.owner.get_mut(&inode) {
                        o.get_or_insert(root);
                    }
                }
                w.roots.insert(root);
            }
            None => {
                w.unreadable.insert(root);
            }
        }
    }
    w
}

/// For each of `pids` (an app's main process), the ports its process tree
/// listens on; a pid whose tree cannot be read is left out.
pub fn of(pids: &[u32]) -> HashMap<u32, Vec<u16>> {
    let listen = listeners();
    if listen.is_empty() {
        // Nothing listens: no tree needs a look.
        return pids.iter().map(|&p| (p, Vec::new())).collect();
    }
    let mut last = WALKED.lock().unwrap_or_else(|p| p.into_inner());
    let known = |w: &Walked| {
        listen.keys().all(|i| w.owner.contains_key(i))
            && pids
                .iter()
                .all(|p| w.roots.contains(p) || w.unreadable.contains(p))
    };
    if !last.as_ref().is_some_and(known) {
        *last = Some(walk(pids, &listen));
    }
    let Some(w) = last.as_ref() else {
        return HashMap::new();
    };
    let mut ports: HashMap<u32, BTreeSet<u16>> = pids
        .iter()
        .filter(|p| w.roots.contains(p))
        .map(|&p| (p, BTreeSet::new()))
        .collect();
    for (inode, port) in &listen {
        if let Some(Some(root)) = w.owner.get(inode) {
            if let Some(set) = ports.get_mut(root) {
                set.insert(*port);
            }
        }
    }
    ports
        .into_iter()
        .map(|(p, set)| (p, set.into_iter().collect()))
        .collect()
}
