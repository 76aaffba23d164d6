//! The `email` source: Maildir in, SMTP out, built from the plain pieces
//! in `lanes::email`.
//!
//! Inbound: every half second the Maildir's `new/` is scanned; each mail
//! is parsed, routed by its recipient addresses (the first recipient with
//! an `email` route, else the first recipient, which falls to the default
//! agent or `bridge:unrouted`), published, and only then moved to `cur/`.
//! A mail that cannot be published stays in `new/` and is tried again; one
//! that cannot be parsed, is too large or has a second link is flagged
//! (`FS`) in `cur/` for a human, unread; a name that turns out not to be a
//! regular file when opened (a symlink or FIFO swapped in) is skipped.
//!
//! Outbound: an outbox entry is sent through the SMTP relay from the
//! agent's address (`from.<agent>`, else `<agent>@<domain>`) to its `to`
//! field (else its `channel`, which inbound mail sets to the sender), with
//! `subject` and `in_reply_to` fields when present, and the agent and entry
//! id in `X-Oxidepm-Agent` / `X-Oxidepm-Entry` so the far side can
//! de-duplicate. Everything the agent wrote is data: header values are
//! made one line and the body's line endings are made CRLF (see
//! [`smtp::build_message`]), so no field can add a header or end the SMTP
//! transaction early.

use super::maildir::{Maildir, MaildirEntry, MaildirError};
use super::parse::ParsedMail;
use super::{parse, smtp};
use crate::message::{Inbound, Outbound};
use crate::publish::Publisher;
use crate::shutdown::Shutdown;
use crate::source::{BoxFuture, DeliveryError, Source, SourceError};
use oxidepm_lanes::bridge_config::{BridgeConfig, EmailSettings};
use std::collections::HashSet;
use std::time::Duration;

/// How often `new/` is scanned.
const SCAN: Duration = Duration::from_millis(500);

/// The Maildir of the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("email: cannot use the Maildir {maildir}: {source}")]
pub struct EmailError {
    /// The Maildir as configured.
    pub maildir: String,
    /// Why.
    pub source: MaildirError,
}

impl From<EmailError> for SourceError {
    fn from(e: EmailError) -> SourceError {
        SourceError::new(NAME, e)
    }
}

/// The source's name.
pub const NAME: &str = "email";

/// The email source.
pub struct EmailSource {
    cfg: EmailSettings,
    /// Addresses that have an `email` route, lowercased.
    routed: HashSet<String>,
}

impl EmailSource {
    /// Builds the source from the bridge's configuration.
    pub fn new(cfg: &BridgeConfig) -> Result<Option<EmailSource>, EmailError> {
        let Some(email) = cfg.email.clone() else {
            return Ok(None);
        };
        if let Err(source) = Maildir::create(&email.maildir) {
            return Err(EmailError {
                maildir: email.maildir,
                source,
            });
        }
        let routed = cfg
            .routes
            .iter()
            .filter(|r| r.source == "email")
            .filter_map(|r| r.address.as_ref().map(|a| a.to_lowercase()))
            .collect();
        Ok(Some(EmailSource { cfg: email, routed }))
    }

    fn sender_of(&self, agent: &str) -> Option<String> {
        self.cfg
            .from
            .get(agent)
            .cloned()
            .or_else(|| self.cfg.domain.as_ref().map(|d| format!("{agent}@{d}")))
    }

    /// Publishes what is in `new/`; returns how many mails were handled.
    async fn scan(&self, publisher: &Publisher) -> usize {
        let md = Maildir::new(&self.cfg.maildir);
        let entries = match md.list_new() {
            Ok(e) => e,
            Err(e) => {
                log::warn!("email: {e}");
                return 0;
            }
        };
        let mut handled = 0;
        for entry in entries {
            let Some(mail) = read_mail(&md, &entry) else {
                continue;
            };
            match publisher.publish(self.inbound(&mail, &entry)).await {
                Ok(_) => {
                    if let Err(e) = md.mark_seen(&entry) {
                        log::error!(
                            "email: published {} but cannot move it to cur/: {e}",
                            entry.name()
                        );
                    }
                    handled += 1;
                }
                Err(e) => {
                    // Left in new/: the next scan tries again.
                    log::warn!("email: {} not published ({e}); will retry", entry.name());
                    break;
                }
            }
        }
        handled
    }

