//! Outbox entries as the reader reads them: piece by piece off the
//! [`Wire`], each entry kept only if it fits its outbox's byte budget, and
//! judged leniently, one entry at a time.
//!
//! An entry larger than `max_entry_bytes` is not kept at all (its bytes
//! are skipped as they arrive): it becomes [`Body::TooLarge`]. An entry
//! whose field names or values are not UTF-8 is [`Body::Malformed`], with
//! its raw fields for the dead-letter stream. Either way the entry is
//! answered for (dead-lettered and acknowledged) and never stops the read
//! loop, the other entries of the reply, or a restarted bridge.

use crate::wire::{Header, Wire, WireError};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

/// Longest entry id Redis writes (`<u64>-<u64>`) with room to spare.
const MAX_ID: usize = 64;
/// Longest stream key the reader reads from.
const MAX_KEY: usize = 256;

/// One entry to deliver, dead-letter or acknowledge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id.
    pub id: String,
    /// Its size: field names and values.
    pub bytes: usize,
    /// What it holds.
    pub body: Body,
}

/// What an entry holds, as far as the bridge is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// Its fields, in order, with repeats.
    Fields(Vec<(String, String)>),
    /// Deleted while pending: only the acknowledgement is left to do.
    Deleted,
    /// Larger than `max_entry_bytes`: not read, not delivered.
    TooLarge,
    /// Not deliverable as it is (a field name or value that is not UTF-8,
    /// an odd number of field items): the reason, and its raw fields.
    Malformed {
        /// What is wrong with it.
        reason: String,
        /// Its fields as Redis holds them.
        raw: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

/// What a read did with one entry of an outbox.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// Kept (or judged): for the outbox's worker.
    Entry(Entry),
    /// Already with the worker (a pending entry read again): skipped.
    Held(String),
    /// Over the outbox's budget: skipped; it stays pending and is read
    /// again later, in order.
    Deferred(String),
}

impl Seen {
    /// The entry's id.
    pub fn id(&self) -> &str {
        match self {
            Seen::Entry(e) => &e.id,
            Seen::Held(id) | Seen::Deferred(id) => id,
        }
    }
}

/// How much of one outbox a read may keep.
#[derive(Debug, Clone)]
pub struct Budget {
    /// Bytes it may keep; the first entry is kept even when larger (up to
    /// `max_entry`), so that an outbox always moves.
    pub room: usize,
    /// Largest entry kept.
    pub max_entry: usize,
    /// Ids its worker holds already.
    pub held: HashSet<String>,
}

/// A budget being spent over one read.
struct Spending<'a> {
    budget: &'a Budget,
    kept: usize,
    any: bool,
    deferring: bool,
}

/// Reads an XREADGROUP reply (`[[key, entries], …]`, nil: nothing) under
/// the budgets of `budgets` (by key); streams without a budget are read
/// under an empty one.
pub async fn read_streams(
    wire: &mut Wire,
    budgets: &HashMap<String, Budget>,
) -> Result<Vec<(String, Vec<Seen>)>, WireError> {
    let n = match wire.expect().await? {
        Header::Array(None) | Header::Bulk(None) => return Ok(Vec::new()),
        Header::Array(Some(n)) => n,
        other => return Err(shape("XREADGROUP", &other)),
    };
    let none = Budget {
        room: 0,
        max_entry: 0,
        held: HashSet::new(),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        match wire.header().await? {
            Header::Array(Some(2)) => {}
            other => return Err(shape("a stream of XREADGROUP", &other)),
        }
        let key = small_text(wire, MAX_KEY, "a stream key").await?;
        let budget = budgets.get(&key).unwrap_or(&none);
        let seen = read_entries(wire, budget).await?;
        out.push((key, seen));
    }
    Ok(out)
}

/// Reads a list of entries (`[[id, fields], …]`).
pub async fn read_entries(wire: &mut Wire, budget: &Budget) -> Result<Vec<Seen>, WireError> {
    let n = match wire.header().await? {
        Header::Array(None) | Header::Bulk(None) => return Ok(Vec::new()),
        Header::Array(Some(n)) => n,
        other => return Err(shape("stream entries", &other)),
    };
    let mut s = Spending {
        budget,
        kept: 0,
        any: false,
        deferring: false,
    };
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        out.push(read_entry(wire, &mut s).await?);
    }
    Ok(out)
}

