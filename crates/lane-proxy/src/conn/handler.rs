//! One complete command of a connection, from the filter's verdict to
//! what happens: judged against the connection's state (its transaction,
//! the lane's rate limit, a responder's pending requests), admitted by
//! the lane (its outboxes' bounds, its consumer names), then acted on —
//! slots queued for the reply pump, bytes batched for upstream.

use crate::conn::answer::{self, not_pending, Answers};
use crate::conn::batch::{Batch, CHUNK};
use crate::conn::slot::Slot;
use crate::conn::transaction::{Admitted, Session, DISCARD};
use crate::conn::upstream_write;
use crate::filter::decide;
use crate::filter::handshake::{getname_reply, info_reply};
use crate::filter::verdict::{Policy, Verdict};
use crate::lane::settings::LaneSettings;
use crate::resp::{encode_args, error_reply, Command};
use crate::upstream::redis_version::redis_version;
use std::borrow::Cow;
use std::io;
use std::time::Instant;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// What goes upstream for one command, once it is judged and admitted.
enum Up {
    /// Nothing: answered by the proxy.
    Nothing,
    /// Nothing: refused by the proxy (inside a transaction, it aborts).
    Refused,
    /// Nothing, and the connection closes once earlier replies are out.
    Close,
    /// The command, with this key in place of its own if given.
    Command(Option<Vec<u8>>),
    /// These bytes in place of the command.
    Raw(Cow<'static, [u8]>),
    /// A responder's reply, as the script of `crate::conn::answer`: the
    /// outbox and request it answers.
    Script(String, Vec<u8>),
}

/// A connection's state between its commands.
pub struct Handler<'a, W> {
    s: &'a LaneSettings,
    policy: Policy<'a>,
    session: Session<'a>,
    answers: Answers,
    /// What goes upstream, and the slots for the reply pump.
    pub batch: Batch<'a, W>,
}

impl<'a, W: AsyncWrite + Unpin> Handler<'a, W> {
    /// A new connection's state on the lane of `s`.
    pub fn new(s: &'a LaneSettings, batch: Batch<'a, W>) -> Self {
        let policy = Policy {
            agent: &s.agent,
            families: s.meter.families(),
            max_consumer_name: s.limits.max_consumer_name,
            responder: s.responder,
            reply_maxlen: s.bounds.maxlen.unwrap_or(u64::MAX),
            reply_max_bytes: s.bounds.quota.map_or(usize::MAX, |q| q as usize),
        };
        Handler {
            s,
            policy,
            session: Session::new(&s.meter, &s.consumers, &s.transactions),
            answers: Answers::default(),
            batch,
        }
    }

    /// Handles `cmd`, whose bytes are `raw` (`canonical`: as Redis would
    /// be sent them). Returns whether the connection closes after it.
    pub async fn command(
        &mut self,
        cmd: &Command<'_>,
        raw: &[u8],
        canonical: bool,
    ) -> io::Result<bool> {
        let n = raw.len();
        let verdict = decide(cmd, &self.policy);
        let verdict = self.judge(cmd, n, verdict).await?;
        let up = self.act(cmd, n, verdict).await?;
        let closing = matches!(up, Up::Close);
        self.send_up(cmd, raw, canonical, up).await?;
        Ok(closing)
    }

    /// The filter's verdict, as the connection's state has it: a reply in
    /// a transaction checked early, an EXEC whose replies are checked, a
    /// MULTI waiting for the rate limit, work past the rate limit refused,
    /// and what cannot be queued in a transaction refused.
    async fn judge(
        &mut self,
        cmd: &Command<'_>,
        n: usize,
        mut verdict: Verdict,
    ) -> io::Result<Verdict> {
        let s = self.s;
        if let Verdict::Answer { outbox, request } = &verdict {
            if self.session.in_transaction() {
                let (outbox, request) = (outbox.clone(), request.clone());
                if let Some(refusal) = self.queued_answer(outbox, request).await? {
                    verdict = refusal;
                }
            }
        }
        if matches!(verdict, Verdict::Exec) && !self.session.queued_answers().is_empty() {
            self.check_answers().await?;
        }
        if matches!(verdict, Verdict::Multi) && !self.session.in_transaction() && s.rate.is_some() {
            // What came before goes out before this waits.
            self.batch.flush().await?;
            rate_wait(s).await;
        }
        if costs_rate(&verdict, self.session.in_transaction()) && !rate_ok(s) {
            verdict = Verdict::Reply(Cow::Owned(error_reply(&format!(
                "OXIDEPM rate: agent '{}' sends more than its {} commands per second \
                 (lanes.rate_limit); slow down",
                s.agent,
                s.rate
                    .as_ref()
                    .map_or(0.0, |r| r.lock().map_or(0.0, |b| b.rate()))
            ))));
        }
        if self.session.in_transaction() {
            verdict = queued(verdict, cmd, n, &mut self.session, s);
        }
        Ok(verdict)
    }

