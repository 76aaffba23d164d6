//! The email source against someone who can write into the Maildir or into
//! an agent's outbox: what they plant in `new/` is never read through a
//! link, and what an agent writes never becomes a header or a second mail.

use super::maildir::{Maildir, MaildirError};
use super::smtp;
use super::EmailSource;
use crate::message::Outbound;
use crate::source::Source;
use oxidepm_lanes::bridge_config::{BridgeConfig, EmailSettings};
use oxidepm_testkit::SmtpSink;
use rustix::fs::{FileType, Mode, CWD};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

const MAIL: &str =
    "From: carol@example.com\r\nTo: alice@example.org\r\nSubject: hi\r\n\r\nhello\r\n";
/// A file only its owner may read, holding something that parses as mail.
const SECRET: &str =
    "From: root@example.com\r\nTo: alice@example.org\r\nSubject: s\r\n\r\nSECRET-MARKER\r\n";

fn maildir() -> (tempfile::TempDir, Maildir) {
    let dir = tempfile::tempdir().unwrap();
    let md = Maildir::create(dir.path().join("Mail")).unwrap();
    let secret = dir.path().join("secret");
    fs::write(&secret, SECRET).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    (dir, md)
}

#[test]
fn a_symlink_swapped_in_after_the_listing_is_not_followed() {
    let (d, md) = maildir();
    let entry = md.deliver(MAIL.as_bytes()).unwrap();
    assert_eq!(md.list_new().unwrap(), vec![entry.clone()]);
    // Between the listing and the read, the message becomes a link to a
    // file the bridge may read but must not publish.
    let link = md.tmp_dir().join("link");
    symlink(d.path().join("secret"), &link).unwrap();
    fs::rename(&link, entry.path()).unwrap();
    let err = md.read(&entry).unwrap_err();
    assert!(matches!(err, MaildirError::NotRegular { .. }), "{err}");
    // And a listing now skips it.
    assert!(md.list_new().unwrap().is_empty());
}

#[test]
fn a_hard_link_to_another_file_is_not_read() {
    let (d, md) = maildir();
    fs::hard_link(d.path().join("secret"), md.new_dir().join("1.M1.host")).unwrap();
    let entry = md.list_new().unwrap().pop().unwrap();
    match md.read(&entry) {
        Err(MaildirError::Linked { links, .. }) => assert_eq!(links, 2),
        other => panic!("expected Linked, got {other:?}"),
    }
    // Flagged for a human: the link moves, the file it shares stays.
    md.mark(&entry, "FS").unwrap();
    assert_eq!(fs::read_to_string(d.path().join("secret")).unwrap(), SECRET);
}