/// How an entry's fields are being read.
#[derive(PartialEq, Eq)]
enum Mode {
    Keep,
    TooLarge,
    Skip,
}

async fn read_entry(wire: &mut Wire, s: &mut Spending<'_>) -> Result<Seen, WireError> {
    let parts = match wire.header().await? {
        Header::Array(Some(n)) if n >= 1 => n,
        other => return Err(shape("a stream entry", &other)),
    };
    let id = small_text(wire, MAX_ID, "an entry id").await?;
    if parts == 1 {
        return Ok(Seen::Entry(Entry {
            id,
            bytes: 0,
            body: Body::Deleted,
        }));
    }
    let held = s.budget.held.contains(&id);
    let mut mode = if held || s.deferring {
        Mode::Skip
    } else {
        Mode::Keep
    };
    let mut bytes = 0usize;
    let mut raw: Vec<Vec<u8>> = Vec::new();
    let mut odd_item: Option<String> = None;
    let fields = wire.header().await?;
    let items = match fields {
        Header::Array(None) | Header::Bulk(None) => {
            // Anything after the fields is not Redis's; skip it.
            skip_rest(wire, parts - 2).await?;
            return Ok(if held {
                Seen::Held(id)
            } else {
                Seen::Entry(Entry {
                    id,
                    bytes: 0,
                    body: Body::Deleted,
                })
            });
        }
        Header::Array(Some(k)) => k,
        other => {
            odd_item = Some(format!("its fields are {other:?}, not a list"));
            wire.skip(other).await?;
            0
        }
    };
    for _ in 0..items {
        let h = wire.header().await?;
        let len = match h {
            Header::Bulk(Some(len)) => len,
            other => {
                odd_item.get_or_insert_with(|| format!("a field item is {other:?}"));
                wire.skip(other).await?;
                continue;
            }
        };
        bytes = bytes.saturating_add(len);
        if mode == Mode::Keep && bytes > s.budget.max_entry {
            mode = Mode::TooLarge;
            raw = Vec::new();
        }
        if mode == Mode::Keep && s.any && s.kept.saturating_add(bytes) > s.budget.room {
            // Past the budget: this entry and every later one of the
            // reply wait (order is kept).
            mode = Mode::Skip;
            s.deferring = true;
            raw = Vec::new();
        }
        if mode == Mode::Keep {
            raw.push(wire.bulk(len).await?);
        } else {
            wire.skip_bulk(len).await?;
        }
    }
    skip_rest(wire, parts - 2).await?;
    if held {
        return Ok(Seen::Held(id));
    }
    match mode {
        Mode::Skip => return Ok(Seen::Deferred(id)),
        Mode::TooLarge => {
            return Ok(Seen::Entry(Entry {
                id,
                bytes,
                body: Body::TooLarge,
            }))
        }
        Mode::Keep => {}
    }
    s.kept += bytes;
    s.any = true;
    Ok(Seen::Entry(Entry {
        id,
        bytes,
        body: judge(raw, odd_item),
    }))
}

/// Skips `n` more elements of the current array.
async fn skip_rest(wire: &mut Wire, n: usize) -> Result<(), WireError> {
    for _ in 0..n {
        let h = wire.header().await?;
        wire.skip(h).await?;
    }
    Ok(())
}

/// The body of an entry read in full: its fields, or why they cannot be
/// delivered.
fn judge(items: Vec<Vec<u8>>, odd_item: Option<String>) -> Body {
    let mut reason = odd_item;
    if items.len() % 2 == 1 {
        reason.get_or_insert_with(|| "an odd number of field items".into());
    }
    let mut raw: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let Some(k) = it.next() {
        raw.push((k, it.next().unwrap_or_default()));
    }
    if reason.is_none() {
        for (i, (k, v)) in raw.iter().enumerate() {
            if std::str::from_utf8(k).is_err() {
                reason = Some(format!(
                    "the name of field {} is not UTF-8 ({})",
                    i + 1,
                    preview(k)
                ));
                break;
            }
            if std::str::from_utf8(v).is_err() {
                let name = String::from_utf8_lossy(k);
                reason = Some(format!("the value of field {name:?} is not UTF-8"));
                break;
            }
        }
    }
    match reason {
        Some(reason) => Body::Malformed {
            reason: format!("not deliverable: {reason}"),
            raw,
        },
        None => Body::Fields(
            raw.into_iter()
                .map(|(k, v)| {
                    // Checked just above.
                    (
                        String::from_utf8(k).unwrap_or_default(),
                        String::from_utf8(v).unwrap_or_default(),
                    )
                })
                .collect(),
        ),
    }
}