    /// A reply queued in a transaction: the refusal it gets now, if it
    /// answers a request this transaction answers already or one not
    /// pending; else it is queued, to be checked again at EXEC.
    async fn queued_answer(
        &mut self,
        outbox: String,
        request: Vec<u8>,
    ) -> io::Result<Option<Verdict>> {
        let early = if self.session.answers(&outbox, &request) {
            Some(Verdict::Reply(Cow::Owned(error_reply(&format!(
                "{}; this transaction has a reply to it already",
                not_pending(self.s.agent.as_str(), &outbox, &request)
            )))))
        } else {
            // What came before goes out first (an XACK, say): the check
            // then sees Redis after it.
            self.batch.flush().await?;
            self.answers.judge(self.s, &outbox, &request).await
        };
        if early.is_none() {
            self.session.answer_queued(outbox, request);
        }
        Ok(early)
    }

    /// At EXEC: each reply queued is still pending, or the transaction
    /// aborts rather than run with a reply that would fail inside it.
    async fn check_answers(&mut self) -> io::Result<()> {
        self.batch.flush().await?;
        for (outbox, request) in self.session.queued_answers().to_vec() {
            if self
                .answers
                .judge(self.s, &outbox, &request)
                .await
                .is_some()
            {
                self.session.refused();
                break;
            }
        }
        Ok(())
    }

    /// Acts on `verdict`: admits what the lane bounds, queues the slots
    /// of the replies, and says what goes upstream.
    async fn act(&mut self, cmd: &Command<'_>, n: usize, verdict: Verdict) -> io::Result<Up> {
        let s = self.s;
        Ok(match verdict {
            Verdict::Forward => {
                self.batch.forwarded();
                Up::Command(None)
            }
            Verdict::DelConsumer => {
                s.consumers.deleted();
                self.batch.forwarded();
                Up::Command(None)
            }
            Verdict::Consume { arg } => self.consume(cmd.arg(arg)).await?,
            Verdict::Append { family, key } => self.append(family, n as u64, key).await?,
            Verdict::Multi => {
                self.session.multi();
                self.batch.forwarded();
                Up::Command(None)
            }
            Verdict::Exec | Verdict::Discard => self.end(matches!(verdict, Verdict::Exec))?,
            Verdict::Hello { protover, name } => self.hello(cmd, protover, name),
            Verdict::SetName { arg } => {
                self.session.name = Some(cmd.arg(arg).to_vec());
                self.batch.queue(Slot::Local(Cow::Borrowed(b"+OK\r\n")))?;
                Up::Nothing
            }
            Verdict::GetName => {
                let r = getname_reply(self.session.name.as_deref(), self.session.resp3);
                self.batch.queue(Slot::Local(Cow::Owned(r)))?;
                Up::Nothing
            }
            Verdict::Info => {
                self.batch.slots()?;
                let r = info(s).await;
                self.batch.send(Slot::Local(Cow::Owned(r)))?;
                Up::Nothing
            }
            Verdict::Reply(r) => {
                log::debug!("lane {}: answered {:?} locally", s.agent, cmd);
                let refused = r.starts_with(b"-");
                self.batch.queue(Slot::Local(r))?;
                if refused {
                    Up::Refused
                } else {
                    Up::Nothing
                }
            }
            Verdict::Answer { outbox, request } => {
                self.batch.forwarded();
                Up::Script(outbox, request)
            }
            Verdict::ReplyAndClose(r) => {
                self.batch.queue(Slot::Local(r))?;
                self.batch.send(Slot::Close)?;
                Up::Close
            }
        })
    }

