//! The outbound side: one plain-text mail through an SMTP relay, with
//! `lettre` over tokio.
//!
//! The relay is a local MTA (`127.0.0.1:25`, a postfix/exim smarthost …):
//! there is no TLS. Credentials are supported (AUTH PLAIN/LOGIN when the
//! relay offers them) but travel in clear, so use them only over loopback.
//! Each call opens one connection, sends one message and closes it.
//!
//! Failures carry a [`SmtpErrorKind`]: `Transient` when a retry may help
//! (connection refused or reset, timeout, a 4xx reply), `Permanent` when
//! it cannot (a 5xx reply, an invalid address or header, a bad relay
//! setting). If any recipient is refused the whole message is not sent.

use std::fmt;
use std::time::Duration;

use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// How long one SMTP command may take before the attempt is abandoned.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers [`send`] sets itself from its arguments; passing them in
/// `headers` is an error.
pub const RESERVED_HEADERS: [&str; 9] = [
    "From",
    "To",
    "Cc",
    "Bcc",
    "Subject",
    "Content-Type",
    "Content-Transfer-Encoding",
    "MIME-Version",
    "Sender",
];

/// Whether retrying the same mail later may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpErrorKind {
    /// Connection refused/reset, timeout, 4xx: retry later.
    Transient,
    /// 5xx, or the mail itself is invalid: do not retry.
    Permanent,
}

/// A failed send.
#[derive(Debug, Clone)]
pub struct SmtpError {
    kind: SmtpErrorKind,
    /// The SMTP reply code, when the relay answered with an error (shown
    /// by `Debug` in the bridge's log).
    #[cfg_attr(not(test), allow(dead_code))]
    code: Option<u16>,
    message: String,
}

impl SmtpError {
    fn permanent(message: impl Into<String>) -> Self {
        SmtpError {
            kind: SmtpErrorKind::Permanent,
            code: None,
            message: message.into(),
        }
    }

    #[cfg(test)]
    pub fn kind(&self) -> SmtpErrorKind {
        self.kind
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        self.kind == SmtpErrorKind::Transient
    }

    #[cfg(test)]
    /// The relay's reply code (e.g. 450, 550), if it sent one.
    pub fn code(&self) -> Option<u16> {
        self.code
    }

    #[cfg(test)]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SmtpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            SmtpErrorKind::Transient => "transient",
            SmtpErrorKind::Permanent => "permanent",
        };
        write!(f, "smtp ({kind}): {}", self.message)
    }
}

impl std::error::Error for SmtpError {}

impl From<lettre::transport::smtp::Error> for SmtpError {
    fn from(err: lettre::transport::smtp::Error) -> Self {
        let code = err.status().and_then(|c| c.to_string().parse::<u16>().ok());
        // Permanent: a 5xx reply, or the client itself refused (which a
        // retry repeats). Everything else — 4xx, connection refused or
        // reset, timeouts, a garbled reply — may go away.
        let kind = if err.is_permanent() || err.is_client() {
            SmtpErrorKind::Permanent
        } else {
            SmtpErrorKind::Transient
        };
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        SmtpError {
            kind,
            code,
            message,
        }
    }
}

/// Settings for [`send_with`]; [`send`] uses the defaults.
#[derive(Debug, Clone)]
pub struct SmtpOptions {
    /// `host:port`, `host` (port 25) or `[v6addr]:port`.
    pub relay: String,
    /// Per-command timeout.
    pub timeout: Duration,
    /// The EHLO name; the machine's hostname when `None`.
    pub hello_name: Option<String>,
    /// User name and password, sent only if the relay offers AUTH.
    pub credentials: Option<(String, String)>,
}

impl SmtpOptions {
    pub fn new(relay: impl Into<String>) -> Self {
        SmtpOptions {
            relay: relay.into(),
            timeout: DEFAULT_TIMEOUT,
            hello_name: None,
            credentials: None,
        }
    }
}

/// Sends one plain-text (UTF-8) mail through `relay` (`host:port`).
///
/// `from` and each of `to` are addresses, optionally with a display name
/// (`Agent <a@example.org>`). The body's line ends, whatever they were
/// (LF, CR, CRLF), are sent as CRLF. `headers` are added as they are
/// (values are RFC 2047-encoded when not ASCII, CR/LF become spaces, as in
/// the subject); use them for
/// `X-Oxidepm-Agent`, `X-Oxidepm-Entry`, `In-Reply-To`, `References`, or a
/// `Message-ID` of the caller's choosing (one is generated otherwise).
/// The headers in [`RESERVED_HEADERS`] are refused.
pub async fn send(
    relay: &str,
    from: &str,
    to: &[String],
    subject: &str,
    body: &str,
    headers: &[(String, String)],
) -> Result<(), SmtpError> {
    send_with(&SmtpOptions::new(relay), from, to, subject, body, headers).await
}

