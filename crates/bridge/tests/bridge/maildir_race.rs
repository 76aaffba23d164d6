//! The attack on the real bridge process: while mail arrives, someone who
//! can write the Maildir keeps swapping each message for a symlink to a
//! file only its owner may read (and plants a hard link to it). Whatever
//! the timing, that file never reaches an inbox.

use super::harness::*;
use serde_json::json;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MARKER: &str = "SECRET-MARKER";
/// Names in `new/` the attacker keeps swapping.
const NAMES: usize = 8;
/// Legitimate mails the bridge must have published before the test ends:
/// enough scans for the swap to land between a listing and a read.
const PUBLISHED: usize = 16;

fn mail(n: u64) -> String {
    format!(
        "From: carol@example.com\r\nTo: alice@example.org\r\nSubject: m{n}\r\n\r\nlegit {n}\r\n"
    )
}

#[test]
fn a_symlink_swapped_into_new_never_publishes_its_target() {
    let redis = Redis::start(&["alice"]);
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("Mail");
    for sub in ["tmp", "new", "cur"] {
        std::fs::create_dir_all(maildir.join(sub)).unwrap();
    }
    let secret = dir.path().join("secret");
    std::fs::write(
        &secret,
        format!(
            "From: root@example.com\r\nTo: alice@example.org\r\nSubject: s\r\n\r\n{MARKER}\r\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A hard link to another such file from the start: the bridge must not
    // read it either. (Another file, so that the symlinks' target keeps
    // one link and only O_NOFOLLOW stands between it and the bridge.)
    let linked = dir.path().join("secret2");
    std::fs::copy(&secret, &linked).unwrap();
    std::fs::hard_link(&linked, maildir.join("new/hardlink")).unwrap();

    redis.write_config(
        &redis.config_path(),
        json!({
            "agents": ["alice"],
            "sources": ["email"],
            "webhook": null,
            "routes": [{"source": "email", "address": "alice@example.org", "agent": "alice"}],
            "email": {"maildir": maildir, "smtp": "127.0.0.1:1", "domain": "example.org"},
        }),
    );
    let bridge = BridgeProcess::spawn(&redis.config_path(), &dir.path().join("bridge.log"));

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (maildir, secret) = (maildir.clone(), secret.clone());
        std::thread::spawn(move || {
            // Every name is a regular file half of the time and a link the
            // other half, changing every few microseconds; each round has
            // new unique names, as a Maildir wants.
            let mut n = 0u64;
            let name = |i: usize, round: u64| maildir.join(format!("new/{round}.x{i}.host"));
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for i in 0..NAMES {
                    let _ = std::fs::remove_file(name(i, round.wrapping_sub(1)));
                    let regular = maildir.join(format!("tmp/r{i}"));
                    std::fs::write(&regular, mail(n)).unwrap();
                    std::fs::rename(&regular, name(i, round)).unwrap();
                    n += 1;
                }
                for i in 0..NAMES {
                    let link = maildir.join(format!("tmp/l{i}"));
                    let _ = std::fs::remove_file(&link);
                    symlink(&secret, &link).unwrap();
                    std::fs::rename(&link, name(i, round)).unwrap();
                }
                round += 1;
            }
            n
        })
    };
    let mut admin = redis.admin();
    // Generous: on a loaded machine the swapper and the bridge compete.
    eventually(4 * WAIT, "legitimate mail to be published", || {
        entries(&mut admin, "alice:email:inbox").len() >= PUBLISHED
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();

    let inbox = entries(&mut admin, "alice:email:inbox");
    let unrouted = entries(&mut admin, "bridge:unrouted");
    for (id, e) in inbox.iter().chain(unrouted.iter()) {
        let text = e.get("text").map(String::as_str).unwrap_or("");
        assert!(!text.contains(MARKER), "published {id}: {e:?}");
        assert!(text.starts_with("legit "), "{id}: {e:?}");
    }
    assert!(unrouted.is_empty(), "{unrouted:?}");
    // The hard link was set aside for a human, unread.
    eventually(WAIT, "the hard link to be flagged", || {
        std::fs::read_dir(maildir.join("cur"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy() == "hardlink:2,FS")
    });
    assert!(
        bridge.log().contains("links"),
        "the bridge says why it did not read it: {}",
        bridge.log()
    );
    assert!(swaps > PUBLISHED as u64, "{swaps} swaps");
}