/// The first bytes of `b`, escaped, for a reason.
fn preview(b: &[u8]) -> String {
    let head: Vec<u8> = b.iter().copied().take(32).collect();
    let mut s = head.escape_ascii().to_string();
    if b.len() > 32 {
        s.push('…');
    }
    s
}

async fn small_text(wire: &mut Wire, max: usize, what: &str) -> Result<String, WireError> {
    match wire.header().await? {
        Header::Bulk(Some(len)) if len <= max => {
            let b = wire.bulk(len).await?;
            String::from_utf8(b).map_err(|_| WireError::Protocol(format!("{what} is not UTF-8")))
        }
        Header::Simple(s) if s.len() <= max => Ok(s),
        other => Err(shape(what, &other)),
    }
}

fn shape(what: &str, h: &Header) -> WireError {
    WireError::Protocol(format!("{what}: {h:?}"))
}

/// A stream entry id, `<ms>-<seq>`, for comparing and stepping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntryId(pub u64, pub u64);

impl EntryId {
    /// Parses `<ms>-<seq>` (or `<ms>`).
    pub fn parse(s: &str) -> Option<EntryId> {
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
    }

    /// The id just before this one (`0-0` for `0-0`).
    pub fn pred(self) -> EntryId {
        match self {
            EntryId(ms, 0) if ms > 0 => EntryId(ms - 1, u64::MAX),
            EntryId(ms, 0) => EntryId(ms, 0),
            EntryId(ms, seq) => EntryId(ms, seq - 1),
        }
    }

    /// The id just after this one.
    pub fn succ(self) -> EntryId {
        match self {
            EntryId(ms, u64::MAX) => EntryId(ms.saturating_add(1), 0),
            EntryId(ms, seq) => EntryId(ms, seq + 1),
        }
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// Orders two ids as text, numerically when both parse.
pub fn cmp_ids(a: &str, b: &str) -> Ordering {
    match (EntryId::parse(a), EntryId::parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_step_and_compare() {
        let id = EntryId::parse("5-0").unwrap();
        assert_eq!(id.pred().to_string(), format!("4-{}", u64::MAX));
        assert_eq!(id.pred().succ(), id);
        assert_eq!(EntryId::parse("0-0").unwrap().pred().to_string(), "0-0");
        assert_eq!(EntryId::parse("7").unwrap(), EntryId(7, 0));
        assert!(EntryId::parse("x-1").is_none());
        assert_eq!(cmp_ids("10-0", "9-5"), Ordering::Greater);
    }

    #[test]
    fn a_bad_entry_is_judged_not_fatal() {
        let b = |s: &[u8]| s.to_vec();
        assert_eq!(
            judge(vec![b(b"text"), b(b"hi")], None),
            Body::Fields(vec![("text".into(), "hi".into())])
        );
        match judge(vec![b(b"\xff\xfe"), b(b"x"), b(b"text"), b(b"y")], None) {
            Body::Malformed { reason, raw } => {
                assert!(reason.contains("field 1 is not UTF-8"), "{reason}");
                assert!(reason.contains("\\xff\\xfe"), "{reason}");
                assert_eq!(raw[0].0, b"\xff\xfe");
                assert_eq!(raw.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        match judge(vec![b(b"text"), b(b"\xc3")], None) {
            Body::Malformed { reason, .. } => assert!(reason.contains("\"text\""), "{reason}"),
            other => panic!("{other:?}"),
        }
        match judge(vec![b(b"text")], None) {
            Body::Malformed { reason, raw } => {
                assert!(reason.contains("odd"), "{reason}");
                assert_eq!(raw, vec![(b(b"text"), Vec::new())]);
            }
            other => panic!("{other:?}"),
        }
    }
}
