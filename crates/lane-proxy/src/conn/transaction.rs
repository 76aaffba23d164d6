//! One connection's state in the command pump: its client name, its
//! protocol, and its transaction.
//!
//! Inside MULTI every command goes through the same filter and bounds as
//! outside. One the proxy refuses gets its error *and* marks the
//! transaction aborted: its EXEC then goes upstream as DISCARD and the
//! client gets `EXECABORT`, as Redis answers a transaction with a
//! queueing error. So nothing of a transaction the client was told failed
//! ever runs. Redis answers its own queueing errors (arity, ACL) the same
//! way by itself.
//!
//! An XADD the meter admitted, or a consumer name the lane admitted,
//! inside MULTI runs only at EXEC: its accounting stays in flight
//! ([`Admitted`]) until the reply to the EXEC (or DISCARD) is passed, or
//! the connection ends — not when `+QUEUED` comes back, or a transaction
//! of many XADDs would pass the outbox bound.
//!
//! Redis puts no bound on what one transaction queues; the proxy does:
//! `limits.max_transaction_commands` per transaction, and
//! `limits.max_transaction_bytes` for the lane's open transactions
//! together ([`Queued`]). Queued commands are Redis's memory until EXEC,
//! counted against `maxmemory` like the other agents' messages: per
//! connection, the lane's connections could together hold many times the
//! bound, and a command of many small arguments costs Redis several times
//! its size, so each argument is weighed with what Redis keeps for it.

use crate::lane::consumers::Consumers;
use crate::lane::meter::Meter;
use crate::resp::error_reply;
use oxidepm_lanes::LimitsConfig;
use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the client is told when EXEC ends a transaction the proxy refused
/// a command of (Redis's own words).
pub const EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
/// What goes upstream instead of EXEC then.
pub const DISCARD: &[u8] = b"*1\r\n$7\r\nDISCARD\r\n";

/// What Redis keeps for one queued argument besides its bytes: its object
/// (16 bytes, its string's header and allocator rounding) and its place
/// in the argument vector, which may be twice the arguments.
pub const ARG_COST: usize = 48;

/// The weight of a queued command of `bytes` and `args` arguments.
fn weight(bytes: usize, args: usize) -> usize {
    bytes.saturating_add(args.saturating_mul(ARG_COST))
}

/// What a lane's open transactions have queued in Redis, weighed by
/// [`weight`]; shared by the lane's connections.
#[derive(Debug, Default)]
pub struct Queued(AtomicUsize);

impl Queued {
    /// Adds `w` if the total stays within `max`.
    fn take(&self, w: usize, max: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                q.checked_add(w).filter(|&t| t <= max)
            })
            .is_ok()
    }

    /// Gives back `w` (a transaction ended).
    fn give(&self, w: usize) {
        self.0.fetch_sub(w, Ordering::Relaxed);
    }

    /// The weight queued now.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Accounting admitted for a command that has not run yet.
#[derive(Debug)]
pub enum Admitted {
    /// An XADD the meter admitted: family index and size.
    Append {
        /// Its family's index in the meter.
        family: usize,
        /// Its size.
        bytes: u64,
    },
    /// A command the lane admitted with this consumer name.
    Consumer(Vec<u8>),
}

impl Admitted {
    /// Counts the command answered (it ran, or never will).
    pub fn release(self, meter: &Meter, consumers: &Consumers) {
        match self {
            Admitted::Append { family, bytes } => meter.answered(family, bytes),
            Admitted::Consumer(name) => consumers.answered(&name),
        }
    }
}

/// An open transaction.
#[derive(Debug, Default)]
struct Transaction {
    /// A command was refused by the proxy: EXEC becomes DISCARD.
    aborted: bool,
    /// Commands queued upstream so far.
    commands: usize,
    /// Their weight, held in the lane's [`Queued`].
    weight: usize,
    /// Admitted accounting of the queued commands.
    held: Vec<Admitted>,
    /// The replies queued (a responder's lane): the outbox and request
    /// each answers, checked again at EXEC.
    answers: Vec<(String, Vec<u8>)>,
}