#[test]
fn a_fifo_in_new_does_not_block_the_reader() {
    let (_d, md) = maildir();
    let entry = md.deliver(MAIL.as_bytes()).unwrap();
    // Replaced by a FIFO that nobody will ever write to: opening it
    // without O_NONBLOCK would wait forever.
    fs::remove_file(entry.path()).unwrap();
    rustix::fs::mknodat(
        CWD,
        entry.path(),
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let err = md.read(&entry).unwrap_err();
    assert!(matches!(err, MaildirError::NotRegular { .. }), "{err}");
    assert!(md.list_new().unwrap().is_empty(), "a FIFO is not mail");
}

#[test]
fn new_replaced_by_a_symlink_is_refused() {
    let (d, md) = maildir();
    // Another tree with a message in its new/, and new/ pointing at it.
    let other = Maildir::create(d.path().join("Other")).unwrap();
    other.deliver(SECRET.as_bytes()).unwrap();
    fs::remove_dir(md.new_dir()).unwrap();
    symlink(other.new_dir(), md.new_dir()).unwrap();
    let err = md.list_new().unwrap_err();
    assert!(err.to_string().contains("cannot list"), "{err}");
}

#[test]
fn every_line_end_of_a_body_is_sent_as_crlf() {
    let to = vec!["bob@example.org".to_owned()];
    let body = "a\rb\r.\rc\n.\nd\r\n.\r\ne\r\rf";
    let msg = smtp::build_message("a@example.org", &to, "s", body, &[]).unwrap();
    let text = String::from_utf8(msg.formatted()).unwrap();
    let (_, got) = text.split_once("\r\n\r\n").unwrap();
    assert_eq!(got, "a\r\nb\r\n.\r\nc\r\n.\r\nd\r\n.\r\ne\r\n\r\nf");
    assert_crlf_only(&text);
}

/// Every CR is followed by LF and every LF preceded by CR.
fn assert_crlf_only(text: &str) {
    let b = text.as_bytes();
    for (i, c) in b.iter().enumerate() {
        match c {
            b'\r' => assert_eq!(b.get(i + 1), Some(&b'\n'), "a lone CR at {i}: {text:?}"),
            b'\n' => assert!(i > 0 && b[i - 1] == b'\r', "a lone LF at {i}: {text:?}"),
            _ => {}
        }
    }
}

fn source(relay: &str, maildir: &std::path::Path) -> EmailSource {
    let mut cfg = BridgeConfig::new(
        std::path::PathBuf::from("/nonexistent/redis.sock"),
        "/nonexistent/pw".into(),
    );
    cfg.email = Some(EmailSettings {
        maildir: maildir.display().to_string(),
        smtp: relay.to_owned(),
        from: Default::default(),
        domain: Some("example.org".into()),
    });
    EmailSource::new(&cfg).unwrap().unwrap()
}

fn outbound(fields: &[(&str, &str)]) -> Outbound {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let text = fields
        .iter()
        .find(|(k, _)| k == "text")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    Outbound {
        agent: "alice".into(),
        source: "email".into(),
        stream: "alice:email:outbox".into(),
        id: "1700000000000-0".into(),
        channel: String::new(),
        text,
        fields,
    }
}

#[tokio::test]
async fn an_answer_cannot_smuggle_a_second_mail_or_a_header() {
    let Some(sink) = SmtpSink::start() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = source(&sink.relay(), &d.path().join("Mail"));
    // The SMTP-smuggling shapes: an end of DATA as some relays read it,
    // then a whole second transaction.
    let smuggled = "MAIL FROM:<ceo@example.org>\r\nRCPT TO:<victim@example.net>\r\nDATA\r\n\
                    From: ceo@example.org\r\n\r\nwire the money";
    let body = format!("hello\r.\r{smuggled}\r.\rbye\n.\nend\r\n");
    let msg = outbound(&[
        ("to", "carol@example.com"),
        ("subject", "hi\r\nBcc: evil@example.net"),
        ("in_reply_to", "m1@example.com>\r\nBcc: evil2@example.net"),
        ("text", &body),
    ]);
    src.deliver(&msg).await.unwrap();

    let got = sink.received(1);
    assert_eq!(got.len(), 1, "exactly one message: {got:?}");
    assert_eq!(got[0]["to"], serde_json::json!(["carol@example.com"]));
    let data = got[0]["data"].as_str().unwrap();
    assert_crlf_only(data);
    assert!(!data.contains("\r\nBcc:"), "{data}");
    let (head, text) = data.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("Subject: hi Bcc: evil@example.net"), "{head}");
    // The smuggled lines are text of the one message, CRLF-separated.
    assert!(
        text.starts_with("hello\r\n.\r\nMAIL FROM:<ceo@example.org>\r\n"),
        "{text:?}"
    );
    assert!(
        text.contains("wire the money\r\n.\r\nbye\r\n.\r\nend"),
        "{text:?}"
    );

    // A recipient with a line break in it is refused, not split.
    let msg = outbound(&[
        ("to", "carol@example.com\r\nBcc: evil@example.net"),
        ("text", "x"),
    ]);
    let err = src.deliver(&msg).await.unwrap_err();
    assert!(
        matches!(err, crate::source::DeliveryError::Permanent(_)),
        "{err:?}"
    );
    // The next answer is the second and last message the relay sees.
    src.deliver(&outbound(&[("to", "dan@example.com"), ("text", "y")]))
        .await
        .unwrap();
    let got = sink.received(2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1]["to"], serde_json::json!(["dan@example.com"]));
}
