//! Where a lane's Redis is, and opening an authenticated connection to it:
//! the private server's unix socket, one server over TCP or TLS, the
//! primary the sentinels name, or the cluster node serving the lane's
//! slot. One `Route` serves every lane of the proxy, so what it learns
//! (the sentinels' answer, the cluster's slots) is asked once and shared.
//!
//! What is learnt is kept until it fails: a connection that cannot be
//! opened, or a server that answers `-MOVED`/`-READONLY`/… on a relayed
//! connection ([`Route::moved`]), makes the next connection ask again.

use crate::upstream::auth::authenticate;
use crate::upstream::cluster_map::{self, Moved, SlotRange};
use crate::upstream::exchange::Exchange;
use crate::upstream::link::Link;
use crate::upstream::reply::Reply;
use crate::upstream::tls::{self, TlsError};
use crate::upstream::{dial, sentinel};
use oxidepm_lanes::redis_url::{HostPort, Topology};
use oxidepm_lanes::{AclUser, AgentName, Dir, ProxyConfig, RedisUrl, Secret, StreamKey, TlsFiles};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use tokio::net::UnixStream;

/// The lane a user's connections belong to: its slot on a cluster.
pub fn lane_of(user: &AclUser) -> String {
    match user {
        AclUser::Agent(a) => a.to_string(),
        AclUser::Responder(r) => r.clone(),
        other => other.to_string(),
    }
}

/// The way to the lanes' Redis, shared by every lane.
pub struct Route {
    url: RedisUrl,
    files: TlsFiles,
    tls: Option<Arc<rustls::ClientConfig>>,
    known: Mutex<Known>,
}

/// What was learnt of the topology.
#[derive(Debug, Default)]
struct Known {
    /// The primary the sentinels named.
    primary: Option<HostPort>,
    /// The cluster's slots, from `CLUSTER SLOTS`.
    ranges: Vec<SlotRange>,
    /// Slots learnt from `-MOVED` (or a probe), over `ranges`.
    slots: HashMap<u16, HostPort>,
    /// `CLUSTER SLOTS` was refused to the lanes' users (agents' rules
    /// need not grant it): asked no more, so that a server's ACL LOG
    /// shows one refusal, not one per connection.
    no_slots: bool,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("url", &self.url.to_string())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Route {
    /// The route to `url`, with `files` for TLS.
    pub fn new(url: &RedisUrl, files: &TlsFiles) -> Result<Route, TlsError> {
        let tls = if url.tls {
            Some(tls::client_config(files)?)
        } else {
            None
        };
        Ok(Route {
            url: url.clone(),
            files: files.clone(),
            tls,
            known: Mutex::new(Known::default()),
        })
    }

    /// Whether this route is the one for `url` and `files` (kept across a
    /// reload then, with what it learnt).
    pub fn is_for(&self, url: &RedisUrl, files: &TlsFiles) -> bool {
        self.url == *url && self.files == *files
    }

    /// Whether the server is the private one, on a unix socket: nothing
    /// can move then, and replies are not watched for redirections.
    pub fn is_unix(&self) -> bool {
        self.url.unix_path().is_some()
    }

    /// Whether the server is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.url.is_cluster()
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a connection for the lane `lane` and authenticates it as
    /// `user`. A failure on a learnt address forgets it and asks again once.
    pub async fn connect(&self, lane: &str, user: &AclUser, password: &Secret) -> io::Result<Link> {
        match &self.url.topology {
            Topology::Unix(path) => {
                let s = UnixStream::connect(path).await.map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot connect to {}: {e}", path.display()),
                    )
                })?;
                let mut link = Link::Unix(s);
                authenticate(&mut link, user, password).await?;
                Ok(link)
            }
            Topology::Standalone(hp) => self.open_as(hp, user, password).await,
            Topology::Sentinel { sentinels, master } => {
                let mut last = None;
                for _ in 0..2 {
                    let cached = self.known().primary.clone();
                    let primary = match cached {
                        Some(p) => p,
                        None => {
                            let p = sentinel::primary(sentinels, master, self.tls.as_ref()).await?;
                            self.known().primary = Some(p.clone());
                            p
                        }
                    };
                    match self.open_as(&primary, user, password).await {
                        Ok(l) => return Ok(l),
                        Err(e) => {
                            self.known().primary = None;
                            last = Some(e);
                        }
                    }
                }
                Err(last.unwrap_or_else(|| io::Error::other("no primary")))
            }
            Topology::Cluster { seeds } => {
                let slot = cluster_map::slot_of(lane);
                let mut last = None;
                for _ in 0..2 {
                    let node = self.node_of(slot);
                    let opened = match node {
                        Some(n) => self.open_as(&n, user, password).await,
                        None => self.discover(seeds, lane, slot, user, password).await,
                    };
                    match opened {
                        Ok(l) => return Ok(l),
                        Err(e) => {
                            self.forget(slot);
                            last = Some(e);
                        }
                    }
                }
                Err(last.unwrap_or_else(|| io::Error::other("no cluster node")))
            }
        }
    }

    /// A relayed connection of `lane` was told the lane is elsewhere.
    pub fn moved(&self, lane: &str, m: Moved) {
        let slot = cluster_map::slot_of(lane);
        let mut k = self.known();
        k.primary = None;
        match m {
            Moved::To(s, node) if s == slot => {
                k.slots.insert(s, node);
            }
            _ => {
                k.slots.remove(&slot);
                k.ranges.clear();
            }
        }
    }

    fn node_of(&self, slot: u16) -> Option<HostPort> {
        let k = self.known();
        k.slots
            .get(&slot)
            .or_else(|| cluster_map::node_of(&k.ranges, slot))
            .cloned()
    }

    fn forget(&self, slot: u16) {
        let mut k = self.known();
        k.slots.remove(&slot);
        k.ranges.clear();
    }

    async fn open_as(&self, hp: &HostPort, user: &AclUser, password: &Secret) -> io::Result<Link> {
        let mut link = dial::open(hp, self.tls.as_ref()).await?;
        authenticate(&mut link, user, password).await?;
        Ok(link)
    }

    /// Finds the node of `slot` from the seeds: their `CLUSTER SLOTS`, else
    /// (a user without that command) where a key of the lane redirects.
    async fn discover(
        &self,
        seeds: &[HostPort],
        lane: &str,
        slot: u16,
        user: &AclUser,
        password: &Secret,
    ) -> io::Result<Link> {
        let mut why = Vec::new();
        for seed in seeds {
            let mut up = match self.open_as(seed, user, password).await {
                Ok(l) => Exchange::new(l),
                Err(e) => {
                    why.push(e.to_string());
                    continue;
                }
            };
            let asked = if self.known().no_slots {
                None
            } else {
                let slots = vec![b"CLUSTER".to_vec(), b"SLOTS".to_vec()];
                match up.call(&[slots]).await {
                    Ok(mut r) => r.pop(),
                    Err(e) => {
                        // An answer too long for the proxy (a cluster of
                        // many small ranges) fails this way every time.
                        self.known().no_slots = true;
                        why.push(format!("{seed}: {e}"));
                        continue;
                    }
                }
            };
            let ranges = match asked.as_ref().map(|r| cluster_map::parse_slots(r, seed)) {
                Some(Ok(ranges)) => Some(ranges),
                Some(Err(e)) => {
                    if e.starts_with("NOPERM") {
                        self.known().no_slots = true;
                    }
                    None
                }
                None => None,
            };
            let node = match ranges {
                Some(ranges) => {
                    let node = cluster_map::node_of(&ranges, slot).cloned();
                    self.known().ranges = ranges;
                    node
                }
                // No CLUSTER SLOTS for this user: where its keys redirect.
                None => match probe(&mut up, lane).await {
                    Ok(n) => n,
                    Err(e) => {
                        why.push(format!("{seed}: {e}"));
                        continue;
                    }
                },
            };
            let node = match node {
                Some(n) if n != *seed => n,
                // The seed serves the slot itself: keep its connection.
                Some(_) | None => {
                    self.known().slots.insert(slot, seed.clone());
                    return Ok(up.into_link());
                }
            };
            self.known().slots.insert(slot, node.clone());
            return self.open_as(&node, user, password).await;
        }
        Err(io::Error::other(format!(
            "no cluster seed could be reached ({}); check the seeds in redis_url",
            why.join("; ")
        )))
    }
}