    /// A command that may create consumer `name`: forwarded if the lane
    /// admits the name.
    async fn consume(&mut self, name: &[u8]) -> io::Result<Up> {
        let s = self.s;
        self.batch.slots()?;
        let max = s.limits.max_consumers;
        match s.consumers.admit(name, max, &s.route, &s.password).await {
            Ok(()) => {
                match self.session.admitted(Admitted::Consumer(name.to_vec())) {
                    Some(_) => self.batch.send(Slot::Consumer(name.to_vec()))?,
                    None => self.batch.send(Slot::Upstream(1))?,
                }
                Ok(Up::Command(None))
            }
            Err(why) => {
                self.batch
                    .send(Slot::Local(Cow::Owned(error_reply(&why))))?;
                Ok(Up::Refused)
            }
        }
    }

    /// An XADD of `bytes` to the outbox of family `family`: forwarded (with
    /// `key`, if given) if the meter admits it.
    async fn append(&mut self, family: usize, bytes: u64, key: Option<Vec<u8>>) -> io::Result<Up> {
        let s = self.s;
        self.batch.slots()?;
        let mut admitted = s.meter.admit(family, bytes);
        if admitted.is_err() {
            // The estimate may count what is in flight twice: send what is
            // admitted, then ask for a new count.
            self.batch.write().await?;
            s.meter.fresh().await;
            admitted = s.meter.admit(family, bytes);
        }
        match admitted {
            Ok(()) => {
                match self.session.admitted(Admitted::Append { family, bytes }) {
                    Some(_) => self.batch.send(Slot::Append { family, bytes })?,
                    None => self.batch.send(Slot::Upstream(1))?,
                }
                Ok(Up::Command(key))
            }
            Err(why) => {
                log::debug!("lane {}: XADD refused: {why}", s.agent);
                self.batch
                    .send(Slot::Local(Cow::Owned(error_reply(&why))))?;
                Ok(Up::Refused)
            }
        }
    }

    /// EXEC (`exec`) or DISCARD: the end of the transaction, if one is
    /// open; an aborted one's EXEC goes upstream as DISCARD.
    fn end(&mut self, exec: bool) -> io::Result<Up> {
        let Some(ending) = self.session.end(exec) else {
            // Not in a transaction: Redis answers its error.
            self.batch.forwarded();
            return Ok(Up::Command(None));
        };
        let up = if ending.replace.is_some() {
            Up::Raw(Cow::Borrowed(DISCARD))
        } else {
            Up::Command(None)
        };
        self.batch.queue(Slot::Settle {
            replace: ending.replace,
            held: ending.held,
        })?;
        Ok(up)
    }

    /// HELLO: its protocol and name are kept; it goes upstream without the
    /// name.
    fn hello(&mut self, cmd: &Command<'_>, protover: Option<usize>, name: Option<usize>) -> Up {
        if let Some(i) = name {
            self.session.name = Some(cmd.arg(i).to_vec());
        }
        if let Some(i) = protover {
            match cmd.arg(i) {
                b"3" => self.session.resp3 = true,
                b"2" => self.session.resp3 = false,
                _ => {}
            }
        }
        self.batch.forwarded();
        if name.is_some() {
            let mut hello = Vec::with_capacity(32);
            let args: Vec<&[u8]> = cmd.args().take(2).collect();
            encode_args(&mut hello, &args);
            Up::Raw(Cow::Owned(hello))
        } else {
            Up::Command(None)
        }
    }

    /// Sends on what `up` says: batched, or (a command larger than a
    /// batch) written from where it lies, after what is batched.
    async fn send_up(
        &mut self,
        cmd: &Command<'_>,
        raw: &[u8],
        canonical: bool,
        up: Up,
    ) -> io::Result<()> {
        let large = raw.len() > CHUNK;
        match up {
            Up::Nothing | Up::Close => {}
            Up::Refused => self.session.refused(),
            Up::Raw(bytes) => self.batch.bytes().extend_from_slice(&bytes),
            Up::Script(outbox, request) => {
                let name = self.s.agent.as_str();
                if large {
                    let uw = self.batch.direct().await?;
                    answer::write(uw, cmd, name, &outbox, &request).await?;
                } else {
                    answer::encode(self.batch.bytes(), cmd, name, &outbox, &request);
                }
            }
            Up::Command(key) => {
                let as_is = key.is_none() && canonical;
                if large {
                    // The slots for it are queued already.
                    let uw = self.batch.direct().await?;
                    if as_is {
                        uw.write_all(raw).await?;
                    } else {
                        upstream_write::write_with_key(uw, cmd, key.as_deref()).await?;
                    }
                } else if as_is {
                    self.batch.bytes().extend_from_slice(raw);
                } else {
                    upstream_write::encode_with_key(self.batch.bytes(), cmd, key.as_deref());
                }
            }
        }
        Ok(())
    }
}

