//! Tests of the email building blocks: a real Maildir in a temp dir, real
//! MIME samples, and SMTP against a real sink (testkit's, Python's
//! `aiosmtpd`: without it those tests print `SKIP …` and pass, unless
//! `OXIDEPM_REQUIRE_SMTP_SINK=1`).

use oxidepm_testkit::SmtpSink as Sink;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::maildir::{Maildir, MaildirError};
use super::parse::{parse, ParseError};
use super::smtp::{self, SmtpErrorKind};

// ---------------------------------------------------------------- samples
// Real messages, CRLF line endings, in testdata/.

const PLAIN: &str = include_str!("testdata/plain.eml");
const ALTERNATIVE: &str = include_str!("testdata/alternative.eml");
const HTML_ONLY: &str = include_str!("testdata/html_only.eml");
const ATTACHMENT: &str = include_str!("testdata/attachment.eml");
const ENCODED: &str = include_str!("testdata/encoded.eml");

fn maildir() -> (tempfile::TempDir, Maildir) {
    let dir = tempfile::tempdir().unwrap();
    let md = Maildir::create(dir.path().join("Mail")).unwrap();
    (dir, md)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- maildir

#[test]
fn create_makes_the_three_dirs_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/Maildir");
    Maildir::create(&root).unwrap();
    for sub in ["tmp", "new", "cur"] {
        assert!(root.join(sub).is_dir(), "{sub} missing");
    }
    fs::write(root.join("new/keep"), "x").unwrap();
    let md = Maildir::create(&root).unwrap();
    assert_eq!(md.list_new().unwrap().len(), 1);
}

#[test]
fn list_new_skips_dotfiles_temporaries_dirs_and_symlinks() {
    let (_d, md) = maildir();
    let new = md.new_dir();
    for name in [".hidden", "x.tmp", "y~", "z.part", ".swp.swp"] {
        fs::write(new.join(name), "From: a@b\r\n\r\nx").unwrap();
    }
    fs::create_dir(new.join("subdir")).unwrap();
    fs::write(md.root().join("outside"), "secret").unwrap();
    symlink(md.root().join("outside"), new.join("link")).unwrap();
    fs::write(md.cur_dir().join("old:2,S"), "x").unwrap();
    fs::write(md.tmp_dir().join("inflight"), "x").unwrap();

    assert!(md.list_new().unwrap().is_empty());
    let a = md.deliver(PLAIN.as_bytes()).unwrap();
    let b = md.deliver(ALTERNATIVE.as_bytes()).unwrap();
    let listed = md.list_new().unwrap();
    assert_eq!(listed.len(), 2);
    let mut expected = vec![a.name().to_owned(), b.name().to_owned()];
    expected.sort();
    let mut got: Vec<_> = listed.iter().map(|e| e.name().to_owned()).collect();
    got.sort();
    assert_eq!(got, expected);
    assert!(names(&md.tmp_dir()).iter().all(|n| n == "inflight"));
}

