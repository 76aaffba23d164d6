//! A Redis Cluster started by a test: three primaries and a replica of
//! each, `redis-server --cluster-enabled yes` joined by
//! `redis-cli --cluster create`, with the ACL file of a shared server on
//! every node (ACLs are not replicated: each node has its own users).

use crate::shared::{self, connect, ROOT_PASSWORD, ROOT_USER};
use crate::tls::Certs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One node.
pub struct Node {
    /// Its port.
    pub port: u16,
    /// Its directory.
    pub dir: std::path::PathBuf,
    child: Child,
}

/// The cluster; every node is killed on drop.
pub struct Cluster {
    /// The directory of every node's.
    pub dir: tempfile::TempDir,
    /// The nodes, primaries first as created.
    pub nodes: Vec<Node>,
    /// The certificates, when the cluster speaks TLS.
    pub certs: Option<Certs>,
}

impl Cluster {
    /// Three primaries with a replica each; TLS between clients and nodes,
    /// and between nodes, when `tls`.
    pub fn start(tls: bool) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let certs = tls.then(|| Certs::generate(dir.path()));
        let mut nodes = Vec::new();
        for _ in 0..6 {
            let node = shared::start_retrying(shared::free_port_pair, |port| {
                let ndir = dir.path().join(port.to_string());
                std::fs::create_dir_all(&ndir).unwrap();
                std::fs::write(ndir.join("users.acl"), shared::acl_file()).unwrap();
                let mut conf = shared::tcp_conf(&ndir, port, certs.as_ref());
                conf.push_str(&format!(
                    "cluster-enabled yes\ncluster-config-file nodes.conf\n\
                     cluster-node-timeout 2000\nmasteruser {ROOT_USER}\nmasterauth {ROOT_PASSWORD}\n"
                ));
                if tls {
                    conf.push_str("tls-cluster yes\ntls-replication yes\n");
                }
                let mut child = shared::spawn(&ndir, &conf);
                match shared::wait_up(&mut child, &ndir, port, certs.as_ref()) {
                    Ok(()) => Ok(Node {
                        port,
                        dir: ndir,
                        child,
                    }),
                    Err(e) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        Err(e)
                    }
                }
            });
            nodes.push(node);
        }
        let c = Cluster { dir, nodes, certs };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &c.nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        create.args([
            "--cluster-replicas",
            "1",
            "--cluster-yes",
            "--user",
            ROOT_USER,
            "--pass",
            ROOT_PASSWORD,
        ]);
        c.tls_args(&mut create);
        let out = create
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed (Debian: redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        c.wait_ok();
        c.wait_replicas_synced();
        c
    }

    /// Waits until there are three replicas, each with its link to its
    /// primary up (a manual failover needs a replica in sync).
    pub fn wait_replicas_synced(&self) {
        crate::eventually(Duration::from_secs(30), "every replica in sync", || {
            let synced = self
                .nodes
                .iter()
                .filter(|n| {
                    let Ok(mut c) = connect(n.port, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD)
                    else {
                        return false;
                    };
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut c)
                        .unwrap_or_default();
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
                .count();
            synced == 3
        });
    }

    fn tls_args(&self, cmd: &mut Command) {
        if let Some(certs) = &self.certs {
            cmd.arg("--tls").arg("--cacert").arg(&certs.ca);
        }
    }

    /// `[lanes] redis_url`: the three first nodes as seeds.
    pub fn url(&self) -> String {
        let s = if self.certs.is_some() { "s" } else { "" };
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis{s}+cluster://{}", seeds.join(","))
    }

    /// `[lanes] tls_*`: the CA only.
    pub fn tls_files(&self) -> oxidepm_lanes::TlsFiles {
        oxidepm_lanes::TlsFiles {
            ca_file: self.certs.as_ref().map(|c| c.ca.clone()),
            ..Default::default()
        }
    }

    /// A connection as root to the node at `port`.
    pub fn node(&self, port: u16) -> redis::Connection {
        connect(port, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD).unwrap()
    }

    /// A cluster-aware connection as root (it follows redirections), from
    /// the three first nodes; a cluster without TLS.
    pub fn root(&self) -> redis::cluster::ClusterConnection {
        assert!(
            self.certs.is_none(),
            "Cluster::root is for a cluster without TLS"
        );
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect();
        redis::cluster::ClusterClientBuilder::new(seeds)
            .username(ROOT_USER.into())
            .password(ROOT_PASSWORD.into())
            .build()
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// A connection as `user` to the node at `port`.
    pub fn connect(
        &self,
        port: u16,
        user: &str,
        pw: &str,
    ) -> redis::RedisResult<redis::Connection> {
        connect(port, self.certs.as_ref(), user, pw)
    }

    /// The ports of the nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| self.role(n.port).as_deref() == Some("master"))
            .map(|n| n.port)
            .collect()
    }

    fn role(&self, port: u16) -> Option<String> {
        let mut c = connect(port, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD).ok()?;
        let v: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).ok()?;
        match v.first()? {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            redis::Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The slot of `key`, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.node(self.nodes[0].port))
            .unwrap()
    }

    /// The port of the primary serving `key` now.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot = self.slot(key);
        let view = self.slots_seen_by(self.primaries()[0]);
        if let Some(p) = view
            .iter()
            .find(|(lo, hi, _)| *lo <= slot && slot <= *hi)
            .map(|r| r.2)
        {
            return p;
        }
        panic!("no node serves slot {slot}")
    }

    /// The slot ranges node `port` knows, each with its primary's port
    /// (empty when the node cannot be asked).
    fn slots_seen_by(&self, port: u16) -> Vec<(u16, u16, u16)> {
        let Ok(mut c) = connect(port, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD) else {
            return Vec::new();
        };
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut c)
            .unwrap_or_default();
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => *i,
            _ => -1,
        };
        slots
            .iter()
            .filter_map(|range| {
                let redis::Value::Array(r) = range else {
                    return None;
                };
                let redis::Value::Array(node) = r.get(2)? else {
                    return None;
                };
                Some((
                    int(&r[0]) as u16,
                    int(&r[1]) as u16,
                    int(node.get(1)?) as u16,
                ))
            })
            .collect()
    }

    /// Fails the primary at `primary` over to its replica with
    /// `CLUSTER FAILOVER` (run on the replica), and waits until the
    /// replica is the primary and every node agrees; returns its port.
    pub fn failover(&self, primary: u16) -> u16 {
        let replica = self
            .nodes
            .iter()
            .map(|n| n.port)
            .find(|p| {
                let Ok(mut c) = connect(*p, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD) else {
                    return false;
                };
                let v: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).unwrap_or_default();
                matches!(v.get(2), Some(redis::Value::Int(mp)) if *mp as u16 == primary)
            })
            .unwrap_or_else(|| panic!("no replica of {primary}"));
        let moved: Vec<(u16, u16)> = self
            .slots_seen_by(primary)
            .into_iter()
            .filter(|r| r.2 == primary)
            .map(|r| (r.0, r.1))
            .collect();
        self.wait_replicas_synced();
        // A manual failover that times out (the replica lagging) is given
        // up by Redis; ask again until it takes.
        let mut asked = std::time::Instant::now() - Duration::from_secs(60);
        crate::eventually(Duration::from_secs(60), "the replica to take over", || {
            if asked.elapsed() > Duration::from_secs(10) {
                let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("FAILOVER")
                    .query(&mut self.node(replica));
                asked = std::time::Instant::now();
            }
            self.role(replica).as_deref() == Some("master")
                && self.role(primary).as_deref() == Some("slave")
        });
        self.wait_ok();
        // Every node's CLUSTER SLOTS names the new primary for the slots
        // that moved (the views converge through the cluster bus).
        crate::eventually(
            Duration::from_secs(30),
            "every node's view of the moved slots",
            || {
                self.nodes.iter().all(|n| {
                    let view = self.slots_seen_by(n.port);
                    moved
                        .iter()
                        .all(|m| view.iter().any(|r| (r.0, r.1) == *m && r.2 == replica))
                })
            },
        );
        replica
    }

    /// Waits until every node says `cluster_state:ok`.
    pub fn wait_ok(&self) {
        crate::eventually(
            Duration::from_secs(30),
            "cluster_state:ok on every node",
            || {
                self.nodes.iter().all(|n| {
                    let Ok(mut c) = connect(n.port, self.certs.as_ref(), ROOT_USER, ROOT_PASSWORD)
                    else {
                        return false;
                    };
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query(&mut c)
                        .unwrap_or_default();
                    info.contains("cluster_state:ok")
                })
            },
        );
    }

    /// Kills the node at `port` now.
    pub fn kill_node(&mut self, port: u16) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_serves_every_slot_and_fails_over() {
        let c = Cluster::start(false);
        assert_eq!(c.primaries().len(), 3);
        assert_eq!(
            c.slot("{alice}:webhook:inbox"),
            c.slot("{alice}:email:outbox")
        );
        let p = c.primary_of("{alice}:webhook:inbox");
        let new = c.failover(p);
        assert_eq!(c.primary_of("{alice}:webhook:inbox"), new);
    }

    #[test]
    fn a_tls_cluster_takes_only_tls_clients() {
        let c = Cluster::start(true);
        assert_eq!(c.primaries().len(), 3);
        let plain = connect(c.nodes[0].port, None, ROOT_USER, ROOT_PASSWORD);
        assert!(plain.is_err());
    }
}