/// INFO's reply: Redis's version, asked once per proxy process.
async fn info(s: &LaneSettings) -> Vec<u8> {
    match redis_version(&s.route, &s.user(), &s.password).await {
        Ok(v) => info_reply(v),
        Err(e) => {
            log::warn!("lane {}: cannot learn Redis's version: {e}", s.agent);
            error_reply(&format!(
                "ERR lane proxy: cannot learn Redis's version for INFO ({e}); try again"
            ))
        }
    }
}

/// Whether `v` sends work upstream, and so takes from the rate limit
/// (refused past it). The MULTI that opens a transaction, and the EXEC or
/// DISCARD that ends it, do not: refusing one of them would run the
/// commands around it outside the transaction the client asked for; that
/// MULTI waits for its token instead ([`rate_wait`]). A nested MULTI, or
/// EXEC or DISCARD without a transaction, is a plain error of Redis's,
/// work like any other.
fn costs_rate(v: &Verdict, in_transaction: bool) -> bool {
    match v {
        Verdict::Forward
        | Verdict::Append { .. }
        | Verdict::Consume { .. }
        | Verdict::DelConsumer
        | Verdict::Answer { .. }
        | Verdict::Hello { .. } => true,
        Verdict::Multi => in_transaction,
        Verdict::Exec | Verdict::Discard => !in_transaction,
        _ => false,
    }
}

/// Waits for a token of the lane's rate limit, and takes it: how the
/// MULTI that opens a transaction is limited without being refused
/// (otherwise empty transactions would pass the limit).
async fn rate_wait(s: &LaneSettings) {
    let Some(rate) = &s.rate else {
        return;
    };
    loop {
        let wait = match rate.lock() {
            Ok(mut b) => b.take_or_wait(Instant::now()),
            Err(_) => None,
        };
        match wait {
            None => return,
            Some(d) => tokio::time::sleep(d).await,
        }
    }
}

/// Inside a transaction: what the proxy would answer itself is refused
/// (it cannot be queued), and a command to be queued upstream must fit
/// the transaction's bounds.
fn queued(
    verdict: Verdict,
    cmd: &Command<'_>,
    n: usize,
    session: &mut Session<'_>,
    s: &LaneSettings,
) -> Verdict {
    match verdict {
        Verdict::Forward
        | Verdict::Append { .. }
        | Verdict::Consume { .. }
        | Verdict::DelConsumer => match session.queue(n, cmd.len(), &s.limits) {
            Ok(()) => verdict,
            Err(why) => Verdict::Reply(Cow::Owned(error_reply(&why))),
        },
        // It goes upstream as the script of `crate::conn::answer`.
        Verdict::Answer { .. } => {
            match session.queue(n + answer::OVERHEAD, cmd.len() + 6, &s.limits) {
                Ok(()) => verdict,
                Err(why) => Verdict::Reply(Cow::Owned(error_reply(&why))),
            }
        }
        Verdict::SetName { .. } | Verdict::GetName | Verdict::Info | Verdict::Hello { .. } => {
            Verdict::Reply(Cow::Owned(Session::local_inside(cmd.arg(0))))
        }
        Verdict::Reply(r) if !r.starts_with(b"-") => {
            Verdict::Reply(Cow::Owned(Session::local_inside(cmd.arg(0))))
        }
        other => other,
    }
}

fn rate_ok(s: &LaneSettings) -> bool {
    match &s.rate {
        Some(rate) => rate
            .lock()
            .map(|mut b| b.try_take(Instant::now()))
            .unwrap_or(true),
        None => true,
    }
}
