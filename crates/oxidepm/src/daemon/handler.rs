//! Answering requests: policy, audit, then the operation (in [`super::ops`]).

use super::errors::OpError;
use super::ops::SubscribeAsk;
use super::refusals::{thousands, Kind, Refusals, Verdict};
use super::Daemon;
use crate::access::{policy, Caller, Peer};
use crate::bus::{Feeds, Published};
use crate::server::Sink;
use crate::store::NewAudit;
use crate::supervise::{control, lock};
use crate::timefmt::{now_ms, rfc3339_ms};
use oxidepm_proto::{
    AuditRecord, ErrorBody, ErrorCode, Killed, Op, Reply, Request, Response, Streamed,
};
use std::sync::Arc;

/// How long a failing request past the written few of its kind waits
/// before its answer: a flood then costs its sender time, not the daemon.
const FLOOD_PENALTY: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a finished `kill` waits for its answer to be written before
/// the daemon exits anyway.
const KILL_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How a request is answered once the gate let it through. Most ops are
/// one reply from [`Daemon::execute`]; on a socket, `logs` and `subscribe`
/// stream, and `kill` answers once the daemon has stopped its apps. Each
/// way is counted as it always was: a reply is timed, a stream is counted
/// untimed (or, a subscription, not at all: its events are what it is for).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Reply,
    Logs,
    Subscribe,
    Kill,
}

impl Way {
    /// How `op` is answered on a socket.
    fn on_socket(op: &Op) -> Way {
        match op {
            Op::Logs { .. } => Way::Logs,
            Op::Subscribe { .. } => Way::Subscribe,
            Op::Kill => Way::Kill,
            _ => Way::Reply,
        }
    }
}

/// What a request answered with one reply is counted and audited by.
#[derive(Clone, Copy)]
struct Asked {
    id: u64,
    op: &'static str,
    /// Whether it only reads (not audited unless it fails).
    read: bool,
}

impl Asked {
    fn of(req: &Request) -> Asked {
        Asked {
            id: req.id,
            op: req.op.name(),
            read: policy::is_read(&req.op),
        }
    }
}

/// A request the gate let through.
struct Admitted {
    /// The apps the caller's grant narrowed a request without a selector to.
    only: Option<Vec<String>>,
    /// Names of the apps the request touches, for the audit and messages.
    apps: Vec<String>,
    /// When it arrived, for the latency the metrics keep.
    began: std::time::Instant,
}

impl Daemon {
    /// Handles one request and writes its answer; an I/O error means the
    /// connection is to be closed.
    pub async fn handle(
        self: &Arc<Self>,
        peer: &Peer,
        req: Request,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let mut caller = {
            let s = lock(&self.sup);
            self.gate().caller(&*s, peer, req.claim.as_deref())
        };
        caller.via = req.via.as_ref().map(|v| v.as_str().to_string());
        let way = Way::on_socket(&req.op);
        let admitted = match self.admit(&caller, way, &req).await {
            Ok(a) => a,
            Err(refused) => return sink.send(&refused).await,
        };
        let id = req.id;
        match req.op {
            op @ Op::Logs { .. } => {
                let actor = caller.actor.to_string();
                let ask = match super::ops::LogsAsk::of(op, actor, admitted.only) {
                    Ok(ask) => ask,
                    Err(e) => {
                        let e = ErrorBody::from(e);
                        self.count(&caller, "logs", Some(&e));
                        return sink.send(&Response::err(id, e)).await;
                    }
                };
                self.count(&caller, "logs", None);
                log::debug!("logs by {} via {}", caller.actor, caller.socket.as_str());
                self.stream_logs(id, ask, sink).await
            }
            Op::Subscribe { target, kinds } => {
                log::debug!(
                    "subscribe by {} via {}",
                    caller.actor,
                    caller.socket.as_str()
                );
                let holder = super::holder(peer);
                let ask = SubscribeAsk {
                    target,
                    kinds,
                    only: admitted.only,
                    owner: holder.key.0,
                    person: holder.person,
                };
                self.stream_subscription(id, &caller, ask, sink).await
            }
            Op::Kill => self.kill(caller, id, admitted.apps, sink).await,
            _ => {
                let resp = self.reply(&caller, req, admitted).await;
                sink.send(&resp).await
            }
        }
    }

    /// Answers one request that came through an agent's `ops` lane: a
    /// `subscribe` sets the agent's feed (its records go to its inbox),
    /// anything else is answered as on a socket.
    pub async fn answer_lane(&self, caller: &Caller, req: Request, feeds: &Feeds) -> Response {
        let Op::Subscribe {
            ref target,
            ref kinds,
        } = req.op
        else {
            return self.answer(caller, req).await;
        };
        let admitted = match self.admit(caller, Way::Subscribe, &req).await {
            Ok(a) => a,
            Err(refused) => return refused,
        };
        let ask = SubscribeAsk {
            target: target.clone(),
            kinds: kinds.clone(),
            only: admitted.only,
            owner: format!("lane {}", caller.actor.label),
            person: false,
        };
        match self.subscription(caller, ask) {
            Ok((head, sub)) => {
                feeds.set(&caller.actor.label, sub);
                match serde_json::to_value(Streamed::Subscribed(head)) {
                    Ok(v) => Response::ok(req.id, v),
                    Err(e) => Response::err(req.id, OpError::Answer(e).into()),
                }
            }
            Err(e) => Response::err(req.id, e.into()),
        }
    }

