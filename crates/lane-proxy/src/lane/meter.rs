//! What an agent's outboxes hold, and whether one more XADD may go in.
//!
//! Redis has no per-user quota, so the proxy keeps one per lane:
//!
//! * `maxlen`: an outbox holding this many entries takes no more; the XADD
//!   is refused with `-OXIDEPM outbox full …` (backpressure). Nothing the
//!   consumer has not acknowledged is ever trimmed.
//! * `quota`: the memory of all the agent's outboxes together; an XADD
//!   that would pass it is refused with `-OXIDEPM quota …`.
//!
//! Checking Redis before every XADD would double the lane's round trips,
//! so the [`Meter`] keeps an estimate: the last measurement plus what the
//! proxy admitted since (one entry, and the command's size in bytes, per
//! XADD). Measuring happens on a connection of the meter's own, as the
//! agent (whose ACL grants XLEN, XINFO GROUPS, XPENDING, MEMORY USAGE and
//! XTRIM on its outboxes for this; the proxy refuses those to the agent),
//! every `meter_interval_ms` while the lane is in use and soon after a
//! refusal. Each measurement also removes the entries that every consumer
//! group of an outbox has read and acknowledged (`XTRIM MINID`), so an
//! outbox holds what is not yet delivered, and the bounds free up as the
//! bridge delivers.
//!
//! The estimate never undercounts what Redis executed: XADDs in flight
//! while a measurement runs are counted both in it and in the estimate
//! until the next one. So before the proxy refuses an XADD it waits for a
//! measurement that starts after the XADDs before it have been sent (up
//! to [`FRESH_WAIT`]), and decides again. An XADD Redis refused still
//! counts until the next measurement. The measured memory is Redis's
//! (`MEMORY USAGE … SAMPLES 0`), which includes the stream's own
//! overhead; the admitted bytes are the commands' sizes. Until a lane's
//! first measurement (right after the lane starts), the estimate holds
//! only what was admitted since. A lane nobody uses is not measured: what
//! its outboxes hold was within its bounds when it was last used.

use crate::lane::groups::{parse_groups, Group, StreamId};
use crate::upstream::connection::Upstream;
use crate::upstream::reply::Reply;
use oxidepm_lanes::{AgentName, Secret, StreamKey};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The soonest a refusal makes the meter measure again after the last
/// measurement: a client retrying in a loop must not turn into a loop of
/// measurements.
const MIN_GAP: Duration = Duration::from_millis(20);
/// How long one measurement (three round trips) may take.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an XADD the estimate would refuse waits for a new measurement.
pub const FRESH_WAIT: Duration = Duration::from_secs(1);

/// A running count: measured, and admitted since.
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    /// The last measurement.
    measured: u64,
    /// How many were answered (see [`Answered`]) when it started.
    base: u64,
    /// Admitted so far (monotonic).
    admitted: u64,
}

impl Count {
    /// The measurement plus everything not known to be in it.
    fn estimate(&self) -> u64 {
        self.measured + self.admitted.saturating_sub(self.base)
    }
}

#[derive(Debug, Default)]
struct State {
    /// Entries, per family.
    entries: Vec<Count>,
    /// Bytes, of all outboxes together.
    bytes: Count,
    /// Admission attempts so far: a measurement is due when it changed.
    activity: u64,
    /// What XADDs are admitted within now.
    bounds: Bounds,
}

/// What Redis has answered of the admitted XADDs (monotonic, never above
/// what was admitted): atomics, since every answer counts here.
#[derive(Debug)]
struct Answered {
    entries: Vec<AtomicU64>,
    bytes: AtomicU64,
}

/// The outboxes of one lane: their estimated size, and admission.
#[derive(Debug)]
pub struct Meter {
    agent: AgentName,
    families: Vec<String>,
    keys: Vec<String>,
    state: Mutex<State>,
    answered: Answered,
    wake: Notify,
    /// Measurements started so far.
    started: AtomicU64,
    /// The number (in `started`) of the last measurement completed.
    completed: watch::Sender<u64>,
}

/// The bounds an XADD is admitted within.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    /// Entries one outbox may hold.
    pub maxlen: Option<u64>,
    /// Bytes all the agent's outboxes may hold.
    pub quota: Option<u64>,
}

