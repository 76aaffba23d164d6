//! What the command pump tells the reply pump: the ordered queue of
//! [`Slot`]s, one per reply the client is owed, queued *before* the command
//! goes upstream; and how the command pump ended ([`End`]).

use crate::conn::transaction::Admitted;
use crate::lane::consumers::Consumers;
use crate::lane::meter::Meter;
use std::borrow::Cow;

/// One reply the client is owed, in order.
#[derive(Debug)]
pub enum Slot {
    /// This many replies from upstream.
    Upstream(usize),
    /// One reply from upstream, to an XADD the meter admitted: counted
    /// answered when it is passed, or when the connection ends first.
    Append {
        /// Its family's index in the meter.
        family: usize,
        /// Its size.
        bytes: u64,
    },
    /// One reply from upstream, to a command the lane admitted with this
    /// consumer name: counted answered when it is passed, or when the
    /// connection ends first.
    Consumer(Vec<u8>),
    /// One reply from upstream, to the EXEC or DISCARD that ends a
    /// transaction: replaced by `replace` if given (the EXEC of a refused
    /// transaction, sent as DISCARD); then what its commands were admitted
    /// with is counted answered (or when the connection ends first).
    Settle {
        /// What the client gets instead of Redis's reply.
        replace: Option<Cow<'static, [u8]>>,
        /// The transaction's admitted accounting.
        held: Vec<Admitted>,
    },
    /// A reply the proxy makes.
    Local(Cow<'static, [u8]>),
    /// Close once everything before is written.
    Close,
}

/// How the command pump ended.
pub enum End {
    /// A `Close` slot was queued: let the reply pump finish.
    Graceful,
    /// Stop now.
    Abort,
}

/// Counts what `slot`'s command was admitted with answered.
pub fn release(slot: Slot, meter: &Meter, consumers: &Consumers) {
    match slot {
        Slot::Append { family, bytes } => meter.answered(family, bytes),
        Slot::Consumer(name) => consumers.answered(&name),
        Slot::Settle { held, .. } => {
            for a in held {
                a.release(meter, consumers);
            }
        }
        _ => {}
    }
}
