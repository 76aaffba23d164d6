//! The `consult` source: agents consulting each other, under the rules of
//! `[[lanes.consult]]`.
//!
//! It has no outside world. Its outboxes are the agents' `consult`
//! outboxes, and its `deliver` is a router: an entry of
//! `alice:consult:outbox` with `to bob` (and no `re`) is a question, written
//! into `bob:consult:inbox` with `from alice` (from the key, never from the
//! entry), `kind question`, `request_id` (the outbox entry's id) and the
//! text, when a rule lets alice consult bob; an entry of
//! `bob:consult:outbox` with `to alice re <request_id>` is bob's answer,
//! written into `alice:consult:inbox` with `from bob`, `kind answer` and
//! `re`, when a rule lets alice consult bob and alice's question is open.
//! Anything else goes to the sender's dead stream with the reason
//! ([`DeliveryError::Permanent`]), and the sender is told in its consult
//! inbox (`kind refused`). What only has to wait — `max_open` questions
//! open, the private Redis unavailable — waits ([`DeliveryError::Wait`]):
//! a backlog after an outage is held, never refused after its XADD was
//! taken. Each outbox is delivered one entry at a time, in order, like
//! every outbox.
//!
//! * [`mod@judge`] — what an entry is and whether the rules allow it (pure);
//! * [`record`] — the writes, and the open questions answers are checked
//!   against.

mod judge;
mod record;

use crate::conn::Con;
use crate::message::Outbound;
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use crate::source::{BoxFuture, DeliveryError, Source, SourceError};
use judge::{judge, Plan, Refused};
use oxidepm_lanes::bridge_config::BridgeConfig;
use oxidepm_lanes::consult::{ConsultConfig, CONSULT};
use oxidepm_lanes::AgentName;
use record::Write;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock, RwLock};

/// What a reload replaces.
struct Settings {
    consult: ConsultConfig,
    agents: HashSet<AgentName>,
    inbox_maxlen: u64,
    /// Whether the lanes are on a server several hosts share, whose
    /// agents this bridge learns of a little after they start.
    several_hosts: bool,
}

impl Settings {
    fn of(cfg: &BridgeConfig) -> Settings {
        Settings {
            // A configuration without the section (the source is being
            // removed, which takes a restart) allows nothing meanwhile.
            consult: cfg.consult.clone().unwrap_or_default(),
            agents: cfg.agents.iter().cloned().collect(),
            inbox_maxlen: cfg.inbox_maxlen,
            several_hosts: cfg.shared_routes,
        }
    }
}

/// The consult router.
pub struct ConsultSource {
    settings: RwLock<Arc<Settings>>,
    /// The bridge's shared connection, taken from the publisher when the
    /// bridge starts the source.
    con: OnceLock<Con>,
}

impl ConsultSource {
    /// The source, when the configuration has a `consult` section.
    pub fn new(cfg: &BridgeConfig) -> Option<ConsultSource> {
        cfg.consult.as_ref()?;
        Some(ConsultSource {
            settings: RwLock::new(Arc::new(Settings::of(cfg))),
            con: OnceLock::new(),
        })
    }

    fn settings(&self) -> Arc<Settings> {
        self.settings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn route(&self, msg: &Outbound) -> Result<(), DeliveryError> {
        let s = self.settings();
        let sender: AgentName = msg.agent.parse().map_err(|e| {
            DeliveryError::Permanent(format!("the outbox's agent is not an agent name: {e}"))
        })?;
        let plan = judge(&s.consult, &s.agents, &sender, msg).map_err(|r| match r {
            // Tried again (within the retry budget): the daemons pass
            // each other's new agents on to their bridges within a second.
            Refused::Unknown(r) if s.several_hosts => DeliveryError::Retry(format!(
                "{r} (yet: it may have just started on another one)"
            )),
            r => DeliveryError::Permanent(r.reason()),
        })?;
        let Some(con) = self.con.get() else {
            return Err(DeliveryError::Retry(
                "the consult router is still starting".into(),
            ));
        };
        let mut con = con.clone();
        let write = |to| Write {
            sender: &sender,
            to,
            msg,
            limits: &s.consult.limits,
            inbox_maxlen: s.inbox_maxlen,
        };
        match &plan {
            Plan::Question { to } => record::ask(&mut con, &write(to)).await,
            Plan::Answer { to, re } => record::answer(&mut con, &write(to), re).await,
        }
    }
}

impl Source for ConsultSource {
    fn name(&self) -> &str {
        CONSULT
    }

    /// Nothing comes in from outside: takes the bridge's connection and
    /// waits for the bridge to stop.
    fn inbound(
        &self,
        publisher: Publisher,
        mut shutdown: Shutdown,
    ) -> BoxFuture<'_, Result<(), SourceError>> {
        Box::pin(async move {
            let _ = self.con.set(publisher.connection());
            shutdown.wait().await;
            Ok(())
        })
    }

    fn deliver<'a>(&'a self, msg: &'a Outbound) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(self.route(msg))
    }

    /// A consult agent dispatches on `kind` (question, answer): a refusal
    /// is one more kind, never taken for a question to answer.
    fn tells_sender(&self) -> bool {
        true
    }

    fn reload(&self, cfg: &BridgeConfig) -> Result<Vec<String>, SourceError> {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Settings::of(cfg));
        Ok(Vec::new())
    }
}