    /// The inbound message of `mail`: routed by the first recipient with
    /// an `email` route, else the first recipient.
    fn inbound(&self, mail: &ParsedMail, entry: &MaildirEntry) -> Inbound {
        let address = mail
            .to
            .iter()
            .find(|a| self.routed.contains(*a))
            .or(mail.to.first())
            .cloned();
        let mut extra = vec![
            ("subject".to_string(), mail.subject.clone()),
            ("to".to_string(), mail.to.join(",")),
        ];
        if let Some(r) = &mail.in_reply_to {
            extra.push(("in_reply_to".into(), r.clone()));
        }
        if mail.auto_generated {
            // Kept (nothing is dropped), but marked so that an agent
            // does not answer a robot and start a mail loop.
            extra.push(("auto_generated".into(), "true".into()));
        }
        Inbound {
            source: NAME.into(),
            channel: mail.from.clone(),
            guild: None,
            address,
            sender: mail.from.clone(),
            text: mail.text.clone(),
            external_id: mail
                .message_id
                .clone()
                .or_else(|| Some(entry.id().to_string())),
            extra,
        }
    }
}

/// Reads and parses one mail of `new/`; `None` when there is none to
/// publish: gone since the listing, not a regular file, or flagged (`FS`)
/// for a human because it cannot be read or parsed.
fn read_mail(md: &Maildir, entry: &MaildirEntry) -> Option<ParsedMail> {
    let raw = match md.read(entry) {
        Ok(r) => r,
        // Taken by someone else since the listing.
        Err(e) if e.is_vanished() => return None,
        // A symlink or a FIFO swapped in after the listing: not
        // mail, and not ours to move; the next listing skips it.
        Err(e @ MaildirError::NotRegular { .. }) => {
            log::warn!("email: {e}");
            return None;
        }
        Err(e) => {
            log::warn!("email: {e}; flagged for a human");
            let _ = md.mark(entry, "FS");
            return None;
        }
    };
    match parse::parse(&raw) {
        Ok(m) => Some(m),
        Err(e) => {
            log::warn!(
                "email: {} cannot be parsed ({e}); flagged for a human",
                entry.name()
            );
            let _ = md.mark(entry, "FS");
            None
        }
    }
}

impl Source for EmailSource {
    fn name(&self) -> &str {
        NAME
    }

    fn inbound(
        &self,
        publisher: Publisher,
        mut shutdown: Shutdown,
    ) -> BoxFuture<'_, Result<(), SourceError>> {
        Box::pin(async move {
            log::info!("email: reading {}/new", self.cfg.maildir);
            loop {
                self.scan(&publisher).await;
                tokio::select! {
                    _ = tokio::time::sleep(SCAN) => {}
                    _ = shutdown.wait() => return Ok(()),
                }
            }
        })
    }

    fn deliver<'a>(&'a self, msg: &'a Outbound) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let Some(from) = self.sender_of(&msg.agent) else {
                return Err(DeliveryError::Permanent(format!(
                    "agent {} has no mail address; set [lanes.email] from or domain",
                    msg.agent
                )));
            };
            let to: Vec<String> = msg
                .field("to")
                .filter(|t| !t.is_empty())
                .unwrap_or(msg.channel.as_str())
                .split(',')
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect();
            if to.is_empty() {
                return Err(DeliveryError::Permanent(
                    "the entry names no recipient (a `to` or `channel` field)".into(),
                ));
            }
            let subject = msg
                .field("subject")
                .map(str::to_string)
                .unwrap_or_else(|| format!("Message from {}", msg.agent));
            let mut headers = vec![
                ("X-Oxidepm-Agent".to_string(), msg.agent.clone()),
                ("X-Oxidepm-Entry".to_string(), msg.id.clone()),
            ];
            if let Some(r) = msg.field("in_reply_to").filter(|r| !r.is_empty()) {
                headers.push(smtp::in_reply_to_header(r));
            }
            smtp::send(&self.cfg.smtp, &from, &to, &subject, &msg.text, &headers)
                .await
                .map_err(|e| {
                    if e.is_transient() {
                        DeliveryError::Retry(e.to_string())
                    } else {
                        DeliveryError::Permanent(e.to_string())
                    }
                })
        })
    }
}