/// [`send`] with explicit [`SmtpOptions`].
pub async fn send_with(
    options: &SmtpOptions,
    from: &str,
    to: &[String],
    subject: &str,
    body: &str,
    headers: &[(String, String)],
) -> Result<(), SmtpError> {
    let message = build_message(from, to, subject, body, headers)?;
    let (host, port) = parse_relay(&options.relay)?;
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .timeout(Some(options.timeout));
    if let Some(name) = &options.hello_name {
        builder = builder.hello_name(ClientId::Domain(name.clone()));
    }
    if let Some((user, password)) = &options.credentials {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    let transport = builder.build();
    transport.send(message).await?;
    Ok(())
}

/// `In-Reply-To` for a message id as [`ParsedMail`](super::parse::ParsedMail) holds it
/// (without angle brackets).
pub fn in_reply_to_header(message_id: &str) -> (String, String) {
    ("In-Reply-To".to_owned(), angle(message_id))
}

#[cfg(test)]
/// `References` for a chain of message ids (without angle brackets).
pub fn references_header<S: AsRef<str>>(message_ids: &[S]) -> (String, String) {
    let ids: Vec<String> = message_ids.iter().map(|id| angle(id.as_ref())).collect();
    ("References".to_owned(), ids.join(" "))
}

fn angle(id: &str) -> String {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    format!("<{id}>")
}

/// Builds the RFC 5322 message; every error here is permanent.
pub fn build_message(
    from: &str,
    to: &[String],
    subject: &str,
    body: &str,
    headers: &[(String, String)],
) -> Result<Message, SmtpError> {
    let mailbox = |addr: &str| {
        addr.trim()
            .parse::<Mailbox>()
            .map_err(|e| SmtpError::permanent(format!("invalid address {addr:?}: {e}")))
    };
    if to.is_empty() {
        return Err(SmtpError::permanent("no recipient"));
    }
    let mut builder = Message::builder()
        .from(mailbox(from)?)
        .subject(one_line(subject))
        .message_id(None)
        .header(ContentType::TEXT_PLAIN);
    for addr in to {
        builder = builder.to(mailbox(addr)?);
    }
    for (name, value) in headers {
        let name = name.trim();
        if RESERVED_HEADERS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name))
        {
            return Err(SmtpError::permanent(format!(
                "header {name:?} is set by send() itself"
            )));
        }
        let header_name = HeaderName::new_from_ascii(name.to_owned())
            .map_err(|_| SmtpError::permanent(format!("invalid header name {name:?}")))?;
        builder = builder.raw_header(HeaderValue::new(header_name, one_line(value)));
    }
    builder
        .body(unix_lines(body))
        .map_err(|e| SmtpError::permanent(format!("cannot build the message: {e}")))
}

/// The body with every line end as a lone LF, which lettre then turns into
/// CRLF. lettre converts only LF: a lone CR would reach the relay as it
/// is, and some relays end the DATA of `<CR>.<CR>` or `<LF>.<LF>`, so an
/// agent's text could end the message early and smuggle in another one.
/// CRLF and a lone CR are each one line end.
fn unix_lines(body: &str) -> String {
    body.replace("\r\n", "\n").replace('\r', "\n")
}

/// Header values are one line: CR and LF would let a value inject headers.
fn one_line(value: &str) -> String {
    value
        .split(['\r', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `host:port`, `host`, `[v6]:port`, `[v6]`.
pub(super) fn parse_relay(relay: &str) -> Result<(String, u16), SmtpError> {
    let relay = relay.trim();
    let bad = || SmtpError::permanent(format!("invalid relay {relay:?} (want host:port)"));
    let port = |p: &str| p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad);
    if let Some(rest) = relay.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or_else(bad)?;
        let port = match tail {
            "" => 25,
            t => port(t.strip_prefix(':').ok_or_else(bad)?)?,
        };
        return if host.is_empty() {
            Err(bad())
        } else {
            Ok((host.to_owned(), port))
        };
    }
    let (host, port) = match relay.split_once(':') {
        Some((host, p)) if !p.contains(':') => (host, port(p)?),
        Some(_) => return Err(bad()), // bare IPv6 without brackets
        None => (relay, 25),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}
