//! Building blocks of the `email` source of the bridge.
//!
//! Mail comes **in** through a Maildir that a local MTA (postfix, exim,
//! an `aiosmtpd` handler, `fetchmail`/`getmail` …) delivers into; agents'
//! replies go **out** through a configured SMTP relay. Nothing here knows
//! about Redis, agents or routing: these are plain functions the bridge
//! composes.
//!
//! * [`maildir`] — list `<maildir>/new/`, read one message, move it to
//!   `cur/` with the `:2,S` info suffix once it has been handled;
//! * [`mod@parse`] — MIME parsing (`mail-parser`) into a [`ParsedMail`](parse::ParsedMail);
//! * [`smtp`] — sending one plain-text mail through a relay (`lettre`),
//!   with an error that says whether a retry may help.
//!
//! # How the bridge uses them
//!
//! ```text
//! Maildir::create(dir)?                 // once, at start-up
//! loop {                                // on a timer (or inotify)
//!     for entry in maildir.list_new()? {          // oldest first
//!         let raw = maildir.read(&entry)?;         // bytes, size-capped
//!         match parse(&raw) {
//!             Ok(mail) => {
//!                 // route: mail.to holds every recipient address
//!                 // (To, Cc, Delivered-To, X-Original-To), lowercased;
//!                 // pick the agent(s) whose address is in it.
//!                 // Drop/flag mail.auto_generated to avoid reply loops.
//!                 publish(agent, &mail)?;          // XADD to the inbox
//!                 maildir.mark_seen(&entry)?;      // only now: new/ -> cur/
//!             }
//!             Err(e) => {
//!                 // unparseable: log, and park it so it is not retried
//!                 // forever — it stays on disk, flagged for a human.
//!                 maildir.mark(&entry, "FS")?;
//!             }
//!         }
//!     }
//! }
//! ```
//!
//! The order matters: a message leaves `new/` **only after** it has been
//! published. If the bridge dies in between, the message is still in
//! `new/` and is published again at the next scan (at-least-once), so the
//! consumer should de-duplicate on `message_id` (or the Maildir unique
//! name, [`MaildirEntry::id`](maildir::MaildirEntry::id)). If the move itself fails, `mark_seen`
//! leaves the file where it was and returns the error; nothing is deleted
//! by this module, ever.
//!
//! Outbound, for each outbox entry:
//!
//! ```text
//! let headers = vec![
//!     ("X-Oxidepm-Agent".into(), agent.into()),
//!     ("X-Oxidepm-Entry".into(), entry_id.into()),   // de-duplication
//!     smtp::in_reply_to_header(&original.message_id?),
//! ];
//! match smtp::send(relay, from, &to, subject, body, &headers).await {
//!     Ok(()) => ack the entry,
//!     Err(e) if e.is_transient() => leave it pending, retry with backoff,
//!     Err(e) => ack it and report the permanent failure to the agent,
//! }
//! ```
//!
//! Message ids are handled **without** angle brackets everywhere in this
//! module (that is what `mail-parser` returns); [`smtp::in_reply_to_header`]
//! adds them back.

pub mod maildir;
pub mod parse;
pub mod smtp;
mod source;

pub use source::EmailSource;

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