    /// Answers one request of `caller`: logs it, checks it, runs it and
    /// audits it. Used by both sockets and by the `ops` responder (where
    /// `logs` answers with the lines at once and `kill` is not offered).
    pub async fn answer(&self, caller: &Caller, req: Request) -> Response {
        match self.admit(caller, Way::Reply, &req).await {
            Ok(admitted) => self.reply(caller, req, admitted).await,
            Err(refused) => refused,
        }
    }

    /// The gate, once for every request: whether `caller` may do it and to
    /// which apps. A refusal is counted, audited and answered here, as its
    /// way of being answered counts it.
    async fn admit(&self, caller: &Caller, way: Way, req: &Request) -> Result<Admitted, Response> {
        let began = std::time::Instant::now();
        let mut apps: Vec<String> = Vec::new();
        let e = match self.authorize(caller, &req.op, &mut apps) {
            Ok(only) => return Ok(Admitted { only, apps, began }),
            Err(e) => ErrorBody::from(e),
        };
        let op_name = req.op.name();
        Err(match way {
            Way::Reply => {
                self.settle(caller, Asked::of(req), &apps, Err(e), began)
                    .await
            }
            Way::Logs | Way::Kill => {
                self.count(caller, op_name, Some(&e));
                self.audit(caller, op_name, &apps, Some(&e));
                Response::err(req.id, e)
            }
            Way::Subscribe => {
                self.audit(caller, op_name, &apps, Some(&e));
                Response::err(req.id, e)
            }
        })
    }

    /// Runs a request answered with one reply.
    async fn reply(&self, caller: &Caller, req: Request, admitted: Admitted) -> Response {
        let Admitted { only, apps, began } = admitted;
        let asked = Asked::of(&req);
        let (op_name, read) = (asked.op, asked.read);
        // Logged once let through: a refused request is logged (or only
        // counted) with its audit row.
        if read {
            log::debug!(
                "{op_name} by {} via {}",
                caller.actor,
                caller.socket.as_str()
            );
        } else {
            log::info!(
                "{op_name} by {} via {}",
                caller.actor,
                caller.socket.as_str()
            );
        }
        let before = self.storage_before();
        let answer = self.execute(caller, req.op, only).await;
        let answer = if read {
            answer
        } else {
            self.storage_after(op_name, answer, before)
        };
        let answer = answer.map_err(ErrorBody::from);
        self.settle(caller, asked, &apps, answer, began).await
    }

    /// Counts, audits and writes the answer of a request answered with one
    /// reply, refused or run.
    async fn settle(
        &self,
        caller: &Caller,
        asked: Asked,
        apps: &[String],
        answer: Result<Reply, ErrorBody>,
        began: std::time::Instant,
    ) -> Response {
        let Asked {
            id,
            op: op_name,
            read,
        } = asked;
        let (result, refused) = match &answer {
            Ok(_) => ("ok", false),
            Err(e) => (e.code.as_str(), is_refusal(e.code)),
        };
        self.metrics.request(
            caller.actor.class.as_str(),
            op_name,
            result,
            refused,
            Some(began.elapsed()),
        );
        if (!read || answer.is_err()) && !self.audit(caller, op_name, apps, answer.as_ref().err()) {
            // A flood of failing requests: answering it at full speed
            // would take the daemon's one thread from everyone else, so
            // each one past the written few waits before its answer.
            tokio::time::sleep(FLOOD_PENALTY).await;
        }
        let resp = match answer {
            Ok(r) => response(id, r),
            Err(e) => Response::err(id, e),
        };
        if matches!(op_name, "ping" | "status") {
            return self.with_warning(resp);
        }
        resp
    }

    /// Stops the daemon for a `kill` request, and answers it once the apps
    /// are stopped.
    async fn kill(
        self: &Arc<Self>,
        caller: Caller,
        id: u64,
        apps: Vec<String>,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        log::info!(actor:% = caller.actor; "kill by {} via {}", caller.actor, caller.socket.as_str());
        // A shutdown, once begun, completes whatever the client does: it
        // runs in a task of its own, which the connection going away does
        // not cancel, and which lets the daemon exit once the answer is
        // written (or the client is gone).
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let (answered_tx, answered_rx) = tokio::sync::oneshot::channel::<()>();
        let daemon = self.clone();
        tokio::spawn(async move {
            control::shutdown(&daemon.sup, &caller.actor).await;
            daemon.audit(&caller, "kill", &apps, None);
            if done_tx.send(()).is_ok() {
                // Bounded: a client that does not read its answer does not
                // keep the daemon up.
                let _ = tokio::time::timeout(KILL_ANSWER_WAIT, answered_rx).await;
            }
            daemon.exit.notify_one();
        });
        if done_rx.await.is_err() {
            return Ok(());
        }
        let sent = sink
            .send(&response(id, Killed { stopped: true }.into()))
            .await;
        let _ = answered_tx.send(());
        sent
    }

