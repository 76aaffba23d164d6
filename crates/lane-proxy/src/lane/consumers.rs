//! The consumer names a lane has in Redis, and whether one more may go in.
//!
//! Every consumer an agent names (XREADGROUP, XCLAIM, XAUTOCLAIM, XGROUP
//! CREATECONSUMER) is memory in Redis, which runs with `noeviction` and
//! creates consumers even at its memory bound: without a bound, one agent
//! could fill Redis and every other agent's XADD would get `-OOM`. So a
//! lane admits at most `limits.max_consumers` distinct names, shared by
//! all its connections (the filter bounds each name's length).
//!
//! [`Consumers`] keeps the names Redis holds in the lane's inbox groups,
//! read with `XINFO CONSUMERS` (as the agent, whose ACL allows it on its
//! inboxes), plus every name admitted since. It never undercounts what
//! Redis executed: a sync keeps every name a command was admitted with and
//! not yet answered when the sync started, or admitted while it ran (that
//! command may run after Redis answered the sync). It reads Redis:
//!
//! * before the lane's first new name (the seed), so that a proxy restart
//!   does not reset the bound; if that fails it starts empty and says so;
//! * when a new name would be refused, at most once per [`MIN_GAP`], or
//!   sooner after a forwarded XGROUP DELCONSUMER. That is how a name is
//!   freed: once Redis no longer has it. Freeing on DELCONSUMER's answer
//!   instead would race with another connection re-creating the name
//!   between the delete and its answer; Redis is the truth.
//!
//! The names read are those of the groups of `<agent>:<family>:inbox` for
//! the configured families: the inboxes the bridge and responders write.
//! On a responder's lane they are those of its group on every agent's
//! `<agent>:<name>:outbox`, read as `resp_<name>`.

use crate::lane::groups::parse_groups;
use crate::upstream::connection::Upstream;
use crate::upstream::reply::Reply;
use crate::upstream::route::Route;
use oxidepm_lanes::{AclUser, AgentName, Secret, StreamKey};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The soonest a refusal makes the lane read Redis's names again after the
/// last read: a client retrying a new name in a loop must not turn into a
/// loop of reads.
pub const MIN_GAP: Duration = Duration::from_secs(1);
/// The soonest after the last read that a DELCONSUMER makes a refusal read
/// Redis again.
const DELETED_GAP: Duration = Duration::from_millis(20);
/// How long connecting and reading the names may take.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    /// The lane's inboxes, whose groups' consumers are read.
    inboxes: Vec<String>,
    /// Names Redis held at the last read, and every name admitted since.
    names: HashSet<Vec<u8>>,
    /// Per name: commands admitted with it and not yet answered.
    in_flight: HashMap<Vec<u8>, usize>,
    /// While a read runs: the names it may not see.
    unseen: Option<HashSet<Vec<u8>>>,
    /// Whether Redis was read (or tried) before the lane's first new name.
    seeded: bool,
    /// When Redis was last read.
    synced: Option<Instant>,
    /// A DELCONSUMER was forwarded since.
    deleted: bool,
}

/// The consumer names of one lane; shared by its connections.
#[derive(Debug)]
pub struct Consumers {
    agent: AgentName,
    /// A responder's lane: `agent` is the responder.
    responder: bool,
    state: Mutex<State>,
    /// One read of Redis at a time.
    reading: tokio::sync::Mutex<()>,
}

impl Consumers {
    /// The consumer names of `agent`, whose inboxes are those of `families`.
    pub fn new(agent: AgentName, families: &[String]) -> Consumers {
        let c = Consumers {
            agent,
            responder: false,
            state: Mutex::new(State::default()),
            reading: tokio::sync::Mutex::new(()),
        };
        c.set_families(families);
        c
    }

    /// The consumer names of responder `name`, whose group is on the
    /// outboxes of its family of `agents`.
    pub fn for_responder(name: AgentName, agents: &[AgentName]) -> Consumers {
        let c = Consumers {
            agent: name,
            responder: true,
            state: Mutex::new(State::default()),
            reading: tokio::sync::Mutex::new(()),
        };
        c.set_agents(agents);
        c
    }