impl Meter {
    /// The meter of `agent`'s outboxes of `families`.
    pub fn new(agent: AgentName, families: Vec<String>) -> Arc<Meter> {
        let keys = families
            .iter()
            .map(|f| StreamKey::outbox(&agent, f).to_string())
            .collect();
        let state = State {
            entries: vec![Count::default(); families.len()],
            ..State::default()
        };
        let answered = Answered {
            entries: (0..families.len()).map(|_| AtomicU64::new(0)).collect(),
            bytes: AtomicU64::new(0),
        };
        Arc::new(Meter {
            agent,
            families,
            keys,
            state: Mutex::new(state),
            answered,
            wake: Notify::new(),
            started: AtomicU64::new(0),
            completed: watch::Sender::new(0),
        })
    }

    /// Waits (up to [`FRESH_WAIT`]) for a measurement that starts from now.
    pub async fn fresh(&self) {
        let want = self.started.load(Ordering::SeqCst) + 1;
        let mut done = self.completed.subscribe();
        // A change of activity is what makes a measurement due.
        self.lock().activity += 1;
        self.wake.notify_one();
        let _ = tokio::time::timeout(FRESH_WAIT, done.wait_for(|&n| n >= want)).await;
    }

    /// The families whose outboxes it measures.
    pub fn families(&self) -> &[String] {
        &self.families
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the bounds XADDs are admitted within, for the lane's open
    /// connections too: an agent's quota is its share of a budget, which
    /// shrinks as agents are added.
    pub fn set_bounds(&self, bounds: Bounds) {
        self.lock().bounds = bounds;
    }

    /// Admits one XADD of `bytes` to the outbox of `families[family]`, or
    /// says why not (the text of an error reply). Once admitted, it must be
    /// counted [`Meter::answered`] when Redis answers it, or when it never
    /// will (its connection ended).
    pub fn admit(&self, family: usize, bytes: u64) -> Result<(), String> {
        let mut st = self.lock();
        st.activity += 1;
        let bounds = st.bounds;
        if let Some(cap) = bounds.maxlen {
            let len = st.entries[family].estimate();
            if len >= cap {
                drop(st);
                self.wake.notify_one();
                return Err(format!(
                    "OXIDEPM outbox full: {} holds {len} entries not yet delivered and \
                     acknowledged, its cap is {cap} (lanes.maxlen); try again once the \
                     bridge has delivered some",
                    self.keys[family]
                ));
            }
        }
        if let Some(quota) = bounds.quota {
            let used = st.bytes.estimate();
            if used.saturating_add(bytes) > quota {
                drop(st);
                self.wake.notify_one();
                return Err(format!(
                    "OXIDEPM quota: agent '{}' has about {used} bytes in its outboxes and \
                     this XADD of {bytes} bytes would pass its quota of {quota} bytes \
                     (its share of the outbox budget, half of lanes.maxmemory, or \
                     lanes.agent_quota if lower); try again once the bridge has delivered some",
                    self.agent
                ));
            }
        }
        st.entries[family].admitted += 1;
        st.bytes.admitted += bytes;
        Ok(())
    }

    /// Counts an admitted XADD as answered.
    pub fn answered(&self, family: usize, bytes: u64) {
        if let Some(n) = self.answered.entries.get(family) {
            n.fetch_add(1, Ordering::SeqCst);
            self.answered.bytes.fetch_add(bytes, Ordering::SeqCst);
        }
    }

    /// The estimate of entries in the outbox of `families[family]` and of
    /// bytes in all outboxes.
    #[cfg(test)]
    pub fn estimate(&self, family: usize) -> (u64, u64) {
        let st = self.lock();
        (st.entries[family].estimate(), st.bytes.estimate())
    }

    /// Measures the outboxes on `up` (a connection as the agent), first
    /// removing the entries every consumer group has acknowledged.
    pub async fn measure(&self, up: &mut Upstream) -> io::Result<()> {
        let number = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let base_entries: Vec<u64> = self
            .answered
            .entries
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .collect();
        let base_bytes = self.answered.bytes.load(Ordering::SeqCst);
        let mut groups = self.groups(up).await?;
        self.oldest_pending(up, &mut groups).await?;
        let (lens, bytes) = self.trim_and_count(up, &groups).await?;
        let mut st = self.lock();
        for ((c, len), base) in st.entries.iter_mut().zip(lens).zip(base_entries) {
            c.measured = len;
            c.base = base;
        }
        st.bytes.measured = bytes;
        st.bytes.base = base_bytes;
        drop(st);
        self.completed.send_replace(number);
        Ok(())
    }

    /// Step 1 of a measurement: each outbox's groups and their progress
    /// (one reply each, so consistent in itself).
    async fn groups(&self, up: &mut Upstream) -> io::Result<Vec<Vec<Group>>> {
        let infos = up
            .call(
                &self
                    .keys
                    .iter()
                    .map(|k| cmd(&[b"XINFO", b"GROUPS", k.as_bytes()]))
                    .collect::<Vec<_>>(),
            )
            .await?;
        let mut groups: Vec<Vec<Group>> = Vec::with_capacity(self.keys.len());
        for (key, r) in self.keys.iter().zip(&infos) {
            groups.push(match r {
                Reply::Error(e) if e.contains("no such key") => Vec::new(),
                Reply::Error(e) => {
                    return Err(io::Error::other(format!("XINFO GROUPS {key}: {e}")))
                }
                r => parse_groups(r)
                    .map_err(|e| io::Error::other(format!("XINFO GROUPS {key}: {e}")))?,
            });
        }
        Ok(groups)
    }

    /// Step 2: the oldest entry each group still has pending, asked
    /// *after* step 1: an entry read since then is newer than the
    /// last-delivered ID seen, so it is kept whatever step 2 says.
    async fn oldest_pending(&self, up: &mut Upstream, groups: &mut [Vec<Group>]) -> io::Result<()> {
        let mut asked = Vec::new();
        for (k, gs) in groups.iter().enumerate() {
            for (g, group) in gs.iter().enumerate() {
                if group.pending > 0 {
                    asked.push((k, g));
                }
            }
        }
        let pendings = up
            .call(
                &asked
                    .iter()
                    .map(|&(k, g)| cmd(&[b"XPENDING", self.keys[k].as_bytes(), &groups[k][g].name]))
                    .collect::<Vec<_>>(),
            )
            .await?;
        for (&(k, g), r) in asked.iter().zip(&pendings) {
            let oldest = r
                .items()
                .get(1)
                .and_then(Reply::bytes)
                .and_then(StreamId::parse);
            groups[k][g].oldest_pending = oldest;
        }
        Ok(())
    }

    /// Step 3: removes what every group is done with, and measures what is
    /// left: each outbox's length, and the bytes of all of them.
    async fn trim_and_count(
        &self,
        up: &mut Upstream,
        groups: &[Vec<Group>],
    ) -> io::Result<(Vec<u64>, u64)> {
        let mut third = Vec::new();
        let mut trims = Vec::with_capacity(self.keys.len());
        for (key, gs) in self.keys.iter().zip(groups) {
            let keep_from = gs.iter().map(Group::keep_from).min();
            if let Some(id) = keep_from {
                third.push(cmd(&[
                    b"XTRIM",
                    key.as_bytes(),
                    b"MINID",
                    id.to_string().as_bytes(),
                ]));
            }
            trims.push(keep_from.is_some());
            third.push(cmd(&[b"XLEN", key.as_bytes()]));
            third.push(cmd(&[
                b"MEMORY",
                b"USAGE",
                key.as_bytes(),
                b"SAMPLES",
                b"0",
            ]));
        }
        let answers = up.call(&third).await?;
        let mut it = answers.iter();
        let mut lens = Vec::with_capacity(self.keys.len());
        let mut bytes = 0u64;
        for (key, trimmed) in self.keys.iter().zip(trims) {
            if trimmed {
                match it.next() {
                    Some(Reply::Int(n)) if *n > 0 => {
                        log::debug!(
                            "lane {}: removed {n} delivered entries of {key}",
                            self.agent
                        )
                    }
                    Some(Reply::Error(e)) => {
                        return Err(io::Error::other(format!("XTRIM {key}: {e}")))
                    }
                    _ => {}
                }
            }
            let len = it.next().and_then(Reply::int);
            let mem = it.next();
            let Some(len) = len else {
                return Err(io::Error::other(format!("XLEN {key}: not an integer")));
            };
            lens.push(len.max(0) as u64);
            match mem {
                Some(Reply::Int(n)) => bytes += (*n).max(0) as u64,
                Some(Reply::Bulk(None)) => {}
                other => {
                    return Err(io::Error::other(format!(
                        "MEMORY USAGE {key}: unexpected answer {other:?}"
                    )))
                }
            }
        }
        Ok((lens, bytes))
    }

    fn activity(&self) -> u64 {
        self.lock().activity
    }
}

/// A command of `args`, as [`Upstream::call`] takes it.
fn cmd(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// What the meter task needs of a lane's current settings.
pub struct Source {
    /// The lane's meter now.
    pub meter: Arc<Meter>,
    /// The way to the lanes' Redis.
    pub route: Arc<crate::upstream::route::Route>,
    /// The agent's password.
    pub password: Secret,
    /// How often to measure while the lane is in use.
    pub interval: Duration,
}

/// Measures a lane's outboxes for as long as it runs: at start, then every
/// interval in which there was an XADD, and soon after a refusal.
/// `current` gives the lane's settings now (`None`: not configured).
pub async fn run(current: impl Fn() -> Option<Source>) {
    let mut up: Option<Upstream> = None;
    let mut measured_at: Option<(usize, u64)> = None;
    let mut failing = false;
    loop {
        let Some(src) = current() else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let id = Arc::as_ptr(&src.meter) as usize;
        let activity = src.meter.activity();
        if measured_at != Some((id, activity)) {
            match measure_once(&src, &mut up).await {
                Ok(()) => {
                    measured_at = Some((id, activity));
                    if failing {
                        log::info!("lane {}: measuring its outboxes again", src.meter.agent);
                        failing = false;
                    }
                }
                Err(e) => {
                    up = None;
                    if !failing {
                        log::warn!(
                            "lane {}: cannot measure its outboxes ({e}); until it can, \
                             every XADD counts towards its bounds and none is taken off",
                            src.meter.agent
                        );
                        failing = true;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(src.interval) => {}
            _ = src.meter.wake.notified() => tokio::time::sleep(MIN_GAP.min(src.interval)).await,
        }
    }
}

async fn measure_once(src: &Source, up: &mut Option<Upstream>) -> io::Result<()> {
    let work = async {
        if up.is_none() {
            *up = Some(Upstream::open(&src.route, &src.meter.agent, &src.password).await?);
        }
        match up.as_mut() {
            Some(c) => src.meter.measure(c).await,
            None => Ok(()),
        }
    };
    tokio::time::timeout(MEASURE_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(io::Error::other("Redis did not answer in time")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter() -> Arc<Meter> {
        Meter::new(
            "alice".parse().unwrap(),
            vec!["webhook".into(), "ops".into()],
        )
    }

    #[test]
    fn admits_within_the_bounds_and_counts_until_measured() {
        let m = meter();
        m.set_bounds(Bounds {
            maxlen: Some(2),
            quota: Some(1000),
        });
        m.admit(0, 100).unwrap();
        m.admit(0, 100).unwrap();
        let full = m.admit(0, 1).unwrap_err();
        assert!(
            full.starts_with("OXIDEPM outbox full: alice:webhook:outbox holds 2"),
            "{full}"
        );
        // Another outbox has its own length, but shares the quota.
        let big = m.admit(1, 801).unwrap_err();
        assert!(
            big.starts_with("OXIDEPM quota: agent 'alice' has about 200 bytes"),
            "{big}"
        );
        m.admit(1, 800).unwrap();
        // A lower quota holds for what comes next at once.
        m.set_bounds(Bounds {
            maxlen: None,
            quota: Some(999),
        });
        assert!(m.admit(1, 1).is_err());
        // Answered is not gone: only a measurement takes entries off.
        m.answered(0, 100);
        m.answered(0, 100);
        m.answered(1, 800);
        assert_eq!(m.estimate(0), (2, 1000));
    }

    #[test]
    fn a_measurement_replaces_what_was_answered_before_it() {
        let m = meter();
        m.admit(0, 10).unwrap();
        m.answered(0, 10);
        m.admit(0, 20).unwrap();
        // A measurement starting now: it saw the answered XADD (and maybe
        // the one in flight), and finds 1 entry of 50 bytes.
        let base_entries = m.answered.entries[0].load(Ordering::SeqCst);
        let base_bytes = m.answered.bytes.load(Ordering::SeqCst);
        {
            let mut st = m.lock();
            st.entries[0].measured = 1;
            st.entries[0].base = base_entries;
            st.bytes.measured = 50;
            st.bytes.base = base_bytes;
        }
        // The one in flight still counts, never less.
        assert_eq!(m.estimate(0), (2, 70));
        m.answered(0, 20);
        assert_eq!(m.estimate(0), (2, 70));
    }
}