/// Where a key of `lane` is served, by the redirection an `XLEN` of one of
/// its inboxes gets (`None`: right here).
async fn probe(up: &mut Exchange, lane: &str) -> io::Result<Option<HostPort>> {
    let agent: AgentName = lane
        .parse()
        .map_err(|e| io::Error::other(format!("lane '{lane}': {e}")))?;
    let key = StreamKey {
        agent,
        family: "oxidepm".into(),
        dir: Dir::Inbox,
    }
    .to_string();
    let r = up.call(&[vec![b"XLEN".to_vec(), key.into_bytes()]]).await?;
    match &r[0] {
        Reply::Error(e) => match cluster_map::moved(e.as_bytes()) {
            Some(Moved::To(_, node)) => Ok(Some(node)),
            _ => Err(io::Error::other(format!(
                "cannot find the cluster node of lane '{lane}': {e}"
            ))),
        },
        _ => Ok(None),
    }
}

/// The key form and the way upstream of `cfg`, which hold for every lane:
/// the route `old` when `cfg` names the same one without TLS (what it
/// learnt stays); with TLS a new one, so that a reload re-reads the
/// certificate files (renewed in place, under the same names).
pub fn from_config(cfg: &ProxyConfig, old: Option<&Arc<Route>>) -> Result<Arc<Route>, String> {
    // Keys are built from here on: the form must be fixed first, and can
    // never change in a running proxy (its lanes would address two
    // keyspaces at once); a new form needs a restart.
    oxidepm_lanes::stream_key::set_key_form(cfg.key_form)
        .map_err(|e| format!("key_form: {e}; restart the proxy to change it"))?;
    if cfg.upstream.is_cluster() && cfg.key_form != oxidepm_lanes::KeyForm::Tagged {
        return Err(format!(
            "upstream {} is a Redis Cluster, where an agent's keys must share a slot: \
             key_form must be \"tagged\"",
            cfg.upstream
        ));
    }
    match old {
        Some(r) if r.is_for(&cfg.upstream, &cfg.tls) && !cfg.upstream.tls => Ok(r.clone()),
        _ => Route::new(&cfg.upstream, &cfg.tls)
            .map(Arc::new)
            .map_err(|e| format!("upstream {}: {e}", cfg.upstream)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_needs_the_tagged_form() {
        let url: oxidepm_lanes::RedisUrl = "redis+cluster://127.0.0.1:7000".parse().unwrap();
        let cfg = ProxyConfig::new(url, "/l".into(), Vec::new());
        // Plain: this test process's form, so only the cluster is wrong.
        let why = from_config(&cfg, None).unwrap_err();
        assert!(why.contains("tagged"), "{why}");
        let plain = ProxyConfig::new(std::path::PathBuf::from("/r.sock"), "/l".into(), Vec::new());
        let route = from_config(&plain, None).unwrap();
        let again = from_config(&plain, Some(&route)).unwrap();
        assert!(
            Arc::ptr_eq(&route, &again),
            "the same upstream keeps its route"
        );
    }
}