    /// On a responder's lane: the outboxes are now those of `agents`.
    pub fn set_agents(&self, agents: &[AgentName]) {
        self.lock().inboxes = agents
            .iter()
            .map(|a| StreamKey::outbox(a, self.agent.as_str()).to_string())
            .collect();
    }

    /// The inboxes are now those of `families`.
    pub fn set_families(&self, families: &[String]) {
        self.lock().inboxes = families
            .iter()
            .map(|f| StreamKey::inbox(&self.agent, f).to_string())
            .collect();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits one command naming consumer `name`, within `max` names, or
    /// says why not (the text of an error reply). Reads Redis first when
    /// the lane has not yet, and again before refusing when that is due
    /// (see the module's documentation), on a connection of its own as the
    /// agent. Once admitted, the command must be counted
    /// [`Consumers::answered`] when Redis answers it, or when it never will.
    pub async fn admit(
        &self,
        name: &[u8],
        max: usize,
        route: &Arc<Route>,
        password: &Secret,
    ) -> Result<(), String> {
        if !self.lock().seeded {
            self.read_redis(route, password, |st| !st.seeded).await;
        }
        if let Err(why) = self.try_admit(name, max) {
            let due = |st: &State| {
                let since = st.synced.map_or(Duration::MAX, |t| t.elapsed());
                since >= MIN_GAP || (st.deleted && since >= DELETED_GAP)
            };
            if !due(&self.lock()) {
                return Err(why);
            }
            self.read_redis(route, password, due).await;
            self.try_admit(name, max)?;
        }
        Ok(())
    }

    /// Admits `name` if it is known or fewer than `max` names are.
    fn try_admit(&self, name: &[u8], max: usize) -> Result<(), String> {
        let mut st = self.lock();
        if !st.names.contains(name) {
            if st.names.len() >= max {
                let known = st.names.len();
                drop(st);
                log::info!(
                    "lane {}: refused a new consumer name: {known} are in use, at most {max}",
                    self.agent
                );
                return Err(format!(
                    "OXIDEPM consumers: at most {max} consumer names per agent \
                     (lanes.limits.max_consumers) and agent '{}' has {known}; reuse one, \
                     or free one with XGROUP DELCONSUMER",
                    self.agent
                ));
            }
            st.names.insert(name.to_vec());
        }
        *st.in_flight.entry(name.to_vec()).or_insert(0) += 1;
        if let Some(unseen) = &mut st.unseen {
            unseen.insert(name.to_vec());
        }
        Ok(())
    }

    /// Counts a command admitted with `name` as answered.
    pub fn answered(&self, name: &[u8]) {
        let mut st = self.lock();
        if let Some(n) = st.in_flight.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                st.in_flight.remove(name);
            }
        }
    }

    /// An XGROUP DELCONSUMER was forwarded: Redis may hold a name fewer.
    pub fn deleted(&self) {
        self.lock().deleted = true;
    }

    /// The names known now.
    #[cfg(test)]
    pub fn known(&self) -> usize {
        self.lock().names.len()
    }

    /// Reads the names Redis holds, if `still_due` says so once this task
    /// has the turn (another may have read them meanwhile). A failure is
    /// logged; the names known stay.
    async fn read_redis(
        &self,
        route: &Arc<Route>,
        password: &Secret,
        still_due: impl Fn(&State) -> bool,
    ) {
        let _turn = self.reading.lock().await;
        let Some(inboxes) = self.begin_read(still_due) else {
            return;
        };
        let read = tokio::time::timeout(SYNC_TIMEOUT, async {
            let user = if self.responder {
                AclUser::Responder(self.agent.to_string())
            } else {
                AclUser::Agent(self.agent.clone())
            };
            let mut up = Upstream::open_as(route, &user, password).await?;
            read_names(&mut up, &inboxes).await
        })
        .await
        .unwrap_or_else(|_| Err(io::Error::other("Redis did not answer in time")));
        self.end_read(read);
    }

    /// Starts a read, if still due: the inboxes to read.
    fn begin_read(&self, still_due: impl Fn(&State) -> bool) -> Option<Vec<String>> {
        let mut st = self.lock();
        if !still_due(&st) {
            return None;
        }
        st.unseen = Some(st.in_flight.keys().cloned().collect());
        st.deleted = false;
        Some(st.inboxes.clone())
    }

    /// Ends a read: the names known are `read` and those it may not see.
    fn end_read(&self, read: io::Result<HashSet<Vec<u8>>>) {
        let mut st = self.lock();
        let unseen = st.unseen.take().unwrap_or_default();
        st.synced = Some(Instant::now());
        let first = !st.seeded;
        st.seeded = true;
        match read {
            Ok(mut names) => {
                names.extend(unseen);
                log::debug!(
                    "lane {}: {} consumer names in Redis",
                    self.agent,
                    names.len()
                );
                st.names = names;
            }
            Err(e) if first => log::warn!(
                "lane {}: cannot read its consumers from Redis ({e}); counting its consumer \
                 names from none",
                self.agent
            ),
            Err(e) => log::warn!(
                "lane {}: cannot read its consumers from Redis: {e}",
                self.agent
            ),
        }
    }
}

