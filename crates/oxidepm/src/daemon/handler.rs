//! Answering requests: policy, audit, then the operation (in [`super::ops`]).

use super::errors::OpError;
use super::Daemon;
use crate::access::{policy, Caller, Peer};
use crate::server::Sink;
use crate::store::NewAudit;
use crate::supervise::{control, lock};
use oxidepm_proto::{ErrorBody, Killed, Op, Reply, Request, Response};
use std::sync::Arc;

impl Daemon {
    /// Handles one request and writes its answer; an I/O error means the
    /// connection is to be closed.
    pub async fn handle(
        self: &Arc<Self>,
        peer: &Peer,
        req: Request,
        sink: &mut Sink,
    ) -> std::io::Result<()> {
        let caller = {
            let s = lock(&self.sup);
            self.gate.caller(&*s, peer, req.claim.as_deref())
        };
        let id = req.id;
        match req.op {
            Op::Logs {
                ref target,
                lines,
                follow,
                stream,
            } => {
                let mut apps = Vec::new();
                if let Err(e) = self.authorize(&caller, &req.op, &mut apps) {
                    let e = ErrorBody::from(e);
                    self.audit(&caller, "logs", &apps, Some(&e));
                    return sink.send(&Response::err(id, e)).await;
                }
                log::debug!("logs by {} via {}", caller.actor, caller.socket.as_str());
                let ask = super::ops::LogsAsk {
                    target,
                    lines,
                    follow,
                    stream,
                    actor: caller.actor.to_string(),
                };
                self.stream_logs(id, ask, sink).await
            }
            Op::Kill => {
                let mut apps = Vec::new();
                if let Err(e) = self.authorize(&caller, &req.op, &mut apps) {
                    let e = ErrorBody::from(e);
                    self.audit(&caller, "kill", &apps, Some(&e));
                    return sink.send(&Response::err(id, e)).await;
                }
                log::info!("kill by {} via {}", caller.actor, caller.socket.as_str());
                control::shutdown(&self.sup, &caller.actor).await;
                self.audit(&caller, "kill", &apps, None);
                sink.send(&response(id, Killed { stopped: true }.into()))
                    .await?;
                self.exit.notify_one();
                Ok(())
            }
            _ => {
                let resp = self.answer(&caller, req).await;
                sink.send(&resp).await
            }
        }
    }

    /// Answers one request of `caller`: logs it, checks it, runs it and
    /// audits it. Used by both sockets and by the `ops` responder (where
    /// `logs` answers with the lines at once and `kill` is not offered).
    pub async fn answer(&self, caller: &Caller, req: Request) -> Response {
        let id = req.id;
        let op_name = req.op.name();
        let read = policy::is_read(&req.op);
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
        // Names of the apps the request touches, for the audit and messages.
        let mut apps: Vec<String> = Vec::new();
        let answer = match self.authorize(caller, &req.op, &mut apps) {
            Err(e) => Err(OpError::from(e)),
            Ok(only) => self.execute(caller, req.op, only).await,
        };
        let refused = answer.as_ref().is_err_and(|e| e.refusal().is_some());
        let answer = answer.map_err(ErrorBody::from);
        if !read || answer.is_err() {
            self.audit(caller, op_name, &apps, answer.as_ref().err());
        }
        match answer {
            Ok(r) => response(id, r),
            Err(e) => {
                if refused {
                    log::warn!("refused: {}", e.message);
                }
                Response::err(id, e)
            }
        }
    }

    /// Writes the audit row of a request: `ok`, or the code and message
    /// of `error`.
    fn audit(&self, caller: &Caller, op: &str, apps: &[String], error: Option<&ErrorBody>) {
        let (outcome, message) = match error {
            None => ("ok", ""),
            Some(e) => (e.code.as_str(), e.message.as_str()),
        };
        let s = lock(&self.sup);
        if let Err(e) = s.store.record_audit(&NewAudit {
            actor: &caller.actor,
            socket: caller.socket.as_str(),
            op,
            apps,
            outcome,
            message,
        }) {
            log::error!(
                "cannot write the audit row of {op} by {}: {e}",
                caller.actor
            );
        }
    }
}

/// The final line of an answer. Answers are written through `Value`, so
/// their keys are sorted as clients have always seen them.
fn response(id: u64, answer: Reply) -> Response {
    match answer.to_value() {
        Ok(v) => Response::ok(id, v),
        Err(e) => Response::err(id, OpError::Answer(e).into()),
    }
}
