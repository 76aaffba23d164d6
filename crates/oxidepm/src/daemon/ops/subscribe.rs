//! `subscribe`: the event bus streamed to one client, under its read scope.
//!
//! A subscriber sees exactly the events `events` would show it (its grant
//! narrows them, app by app as each event happens), refusals only when it
//! is an admin, and a `missed` marker wherever its queue overflowed.

use crate::access::{Caller, Scope};
use crate::bus::{Filter, Next, Published, Subscription};
use crate::daemon::errors::OpError;
use crate::daemon::Daemon;
use crate::server::Sink;
use crate::supervise::lock;
use oxidepm_proto::{Response, Streamed, Subscribed, Tier, EVENT_KINDS, REFUSAL_KIND};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often a quiet subscription looks whether its client is gone.
const GONE_EVERY: Duration = Duration::from_millis(500);

/// What a `subscribe` asks for, once authorized.
pub struct SubscribeAsk {
    /// The selector, if any.
    pub target: Option<String>,
    /// The kinds asked for (all when empty).
    pub kinds: Vec<String>,
    /// The apps the caller's grant narrowed a request without a selector to.
    pub only: Option<Vec<String>>,
    /// Whose quota the subscription counts against (the connection's).
    pub owner: String,
    /// Whether the owner is a person, who may take the places kept for
    /// persons.
    pub person: bool,
}

/// The decided filter of one subscription.
struct Wanted {
    /// App ids of the selector, when one was given.
    ids: Option<BTreeSet<u64>>,
    /// Event kinds; all when `None`.
    kinds: Option<BTreeSet<String>>,
    /// Whether refusals are streamed.
    refusals: bool,
    /// The caller's read scope, applied to each event as it happens.
    scope: Scope,
}

impl Wanted {
    fn takes(&self, p: &Published) -> bool {
        match p {
            Published::Event { record, tags } => {
                let in_scope = match &self.scope {
                    Scope::All => true,
                    // Events of no app (orphans) name nothing a grant holds.
                    Scope::Only(_) => record.app_id != 0 && self.scope.covers(&record.app, tags),
                };
                in_scope
                    && self.ids.as_ref().is_none_or(|i| i.contains(&record.app_id))
                    && self
                        .kinds
                        .as_ref()
                        .is_none_or(|k| k.contains(record.kind.as_str()))
            }
            Published::Refusal(_) => self.refusals,
        }
    }
}

impl Daemon {
    /// Decides what `caller` is streamed: checks the kinds, resolves the
    /// selector and the refusals' rule.
    fn wanted(&self, caller: &Caller, ask: &SubscribeAsk) -> Result<Wanted, OpError> {
        let mut kinds = BTreeSet::new();
        for k in &ask.kinds {
            if k != REFUSAL_KIND && !EVENT_KINDS.contains(&k.as_str()) {
                return Err(OpError::BadKind {
                    kind: k.clone(),
                    known: format!("{}, {REFUSAL_KIND}", EVENT_KINDS.join(", ")),
                });
            }
            kinds.insert(k.clone());
        }
        // Refusals name other actors and what they tried: a person's or an
        // admin's business only, and never narrowed by a selector.
        let admin = caller.tier == Tier::Admin && caller.scope == Scope::All;
        let asked_refusals = kinds.remove(REFUSAL_KIND);
        if asked_refusals && !admin {
            return Err(OpError::RefusalsForAdmins {
                actor: caller.actor.clone(),
                tier: caller.tier,
            });
        }
        let refusals = admin && ask.target.is_none() && (asked_refusals || ask.kinds.is_empty());
        let only_refusals = asked_refusals && kinds.is_empty();
        let ids = match &ask.target {
            Some(t) => Some(lock(&self.sup).resolve(t)?.into_iter().collect()),
            None => None,
        };
        let kinds = if only_refusals {
            // Asked for refusals alone: no event kind at all.
            Some(BTreeSet::new())
        } else if kinds.is_empty() {
            None
        } else {
            Some(kinds)
        };
        Ok(Wanted {
            ids,
            kinds,
            refusals,
            scope: caller.scope.clone(),
        })
    }

    /// Subscribes `caller` to what `ask` wants of what it may see; returns
    /// the `subscribed` record and the subscription.
    pub(in crate::daemon) fn subscription(
        &self,
        caller: &Caller,
        ask: SubscribeAsk,
    ) -> Result<(Subscribed, Subscription), OpError> {
        let retired = self.gate().retired();
        let wanted = self.wanted(caller, &ask)?;
        let bus = lock(&self.sup).bus.clone();
        let head = Subscribed {
            apps: ask.target.map(|t| vec![t]).or(ask.only),
            kinds: wanted.kinds.iter().flatten().cloned().collect(),
            refusals: wanted.refusals,
        };
        // Nothing more once daemon.toml is reloaded: the caller's scope
        // was decided under grants that may have changed.
        let filter: Filter = Box::new(move |p| !retired.load(Ordering::SeqCst) && wanted.takes(p));
        Ok((head, bus.subscribe(&ask.owner, ask.person, filter)?))
    }

    /// `subscribe` on a socket: a `subscribed` item, then every record the
    /// subscriber may see as it is published, until the client goes. The
    /// publisher never waits for it: a client that does not keep up is
    /// sent a `missed` marker in place of what its queue could not hold.
    pub(in crate::daemon) async fn stream_subscription(
        self: &Arc<Self>,
        id: u64,
        caller: &Caller,
        ask: SubscribeAsk,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let retired = self.gate().retired();
        let (head, sub) = match self.subscription(caller, ask) {
            Ok(s) => s,
            Err(e) => return sink.send(&Response::err(id, e.into())).await,
        };
        send(sink, id, &Streamed::Subscribed(head)).await?;
        loop {
            let next = tokio::select! {
                n = sub.next() => n,
                _ = tokio::time::sleep(GONE_EVERY) => {
                    if sink.client_gone() {
                        return Ok(());
                    }
                    if retired.load(Ordering::SeqCst) {
                        let e = OpError::ConfigReloaded;
                        return sink.send(&Response::err(id, e.into())).await;
                    }
                    continue;
                }
            };
            let item = match next {
                Next::Missed(n) => Streamed::Missed(n),
                Next::Record(r) => match &*r {
                    Published::Event { record, .. } => Streamed::Event(record.clone()),
                    Published::Refusal(a) => Streamed::Refusal(a.clone()),
                },
            };
            send(sink, id, &item).await?;
        }
    }
}

async fn send(sink: &mut Sink, id: u64, item: &Streamed) -> std::io::Result<()> {
    let value = serde_json::to_value(item).map_err(std::io::Error::other)?;
    sink.send(&Response::item(id, value)).await
}