/// The names of every consumer of every group of `inboxes`.
async fn read_names(up: &mut Upstream, inboxes: &[String]) -> io::Result<HashSet<Vec<u8>>> {
    let cmd = |args: &[&[u8]]| args.iter().map(|a| a.to_vec()).collect::<Vec<_>>();
    let infos = up
        .call(
            &inboxes
                .iter()
                .map(|k| cmd(&[b"XINFO", b"GROUPS", k.as_bytes()]))
                .collect::<Vec<_>>(),
        )
        .await?;
    let mut asked = Vec::new();
    for (key, r) in inboxes.iter().zip(&infos) {
        let groups = match r {
            Reply::Error(e) if e.contains("no such key") => continue,
            Reply::Error(e) => return Err(io::Error::other(format!("XINFO GROUPS {key}: {e}"))),
            r => {
                parse_groups(r).map_err(|e| io::Error::other(format!("XINFO GROUPS {key}: {e}")))?
            }
        };
        for g in groups {
            asked.push(cmd(&[b"XINFO", b"CONSUMERS", key.as_bytes(), &g.name]));
        }
    }
    let mut names = HashSet::new();
    for (c, r) in asked.iter().zip(up.call(&asked).await?) {
        if let Reply::Error(e) = &r {
            // A group destroyed since it was listed has no consumers.
            if e.starts_with("NOGROUP") {
                continue;
            }
            return Err(io::Error::other(format!("XINFO CONSUMERS: {e}")));
        }
        for consumer in r.items() {
            let name = consumer
                .items()
                .chunks(2)
                .find(|kv| kv[0].bytes() == Some(b"name"))
                .and_then(|kv| kv.get(1))
                .and_then(Reply::bytes)
                .ok_or_else(|| {
                    io::Error::other(format!(
                        "XINFO CONSUMERS {}: a consumer without a name",
                        String::from_utf8_lossy(&c[2])
                    ))
                })?;
            names.insert(name.to_vec());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> HashSet<Vec<u8>> {
        list.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_read_keeps_what_it_may_not_see_and_frees_the_rest() {
        let c = Consumers::new("alice".parse().unwrap(), &["discord".to_string()]);
        c.end_read(Err(io::Error::other("down")));
        c.try_admit(b"a", 2).unwrap();
        c.try_admit(b"b", 2).unwrap();
        c.try_admit(b"a", 2).unwrap();
        let e = c.try_admit(b"c", 2).unwrap_err();
        assert!(
            e.starts_with("OXIDEPM consumers: at most 2 consumer names"),
            "{e}"
        );
        c.answered(b"a");
        c.answered(b"a");
        // "b" is in flight when the read starts, "d" is admitted while it
        // runs: Redis may execute them after it answers, so both stay.
        let inboxes = c.begin_read(|_| true).unwrap();
        assert_eq!(inboxes, ["alice:discord:inbox"]);
        c.try_admit(b"d", 3).unwrap();
        c.end_read(Ok(names(&["x"])));
        assert_eq!(c.lock().names, names(&["b", "d", "x"]));
        // A failed read keeps what was known.
        c.begin_read(|_| true).unwrap();
        c.end_read(Err(io::Error::other("down")));
        assert_eq!(c.known(), 3);
    }
}