    /// Counts a request answered outside [`Daemon::answer`] (`logs`, a
    /// refused `kill`) for the metrics; not timed.
    fn count(&self, caller: &Caller, op: &'static str, error: Option<&ErrorBody>) {
        let (result, refused) = match error {
            None => ("ok", false),
            Some(e) => (e.code.as_str(), is_refusal(e.code)),
        };
        let class = caller.actor.class.as_str();
        self.metrics.request(class, op, result, refused, None);
    }

    /// Writes the audit row of a request: `ok`, or the code and message
    /// of `error`. A request that failed changed nothing, so beyond the
    /// first few of a kind in a window it is only counted (see
    /// [`super::refusals`]); what changed something is always written.
    ///
    /// Returns false when the row was only counted (the caller is flooding).
    fn audit(&self, caller: &Caller, op: &str, apps: &[String], error: Option<&ErrorBody>) -> bool {
        let (outcome, message) = match error {
            None => ("ok", ""),
            Some(e) => (e.code.as_str(), e.message.as_str()),
        };
        if let Some(e) = error {
            let kind = Kind {
                actor: caller.actor.clone(),
                socket: caller.socket.as_str().to_string(),
                op: op.to_string(),
                code: outcome.to_string(),
            };
            // Every refusal is streamed to the admins watching, even one
            // that is only counted here: they see a flood as it happens.
            if is_refusal(e.code) {
                self.publish_refusal(caller, op, apps, e);
            }
            let verdict = {
                let mut r = self.refusals();
                let due = r.next_due();
                let v = r.admit(kind, now_ms());
                if r.next_due() != due {
                    // The housekeeping timer sleeps until the earliest due.
                    self.refusals_due.notify_one();
                }
                v
            };
            if verdict == Verdict::Count {
                return false;
            }
            if is_refusal(e.code) {
                log::warn!("refused: {}", e.message);
            }
        }
        self.write_audit(&NewAudit {
            actor: &caller.actor,
            socket: caller.socket.as_str(),
            op,
            apps,
            outcome,
            message,
            via: caller.via.as_deref(),
        });
        true
    }

    /// Writes the summary rows of the refusal windows that are over (all
    /// of them when `all`, as the daemon stops).
    pub(super) fn close_refusal_windows(&self, all: bool) {
        let closed = {
            let mut r = self.refusals();
            if all {
                r.close_all()
            } else {
                r.close_due(now_ms())
            }
        };
        for s in closed {
            let noun = if is_refusal_code(&s.kind.code) {
                "refusals"
            } else {
                "failed requests"
            };
            let by = if s.others {
                " by other actors (too many were refused at once to count each apart)"
            } else {
                ""
            };
            let message = format!(
                "… and {} more {noun} of the same kind{by} from {} to {}",
                thousands(s.more),
                rfc3339_ms(s.first_ms),
                rfc3339_ms(s.last_ms)
            );
            log::warn!(
                "{} {} by {} via {}: {message}",
                s.kind.op,
                s.kind.code,
                s.kind.actor,
                s.kind.socket
            );
            self.write_audit(&NewAudit {
                actor: &s.kind.actor,
                socket: &s.kind.socket,
                op: &s.kind.op,
                apps: &[],
                outcome: &s.kind.code,
                message: &message,
                via: None,
            });
        }
    }

    /// Publishes a refused request on the bus (for admins' subscriptions).
    fn publish_refusal(&self, caller: &Caller, op: &str, apps: &[String], e: &ErrorBody) {
        let bus = lock(&self.sup).bus.clone();
        bus.publish(Published::Refusal(AuditRecord {
            seq: 0,
            at: rfc3339_ms(now_ms()),
            actor: caller.actor.clone(),
            socket: caller.socket.as_str().to_string(),
            op: op.to_string(),
            apps: apps.to_vec(),
            outcome: e.code.as_str().to_string(),
            message: e.message.clone(),
            via: caller.via.clone(),
        }));
    }

    pub(super) fn refusals(&self) -> std::sync::MutexGuard<'_, Refusals> {
        // Counting is all it does, so a panic elsewhere cannot leave it
        // half-changed: carry on with what it holds.
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_audit(&self, row: &NewAudit<'_>) {
        let s = lock(&self.sup);
        if let Err(e) = s.store.record_audit(row) {
            log::error!(
                "cannot write the audit row of {} by {}: {e}",
                row.op,
                row.actor
            );
        }
    }
}

fn is_refusal(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::PolicyDenied | ErrorCode::Protected)
}

fn is_refusal_code(code: &str) -> bool {
    [ErrorCode::PolicyDenied, ErrorCode::Protected]
        .iter()
        .any(|c| c.as_str() == code)
}

/// The final line of an answer. Answers are written through `Value`, so
/// their keys are sorted as clients have always seen them.
fn response(id: u64, answer: Reply) -> Response {
    match answer.to_value() {
        Ok(v) => Response::ok(id, v),
        Err(e) => Response::err(id, OpError::Answer(e).into()),
    }
}
