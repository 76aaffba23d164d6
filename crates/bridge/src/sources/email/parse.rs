//! Parsing one inbound message with a real MIME parser (`mail-parser`):
//! RFC 2047 encoded words, quoted-printable and base64 bodies, charsets,
//! multipart trees. `mail-parser` never panics and is lenient; on top of
//! it [`parse`] refuses what the bridge cannot route: no headers at all,
//! or no sender address.

use std::borrow::Cow;
use std::fmt;

use mail_parser::decoders::html::html_to_text;
use mail_parser::{Address, HeaderValue, Message, MessageParser};

/// What the bridge needs from one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedMail {
    /// `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// The sender's address (`From`, else `Sender`, else `Return-Path`),
    /// lowercased, without display name.
    pub from: String,
    /// Every recipient address from `To`, `Cc`, `Delivered-To` and
    /// `X-Original-To`, lowercased, de-duplicated, in that order.
    pub to: Vec<String>,
    /// The decoded subject; empty when there is none.
    pub subject: String,
    /// The text/plain body parts joined by a blank line, or text derived
    /// from the text/html part when there is no plain one. Line endings
    /// are `\n`. Attachments are not included.
    pub text: String,
    /// The first id of `In-Reply-To`, without angle brackets.
    pub in_reply_to: Option<String>,
    /// The mail says it was sent by a machine: `Auto-Submitted` other than
    /// `no`, `Precedence: bulk|junk|list`, an empty `Return-Path` (a
    /// bounce), or an `X-Oxidepm-Agent` header (our own mail coming back).
    /// The bridge should not let an agent answer these, to avoid loops.
    pub auto_generated: bool,
}

/// Why a message could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Zero bytes (or only whitespace).
    Empty,
    /// No header could be found: not an RFC 5322 message.
    NoHeaders,
    /// Headers were found but no sender address (`From`, `Sender`,
    /// `Return-Path`), so there is nobody to answer.
    NoSender,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::Empty => "mail: the message is empty",
            ParseError::NoHeaders => "mail: no headers found; not an e-mail message",
            ParseError::NoSender => "mail: no sender address (From, Sender or Return-Path)",
        })
    }
}

impl std::error::Error for ParseError {}

/// Non-IANA headers that hold addresses.
const DELIVERY_HEADERS: [&str; 2] = ["Delivered-To", "X-Original-To"];

/// Parses a raw RFC 5322 message.
pub fn parse(raw: &[u8]) -> Result<ParsedMail, ParseError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(ParseError::Empty);
    }
    // The default parser (an empty header map) applies the right parser to
    // every registered header; registering any custom one would turn all
    // the others raw, so Delivered-To/X-Original-To are read as text.
    let msg = MessageParser::default()
        .parse(raw)
        .ok_or(ParseError::NoHeaders)?;
    if msg.headers().is_empty() {
        return Err(ParseError::NoHeaders);
    }

    let from = [msg.from(), msg.sender()]
        .into_iter()
        .flatten()
        .flat_map(address_list)
        .next()
        .or_else(|| msg.return_address().and_then(normalize))
        .ok_or(ParseError::NoSender)?;

    let mut to: Vec<String> = Vec::new();
    let mut add = |addr: String| {
        if !to.contains(&addr) {
            to.push(addr);
        }
    };
    for header in msg.all_to().chain(msg.all_cc()) {
        address_list(header).for_each(&mut add);
    }
    for name in DELIVERY_HEADERS {
        for value in msg.header_values(name) {
            match value {
                HeaderValue::Address(a) => address_list(a).for_each(&mut add),
                // Raw text: "a@b", "<a@b>" or "Name <a@b>", comma-separated.
                other => other
                    .as_text()
                    .into_iter()
                    .flat_map(|t| t.split(','))
                    .filter_map(normalize)
                    .for_each(&mut add),
            }
        }
    }

    Ok(ParsedMail {
        message_id: msg.message_id().and_then(clean_id),
        from,
        to,
        subject: msg.subject().unwrap_or_default().trim().to_owned(),
        text: body_text(&msg),
        in_reply_to: first_id(msg.in_reply_to()),
        auto_generated: is_auto_generated(&msg),
    })
}

/// All addresses of an address header, normalized.
fn address_list<'a>(addr: &'a Address<'_>) -> impl Iterator<Item = String> + 'a {
    addr.iter().filter_map(|a| a.address().and_then(normalize))
}

/// Lowercases and strips `<…>`, quotes and blanks; `None` when nothing
/// address-like is left.
fn normalize(addr: &str) -> Option<String> {
    let addr = addr.trim();
    // "Name <a@b>" in a header the address parser did not handle.
    let addr = match (addr.rfind('<'), addr.rfind('>')) {
        (Some(l), Some(r)) if l < r => &addr[l + 1..r],
        _ => addr,
    };
    let addr = addr.trim().trim_matches('"').trim();
    if addr.is_empty() || addr.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    Some(addr.to_lowercase())
}

fn clean_id(id: &str) -> Option<String> {
    let id = id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!id.is_empty()).then(|| id.to_owned())
}

fn first_id(value: &HeaderValue<'_>) -> Option<String> {
    match value {
        HeaderValue::Text(t) => t.split_whitespace().next().and_then(clean_id),
        HeaderValue::TextList(list) => list.iter().find_map(|t| clean_id(t)),
        _ => None,
    }
}

/// The text bodies, plain preferred (mail-parser already substitutes the
/// HTML part, converted to text, where an alternative has no plain part).
fn body_text(msg: &Message<'_>) -> String {
    let mut parts: Vec<Cow<'_, str>> = Vec::new();
    for i in 0..msg.text_body_count() {
        if let Some(text) = msg.body_text(i) {
            if !text.trim().is_empty() {
                parts.push(text);
            }
        }
    }
    if parts.is_empty() && msg.html_part(0).is_some_and(|p| p.is_text_html()) {
        // An HTML body that is not listed among the text ones (rare).
        if let Some(html) = msg.body_html(0) {
            return normalize_newlines(&html_to_text(&html));
        }
    }
    normalize_newlines(&parts.join("\n\n"))
}

fn normalize_newlines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

fn header_text<'a>(msg: &'a Message<'_>, name: &'static str) -> Option<&'a str> {
    msg.header(name)
        .and_then(HeaderValue::as_text)
        .map(str::trim)
}

fn is_auto_generated(msg: &Message<'_>) -> bool {
    let auto_submitted = header_text(msg, "Auto-Submitted").is_some_and(|v| {
        !v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("no")
    });
    let precedence = header_text(msg, "Precedence").is_some_and(|v| {
        ["bulk", "junk", "list"]
            .iter()
            .any(|p| v.eq_ignore_ascii_case(p))
    });
    let bounce = msg.header_raw("Return-Path").is_some_and(|v| {
        let v = v.trim();
        v.is_empty() || v == "<>"
    });
    let ours = msg.header("X-Oxidepm-Agent").is_some();
    auto_submitted || precedence || bounce || ours
}