/// How EXEC or DISCARD ends a transaction.
#[derive(Debug)]
pub struct Ending {
    /// Send DISCARD upstream and answer this instead of its reply.
    pub replace: Option<Cow<'static, [u8]>>,
    /// To release once the reply is passed.
    pub held: Vec<Admitted>,
}

/// One connection's state; dropping it releases what an open transaction
/// holds (the connection ended: Redis discards the transaction).
pub struct Session<'a> {
    meter: &'a Meter,
    consumers: &'a Consumers,
    queued: &'a Queued,
    /// `CLIENT SETNAME`'s or `HELLO … SETNAME`'s name.
    pub name: Option<Vec<u8>>,
    /// The connection said `HELLO 3`.
    pub resp3: bool,
    tx: Option<Transaction>,
}

impl<'a> Session<'a> {
    /// A new connection's state.
    pub fn new(meter: &'a Meter, consumers: &'a Consumers, queued: &'a Queued) -> Session<'a> {
        Session {
            meter,
            consumers,
            queued,
            name: None,
            resp3: false,
            tx: None,
        }
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.tx.is_some()
    }

    /// MULTI was forwarded. A nested MULTI changes nothing (Redis answers
    /// an error and keeps the transaction).
    pub fn multi(&mut self) {
        self.tx.get_or_insert_with(Transaction::default);
    }

    /// Inside a transaction, a command of `bytes` and `args` arguments is
    /// about to be queued upstream: `Err` is the refusal's text when it
    /// would pass a bound.
    pub fn queue(
        &mut self,
        bytes: usize,
        args: usize,
        limits: &LimitsConfig,
    ) -> Result<(), String> {
        let Some(tx) = &mut self.tx else {
            return Ok(());
        };
        if tx.commands + 1 > limits.max_transaction_commands {
            return Err(format!(
                "OXIDEPM transaction: more than {} commands in one transaction \
                 (lanes.limits.max_transaction_commands); the transaction is discarded, \
                 send smaller ones",
                limits.max_transaction_commands
            ));
        }
        let w = weight(bytes, args);
        if !self.queued.take(w, limits.max_transaction_bytes) {
            return Err(format!(
                "OXIDEPM transaction: more than {} bytes queued in the agent's open \
                 transactions (lanes.limits.max_transaction_bytes; each argument counts \
                 {ARG_COST} bytes more, what Redis keeps for it); the transaction is \
                 discarded, send smaller ones or end the others first",
                limits.max_transaction_bytes
            ));
        }
        tx.commands += 1;
        tx.weight += w;
        Ok(())
    }

    /// The proxy refused a command: inside a transaction, it is aborted.
    pub fn refused(&mut self) {
        if let Some(tx) = &mut self.tx {
            tx.aborted = true;
        }
    }

    /// Accounting admitted for a forwarded command: returned for its
    /// reply's slot outside a transaction; held until the transaction
    /// ends inside one (`None`: the reply is a plain one).
    pub fn admitted(&mut self, a: Admitted) -> Option<Admitted> {
        match &mut self.tx {
            Some(tx) => {
                tx.held.push(a);
                None
            }
            None => Some(a),
        }
    }

    /// A reply passed its check and is queued: it is checked again at EXEC,
    /// when it runs (the request may have been acknowledged, or its agent
    /// deleted and made anew, since).
    pub fn answer_queued(&mut self, outbox: String, request: Vec<u8>) {
        if let Some(tx) = &mut self.tx {
            tx.answers.push((outbox, request));
        }
    }

    /// Whether the open transaction has a reply to `request` of `outbox`
    /// queued already: a second would answer nothing when it runs.
    pub fn answers(&self, outbox: &str, request: &[u8]) -> bool {
        self.queued_answers()
            .iter()
            .any(|(o, r)| o == outbox && r == request)
    }

    /// The replies queued in the open transaction, to check before EXEC.
    pub fn queued_answers(&self) -> &[(String, Vec<u8>)] {
        self.tx.as_ref().map_or(&[], |tx| &tx.answers)
    }

    /// EXEC or DISCARD: how the open transaction ends, if one is open.
    pub fn end(&mut self, exec: bool) -> Option<Ending> {
        let mut tx = self.tx.take()?;
        // Redis frees the queue as it runs EXEC (or DISCARD), next.
        self.queued.give(tx.weight);
        Some(Ending {
            replace: (exec && tx.aborted).then_some(Cow::Borrowed(EXECABORT)),
            held: std::mem::take(&mut tx.held),
        })
    }

    /// A local answer inside a transaction is refused: the text to send.
    pub fn local_inside(cmd: &[u8]) -> Vec<u8> {
        let name: String = cmd
            .iter()
            .take(40)
            .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
            .collect();
        error_reply(&format!(
            "OXIDEPM '{name}' is answered by the lane proxy and cannot be queued in a \
             transaction; send it before MULTI (the transaction is discarded)"
        ))
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            self.queued.give(tx.weight);
            for a in tx.held {
                a.release(self.meter, self.consumers);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane() -> (std::sync::Arc<Meter>, Consumers) {
        let families = vec!["discord".to_string()];
        let alice: oxidepm_lanes::AgentName = "alice".parse().unwrap();
        (
            Meter::new(alice.clone(), families.clone()),
            Consumers::new(alice, &families),
        )
    }

    #[test]
    fn a_refusal_turns_exec_into_execabort_and_discard_clears() {
        let (meter, consumers) = lane();
        let queued = Queued::default();
        let mut s = Session::new(&meter, &consumers, &queued);
        assert!(
            s.end(true).is_none(),
            "EXEC without MULTI is Redis's to answer"
        );
        s.refused();
        s.multi();
        s.multi();
        assert!(s.in_transaction());
        s.refused();
        let e = s.end(true).unwrap();
        assert_eq!(e.replace.as_deref(), Some(EXECABORT));
        assert!(!s.in_transaction());
        s.multi();
        s.refused();
        let e = s.end(false).unwrap();
        assert!(e.replace.is_none(), "DISCARD answers its own +OK");
        s.multi();
        assert!(s.end(true).unwrap().replace.is_none());
    }

    #[test]
    fn admitted_accounting_is_held_until_the_end() {
        let (meter, consumers) = lane();
        let queued = Queued::default();
        let mut s = Session::new(&meter, &consumers, &queued);
        assert!(s.admitted(Admitted::Consumer(b"c".to_vec())).is_some());
        s.multi();
        assert!(s.admitted(Admitted::Consumer(b"c".to_vec())).is_none());
        assert!(s
            .admitted(Admitted::Append {
                family: 0,
                bytes: 9
            })
            .is_none());
        assert_eq!(s.end(true).unwrap().held.len(), 2);
    }

    #[test]
    fn transactions_are_bounded() {
        let (meter, consumers) = lane();
        let limits = LimitsConfig {
            max_transaction_commands: 2,
            max_transaction_bytes: 100,
            ..LimitsConfig::default()
        };
        let queued = Queued::default();
        let mut s = Session::new(&meter, &consumers, &queued);
        assert!(s.queue(1000, 9, &limits).is_ok(), "outside a transaction");
        s.multi();
        s.queue(10, 0, &limits).unwrap();
        s.queue(10, 0, &limits).unwrap();
        let e = s.queue(10, 0, &limits).unwrap_err();
        assert!(e.contains("max_transaction_commands"), "{e}");
        s.end(false);
        assert_eq!(queued.total(), 0);
        s.multi();
        let e = s.queue(101, 0, &limits).unwrap_err();
        assert!(e.contains("max_transaction_bytes"), "{e}");
        let e = s.queue(10, 2, &limits).unwrap_err();
        assert!(e.contains("max_transaction_bytes"), "arguments weigh: {e}");
    }

    #[test]
    fn the_bytes_bound_is_the_lanes_and_given_back_at_the_end() {
        let (meter, consumers) = lane();
        let limits = LimitsConfig {
            max_transaction_bytes: 100,
            ..LimitsConfig::default()
        };
        let queued = Queued::default();
        let mut a = Session::new(&meter, &consumers, &queued);
        let mut b = Session::new(&meter, &consumers, &queued);
        a.multi();
        b.multi();
        a.queue(60, 0, &limits).unwrap();
        assert!(
            b.queue(60, 0, &limits).is_err(),
            "the lane's, not each one's"
        );
        a.end(true);
        b.queue(60, 0, &limits).unwrap();
        drop(b);
        assert_eq!(queued.total(), 0, "a connection's end gives it back");
    }
}
