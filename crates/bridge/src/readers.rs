//! Which readers drain the outboxes: one over every outbox on one server,
//! one per agent on a Redis Cluster.
//!
//! A multi-key command on a cluster must name keys of one slot; the keys
//! of one agent share its hash tag's slot (the tagged key form), so a read
//! over all of one agent's outboxes is the widest a cluster takes. Each of
//! those readers holds a connection to the node serving its agent's slot
//! and follows the node when the slot moves or its primary fails over.

use crate::conn::RedisTarget;
use crate::delivery::DeliveryContext;
use crate::outbox::{OutboxPlan, Reader};
use oxidepm_lanes::redis_url::Topology;
use oxidepm_lanes::AgentName;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Runs the readers of the plans of `plan_rx` until the bridge stops.
pub async fn run(
    ctx: Arc<DeliveryContext>,
    target: RedisTarget,
    mut plan_rx: watch::Receiver<OutboxPlan>,
    grace: Duration,
) {
    if !matches!(target.url.topology, Topology::Cluster { .. }) {
        Reader::new(ctx, target, plan_rx).run(grace).await;
        return;
    }
    let mut shutdown = ctx.shutdown.clone();
    let mut readers = JoinSet::new();
    // A reader whose agent leaves the plan stays, idle with no outbox, and
    // takes it up again if the agent comes back.
    let mut started: BTreeSet<AgentName> = BTreeSet::new();
    loop {
        let agents: BTreeSet<AgentName> = plan_rx
            .borrow_and_update()
            .outboxes
            .iter()
            .map(|k| k.agent.clone())
            .collect();
        for a in agents.difference(&started.clone()) {
            let r = Reader::of_agent(
                ctx.clone(),
                target.clone(),
                plan_rx.clone(),
                Some(a.clone()),
            );
            readers.spawn(r.run(grace));
            started.insert(a.clone());
        }
        tokio::select! {
            changed = plan_rx.changed() => if changed.is_err() { break },
            _ = shutdown.wait() => break,
        }
    }
    while readers.join_next().await.is_some() {}
}