#[test]
fn read_returns_the_bytes_and_enforces_the_size_limit() {
    let (_d, md) = maildir();
    let entry = md.deliver(PLAIN.as_bytes()).unwrap();
    assert_eq!(md.read(&entry).unwrap(), PLAIN.as_bytes());
    let small = md.clone().with_max_message_bytes(10);
    match small.read(&entry) {
        Err(MaildirError::TooLarge { size, limit, .. }) => {
            assert_eq!((size, limit), (PLAIN.len() as u64, 10));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(
        entry.path().exists(),
        "a refused read must not touch the file"
    );
}

#[test]
fn mark_seen_moves_to_cur_with_the_info_suffix() {
    let (_d, md) = maildir();
    let entry = md.deliver(PLAIN.as_bytes()).unwrap();
    let moved = md.mark_seen(&entry).unwrap();
    assert_eq!(moved, md.cur_dir().join(format!("{}:2,S", entry.id())));
    assert_eq!(fs::read(&moved).unwrap(), PLAIN.as_bytes());
    assert!(!entry.path().exists());
    assert!(md.list_new().unwrap().is_empty());
}

#[test]
fn mark_merges_existing_flags_and_keeps_the_unique_name() {
    let (_d, md) = maildir();
    fs::write(md.new_dir().join("1700000000.M1P2.host:2,F"), PLAIN).unwrap();
    let entry = md.list_new().unwrap().pop().unwrap();
    assert_eq!(entry.id(), "1700000000.M1P2.host");
    let moved = md.mark(&entry, "SR").unwrap();
    assert_eq!(names(&md.cur_dir()), vec!["1700000000.M1P2.host:2,FRS"]);
    assert!(moved.ends_with("1700000000.M1P2.host:2,FRS"));
    let other = md.deliver(b"x").unwrap();
    assert!(matches!(
        md.mark(&other, "S:x"),
        Err(MaildirError::BadFlags(_))
    ));
    assert!(other.path().exists());
}

#[test]
fn a_failed_move_leaves_the_message_in_new() {
    let (_d, md) = maildir();
    // The target name is taken: refuse rather than overwrite.
    let entry = md.deliver(PLAIN.as_bytes()).unwrap();
    let taken = md.cur_dir().join(format!("{}:2,S", entry.id()));
    fs::write(&taken, "the other message").unwrap();
    let err = md.mark_seen(&entry).unwrap_err();
    assert!(matches!(err, MaildirError::TargetExists { .. }), "{err}");
    assert!(err.to_string().contains("left in new/"));
    assert_eq!(fs::read(entry.path()).unwrap(), PLAIN.as_bytes());
    assert_eq!(fs::read_to_string(&taken).unwrap(), "the other message");

    // cur/ is gone: the rename fails, the message stays.
    fs::remove_file(&taken).unwrap();
    fs::remove_dir(md.cur_dir()).unwrap();
    let err = md.mark_seen(&entry).unwrap_err();
    assert!(
        matches!(err, MaildirError::Io { action: "move", .. }),
        "{err}"
    );
    assert_eq!(md.list_new().unwrap(), vec![entry.clone()]);

    // Once repaired, the same entry moves.
    Maildir::create(md.root()).unwrap();
    md.mark_seen(&entry).unwrap();
    assert!(md.list_new().unwrap().is_empty());
}

#[test]
fn listing_a_missing_maildir_is_an_error_not_a_panic() {
    let md = Maildir::new("/nonexistent/oxidepm-test-maildir");
    let err = md.list_new().unwrap_err();
    assert!(err.to_string().contains("cannot list"), "{err}");
}

// ---------------------------------------------------------------- parsing

#[test]
fn parses_a_plain_message() {
    let m = parse(PLAIN.as_bytes()).unwrap();
    assert_eq!(m.message_id.as_deref(), Some("abc.123@mail.example.org"));
    assert_eq!(m.from, "alice@example.org");
    assert_eq!(
        m.to,
        vec![
            "bot@agents.example.net",
            "other@example.com",
            "carol@example.com",
            "inbox-bot@agents.example.net",
            "bot+tag@agents.example.net",
        ]
    );
    assert_eq!(m.subject, "Hello there");
    assert_eq!(m.text, "Hi bot,\nplease restart the worker.\n");
    assert_eq!(m.in_reply_to.as_deref(), Some("prev.1@agents.example.net"));
    assert!(!m.auto_generated);
}

#[test]
fn multipart_alternative_prefers_the_plain_part() {
    let m = parse(ALTERNATIVE.as_bytes()).unwrap();
    assert_eq!(m.text.trim(), "The plain version.");
    assert_eq!(m.message_id, None);
    assert_eq!(m.in_reply_to, None);
}

#[test]
fn html_only_mail_is_turned_into_text() {
    let m = parse(HTML_ONLY.as_bytes()).unwrap();
    assert!(m.text.contains("Only HTML & tags"), "{:?}", m.text);
    assert!(!m.text.contains('<'), "{:?}", m.text);
    assert!(!m.text.contains("color"), "{:?}", m.text);
}

#[test]
fn attachments_are_not_part_of_the_text() {
    let m = parse(ATTACHMENT.as_bytes()).unwrap();
    assert_eq!(m.text.trim(), "See the attached log.");
    assert!(!m.text.contains("SECRET"));
    assert!(!m.text.contains("preamble"));
}

#[test]
fn encoded_words_and_quoted_printable_are_decoded() {
    let m = parse(ENCODED.as_bytes()).unwrap();
    assert_eq!(m.from, "renee@example.de");
    assert_eq!(m.to, vec!["bot@agents.example.net"]);
    assert_eq!(m.subject, "Grüße aus München ✓");
    assert_eq!(m.text.trim(), "Grüße, café ✓ and a soft break.");
}

#[test]
fn malformed_mail_is_an_error_not_a_panic() {
    assert_eq!(parse(b""), Err(ParseError::Empty));
    assert_eq!(parse(b" \r\n\t"), Err(ParseError::Empty));
    let no_from = b"To: bot@x\r\nSubject: hi\r\n\r\nbody";
    assert_eq!(parse(no_from), Err(ParseError::NoSender));
    let garbage: &[&[u8]] = &[
        b"\x00\x01\x02\xff\xfe garbage",
        b"just some text without any header at all",
        b"From: \r\n\r\n",
        b"From: <>\r\n\r\n",
        b"\r\n\r\n\r\nFrom: a@b\r\n",
    ];
    for g in garbage {
        let err = parse(g).unwrap_err();
        assert!(!err.to_string().is_empty());
    }
    // Truncated multipart: still parses, without panicking.
    let cut = &ATTACHMENT.as_bytes()[..ATTACHMENT.len() / 2];
    assert_eq!(parse(cut).unwrap().from, "alice@example.org");
    // Random bytes and random cuts of real samples never panic.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let samples = [PLAIN, ALTERNATIVE, HTML_ONLY, ATTACHMENT, ENCODED];
    for i in 0..2000 {
        let len = (next() % 600) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 {
            let s = samples[i % samples.len()].as_bytes();
            bytes = s[..(next() as usize % s.len())].to_vec();
            let at = next() as usize % (bytes.len() + 1);
            bytes.insert(at, next() as u8);
        }
        let _ = parse(&bytes);
    }
}

#[test]
fn machine_mail_is_flagged_auto_generated() {
    let with = |header: &str| format!("From: a@example.org\r\nTo: b@x\r\n{header}\r\n\r\nx");
    for h in [
        "Auto-Submitted: auto-replied",
        "Precedence: bulk",
        "Return-Path: <>",
        "X-Oxidepm-Agent: ops",
    ] {
        assert!(parse(with(h).as_bytes()).unwrap().auto_generated, "{h}");
    }
    for h in [
        "Auto-Submitted: no",
        "Precedence: urgent",
        "Return-Path: <a@example.org>",
    ] {
        assert!(!parse(with(h).as_bytes()).unwrap().auto_generated, "{h}");
    }
}

#[test]
fn the_bridge_flow_over_a_real_maildir() {
    let (_d, md) = maildir();
    for s in [
        PLAIN,
        ALTERNATIVE,
        HTML_ONLY,
        ATTACHMENT,
        ENCODED,
        "garbage",
    ] {
        md.deliver(s.as_bytes()).unwrap();
    }
    let mut published = Vec::new();
    for entry in md.list_new().unwrap() {
        let raw = md.read(&entry).unwrap();
        match parse(&raw) {
            Ok(mail) if mail.to.iter().any(|a| a == "bot@agents.example.net") => {
                published.push(mail.subject);
                md.mark_seen(&entry).unwrap();
            }
            Ok(mail) => panic!("unrouted: {mail:?}"),
            Err(_) => {
                md.mark(&entry, "FS").unwrap();
            }
        }
    }
    assert_eq!(published.len(), 5);
    assert!(md.list_new().unwrap().is_empty());
    let cur = names(&md.cur_dir());
    assert_eq!(cur.iter().filter(|n| n.ends_with(":2,S")).count(), 5);
    assert_eq!(cur.iter().filter(|n| n.ends_with(":2,FS")).count(), 1);
}

// ---------------------------------------------------------------- smtp

#[test]
fn relay_strings_are_parsed() {
    let ok = |r: &str| smtp::parse_relay(r).unwrap();
    assert_eq!(ok("127.0.0.1:2525"), ("127.0.0.1".into(), 2525));
    assert_eq!(ok("mail.local"), ("mail.local".into(), 25));
    assert_eq!(ok("[::1]:587"), ("::1".into(), 587));
    assert_eq!(ok("[::1]"), ("::1".into(), 25));
    for bad in [
        "", ":25", "h:0", "h:x", "h:99999", "::1", "[::1]x", "[]:25", "a b:25",
    ] {
        let err = smtp::parse_relay(bad).unwrap_err();
        assert_eq!(err.kind(), SmtpErrorKind::Permanent, "{bad}");
    }
}

#[test]
fn bad_input_is_a_permanent_error() {
    let to = vec!["bot@example.org".to_owned()];
    let no_headers: &[(String, String)] = &[];
    let e = smtp::build_message("not an address", &to, "s", "b", no_headers).unwrap_err();
    assert_eq!(e.kind(), SmtpErrorKind::Permanent);
    let e = smtp::build_message("a@example.org", &[], "s", "b", no_headers).unwrap_err();
    assert!(e.message().contains("no recipient"));
    for (name, value) in [("Bcc", "x@y"), ("bcc", "x@y"), ("Bad Name", "v"), ("", "v")] {
        let h = vec![(name.to_owned(), value.to_owned())];
        let e = smtp::build_message("a@example.org", &to, "s", "b", &h).unwrap_err();
        assert!(!e.is_transient(), "{name}");
    }
}

#[test]
fn header_values_cannot_inject_headers() {
    let to = vec!["bot@example.org".to_owned()];
    let h = vec![(
        "X-Oxidepm-Entry".to_owned(),
        "1-0\r\nBcc: evil@x".to_owned(),
    )];
    let msg = smtp::build_message("a@example.org", &to, "hi\r\nBcc: evil@y", "b", &h).unwrap();
    let text = String::from_utf8(msg.formatted()).unwrap();
    assert!(!text.contains("\r\nBcc:"), "{text}");
    assert!(
        text.contains("X-Oxidepm-Entry: 1-0 Bcc: evil@x\r\n"),
        "{text}"
    );
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let to = vec!["bot@example.org".to_owned()];
    let e = smtp::send(
        &format!("127.0.0.1:{port}"),
        "a@example.org",
        &to,
        "s",
        "b",
        &[],
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), SmtpErrorKind::Transient, "{e}");
    assert_eq!(e.code(), None);
}

#[tokio::test]
async fn sends_through_a_real_smtp_sink_with_headers() {
    let Some(sink) = Sink::start() else { return };
    let to = vec![
        "Alice <alice@example.org>".to_owned(),
        "bob@example.org".to_owned(),
    ];
    let headers = vec![
        ("X-Oxidepm-Agent".to_owned(), "ops".to_owned()),
        ("X-Oxidepm-Entry".to_owned(), "1700000000000-0".to_owned()),
        smtp::in_reply_to_header("abc.123@mail.example.org"),
        smtp::references_header(&["older@x", "abc.123@mail.example.org"]),
    ];
    let body = "Restarted the worker.\nAll good — ✓\n.\nA line with a lone dot above.\n";
    smtp::send(
        &sink.relay(),
        "Ops Agent <ops@agents.example.net>",
        &to,
        "Re: Grüße",
        body,
        &headers,
    )
    .await
    .unwrap();

    let got = sink.received(1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["from"], "ops@agents.example.net");
    assert_eq!(
        got[0]["to"],
        serde_json::json!(["alice@example.org", "bob@example.org"])
    );
    let data = got[0]["data"].as_str().unwrap();
    for h in [
        "X-Oxidepm-Agent: ops\r\n",
        "X-Oxidepm-Entry: 1700000000000-0\r\n",
        "In-Reply-To: <abc.123@mail.example.org>\r\n",
        "References: <older@x> <abc.123@mail.example.org>\r\n",
        "Message-ID: <",
    ] {
        assert!(data.contains(h), "missing {h:?} in {data}");
    }
    // Round trip through our own parser.
    let m = parse(data.as_bytes()).unwrap();
    assert_eq!(m.from, "ops@agents.example.net");
    assert_eq!(m.to, vec!["alice@example.org", "bob@example.org"]);
    assert_eq!(m.subject, "Re: Grüße");
    // SMTP framing may add a final line break; the text is otherwise intact.
    assert_eq!(m.text.trim_end(), body.trim_end());
    assert_eq!(m.in_reply_to.as_deref(), Some("abc.123@mail.example.org"));
    assert!(
        m.auto_generated,
        "our own mail must be recognised if it loops back"
    );
}

#[tokio::test]
async fn smtp_refusals_are_classified() {
    let Some(sink) = Sink::start() else { return };
    let send = |rcpt: &str| {
        let to = vec![rcpt.to_owned(), "ok@example.org".to_owned()];
        let relay = sink.relay();
        async move { smtp::send(&relay, "a@example.org", &to, "s", "b", &[]).await }
    };
    let e = send("reject5@example.org").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (SmtpErrorKind::Permanent, Some(550)),
        "{e}"
    );
    assert!(e.to_string().contains("permanent"));
    let e = send("reject4@example.org").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (SmtpErrorKind::Transient, Some(450)),
        "{e}"
    );
    assert!(e.is_transient());
    send("fine@example.org").await.unwrap();
    assert_eq!(
        sink.received(1).len(),
        1,
        "refused mail must not be delivered"
    );

    // A dead relay mid-way: stop the sink, the next send is transient.
    let relay = sink.relay();
    drop(sink);
    let to = vec!["x@example.org".to_owned()];
    let e = smtp::send(&relay, "a@example.org", &to, "s", "b", &[])
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
}
