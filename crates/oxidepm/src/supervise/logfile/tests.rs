use super::*;
use crate::supervise::logshim::copy_stream;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn append(path: &Path, text: &str) {
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn numbered(range: std::ops::Range<usize>) -> String {
    range.map(|i| format!("line {i}\n")).collect()
}

fn want(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("line {i}")).collect()
}

#[test]
fn paths() {
    let [out, err] = log_paths(Path::new("/l"), "web");
    assert_eq!(out, Path::new("/l/web-out.log"));
    assert_eq!(err, Path::new("/l/web-err.log"));
    assert_eq!(rotated_path(&out, 3), Path::new("/l/web-out.log.3"));
}

#[test]
fn tail_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    assert!(tail(&path, 3, 10).unwrap().is_empty());
    fs::write(&path, "").unwrap();
    assert!(tail(&path, 0, 10).unwrap().is_empty());
    fs::write(&path, "a\n\nb\n").unwrap();
    assert_eq!(tail(&path, 0, 10).unwrap(), ["a", "", "b"]);
    assert_eq!(tail(&path, 0, 2).unwrap(), ["", "b"]);
    assert!(tail(&path, 0, 0).unwrap().is_empty());
    fs::write(&path, "a\nb\npart").unwrap();
    assert_eq!(tail(&path, 0, 2).unwrap(), ["b", "part"]);
    fs::write(&path, b"ok\n\xff\xfe bad\n").unwrap();
    assert_eq!(tail(&path, 0, 1).unwrap(), ["\u{fffd}\u{fffd} bad"]);
    // Many blocks back, with lines straddling block edges.
    fs::write(&path, numbered(0..100_000)).unwrap();
    assert_eq!(tail(&path, 0, 30_000).unwrap(), want(70_000..100_000));
    assert_eq!(tail(&path, 0, 200_000).unwrap(), want(0..100_000));
}

#[test]
fn tail_across_rotated_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    fs::write(rotated_path(&path, 3), numbered(0..10)).unwrap();
    fs::write(rotated_path(&path, 2), numbered(10..20)).unwrap();
    fs::write(rotated_path(&path, 1), numbered(20..30)).unwrap();
    fs::write(&path, numbered(30..35)).unwrap();
    assert_eq!(tail(&path, 3, 3).unwrap(), want(32..35));
    assert_eq!(tail(&path, 3, 5).unwrap(), want(30..35));
    assert_eq!(tail(&path, 3, 12).unwrap(), want(23..35));
    assert_eq!(tail(&path, 3, 100).unwrap(), want(0..35));
    assert_eq!(tail(&path, 2, 100).unwrap(), want(10..35));
    fs::remove_file(rotated_path(&path, 2)).unwrap();
    fs::remove_file(&path).unwrap();
    let mut expected = want(0..10);
    expected.extend(want(20..30));
    assert_eq!(tail(&path, 3, 100).unwrap(), expected);
    // Two missing in a row end the rotated files: an app keeping many is
    // not searched name by name up to its count on every read.
    fs::remove_file(rotated_path(&path, 1)).unwrap();
    fs::write(&path, numbered(30..35)).unwrap();
    assert_eq!(tail(&path, 1000, 100).unwrap(), want(30..35));
}

#[test]
fn flush_empties_a_log_and_removes_its_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    flush(&path, 5).unwrap();
    let other = dir.path().join("a.log2");
    let kept = dir.path().join("a.log.x");
    fs::write(&other, "x").unwrap();
    fs::write(&kept, "x").unwrap();
    fs::write(&path, "abc\n").unwrap();
    for i in [1, 2, 3, 7, 150] {
        fs::write(rotated_path(&path, i), "old\n").unwrap();
    }
    flush(&path, 3).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    for i in [1, 2, 3, 7, 150] {
        assert!(!rotated_path(&path, i).exists(), "{i}");
    }
    assert!(other.exists() && kept.exists());
}

#[test]
fn dropped_bytes_are_read_from_the_writers_count_and_flushed_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    assert_eq!(dropped_bytes(&path), 0);
    fs::write(dir.path().join("a.log.dropped"), "1234\n").unwrap();
    assert_eq!(dropped_bytes(&path), 1234);
    // Anything but a number is no count, never an error.
    fs::write(dir.path().join("a.log.dropped"), "x".repeat(100)).unwrap();
    assert_eq!(dropped_bytes(&path), 0);
    // A link in its place is not followed.
    let elsewhere = dir.path().join("elsewhere");
    fs::write(&elsewhere, "99\n").unwrap();
    fs::remove_file(dir.path().join("a.log.dropped")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.path().join("a.log.dropped")).unwrap();
    assert_eq!(dropped_bytes(&path), 0);
    fs::remove_file(dir.path().join("a.log.dropped")).unwrap();
    fs::write(dir.path().join("a.log.dropped"), "7\n").unwrap();
    flush(&path, 3).unwrap();
    assert_eq!(dropped_bytes(&path), 0);
    assert!(!dir.path().join("a.log.dropped").exists());
    assert_eq!(fs::read_to_string(&elsewhere).unwrap(), "99\n");
}

fn wait_for(mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn flush_under_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let (reader, mut writer) = io::pipe().unwrap();
    let shim_path = path.clone();
    // Near max_bytes, so a stale size after the flush would force a rotation.
    let before = numbered(0..1000);
    let max_bytes = before.len() as u64 + 20;
    let shim = thread::spawn(move || copy_stream(reader, &shim_path, false, max_bytes, 2));
    writer.write_all(before.as_bytes()).unwrap();
    wait_for(|| fs::metadata(&path).map(|m| m.len()).unwrap_or(0) == before.len() as u64);
    fs::write(rotated_path(&path, 1), "older\n").unwrap();
    flush(&path, 2).unwrap();
    writer.write_all(numbered(1000..1100).as_bytes()).unwrap();
    drop(writer);
    shim.join().unwrap().unwrap();
    // Appended from offset 0: no hole of zeros, no rotation, nothing old.
    assert_eq!(fs::read_to_string(&path).unwrap(), numbered(1000..1100));
    assert!(!rotated_path(&path, 1).exists());
}

#[test]
fn follower_basics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let mut f = Follower::open_at_end(&path, 3);
    assert!(f.poll().unwrap().is_empty());
    append(&path, "first\nsec");
    assert_eq!(f.poll().unwrap(), ["first"]);
    assert!(f.poll().unwrap().is_empty());
    append(&path, "ond\nthird\n");
    assert_eq!(f.poll().unwrap(), ["second", "third"]);

    // Starts at the end, but a line still being written comes out whole.
    let mut g = Follower::open_at_end(&path, 3);
    append(&path, "four");
    let mut h = Follower::open_at_end(&path, 3);
    assert!(g.poll().unwrap().is_empty());
    append(&path, "th\n");
    assert_eq!(g.poll().unwrap(), ["fourth"]);
    assert_eq!(h.poll().unwrap(), ["fourth"]);
}

#[test]
fn follower_across_rotation_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    append(&path, "before\n");
    let mut f = Follower::open_at_end(&path, 3);
    append(&path, "old 1\n");
    assert_eq!(f.poll().unwrap(), ["old 1"]);
    // Written to the old file after our last poll, then rotated away.
    append(&path, "old 2\nold 3\n");
    fs::rename(&path, rotated_path(&path, 1)).unwrap();
    append(&path, "new 1\n");
    assert_eq!(f.poll().unwrap(), ["old 2", "old 3", "new 1"]);
    append(&path, "new 2\n");
    assert_eq!(f.poll().unwrap(), ["new 2"]);

    flush(&path, 2).unwrap();
    assert!(f.poll().unwrap().is_empty());
    append(&path, "after flush\n");
    assert_eq!(f.poll().unwrap(), ["after flush"]);
    fs::write(&path, "").unwrap();
    append(&path, "x\n");
    assert_eq!(f.poll().unwrap(), ["x"]);

    // keep = 0 rotation: removed, then created again.
    fs::remove_file(&path).unwrap();
    assert!(f.poll().unwrap().is_empty());
    append(&path, "recreated\n");
    assert_eq!(f.poll().unwrap(), ["recreated"]);
}

/// Hands the shim one chunk per read and reports each read call, so the
/// test knows the previous chunk has been written.
struct Handshake {
    chunks: mpsc::Receiver<Vec<u8>>,
    reads: mpsc::Sender<()>,
}
impl Read for Handshake {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let _ = self.reads.send(());
        match self.chunks.recv() {
            Ok(chunk) => {
                buf[..chunk.len()].copy_from_slice(&chunk);
                Ok(chunk.len())
            }
            Err(_) => Ok(0),
        }
    }
}

#[test]
fn follower_sees_every_line_through_shim_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    let (chunk_tx, chunks) = mpsc::channel();
    let (reads, read_rx) = mpsc::channel();
    let shim_path = path.clone();
    let shim =
        thread::spawn(move || copy_stream(Handshake { chunks, reads }, &shim_path, true, 4000, 3));
    let mut f = Follower::open_at_end(&path, 3);
    let mut got = Vec::new();
    let all = numbered(0..20_000);
    // Cuts mid-line on purpose. A chunk's output stays under max_bytes so
    // it rotates at most once: a file both created and rotated away
    // between two polls would be missed, as with `tail -F`.
    for chunk in all.as_bytes().chunks(500) {
        read_rx.recv().unwrap();
        got.extend(f.poll().unwrap());
        chunk_tx.send(chunk.to_vec()).unwrap();
    }
    drop(chunk_tx);
    shim.join().unwrap().unwrap();
    got.extend(f.poll().unwrap());
    let got: Vec<&str> = got.iter().map(|l| &l[25..]).collect();
    assert_eq!(got, want(0..20_000));
    assert!(rotated_path(&path, 3).exists());
}

#[test]
fn flush_tail_and_follow_never_go_through_a_link() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::write(&outside, "secret\n").unwrap();
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let path = logs.join("a-out.log");
    symlink(&outside, &path).unwrap();
    let rotated_outside = dir.path().join("rotated");
    fs::write(&rotated_outside, "secret\n").unwrap();
    symlink(&rotated_outside, rotated_path(&path, 1)).unwrap();

    let e = flush(&path, 3).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "secret\n");
    // The rotated link was removed, not what it pointed to.
    assert!(fs::symlink_metadata(rotated_path(&path, 1)).is_err());
    assert_eq!(fs::read_to_string(&rotated_outside).unwrap(), "secret\n");

    assert!(tail(&path, 3, 10).is_err());
    let mut f = Follower::open_at_end(&path, 3);
    assert!(f.poll().is_err());
    // A link in place of logs/ itself.
    let link = dir.path().join("link");
    symlink(&logs, &link).unwrap();
    fs::remove_file(&path).unwrap();
    fs::write(&path, "mine\n").unwrap();
    assert!(flush(&link.join("a-out.log"), 3).is_err());
    assert_eq!(fs::read_to_string(&path).unwrap(), "mine\n");
}

#[test]
fn a_fifo_in_place_of_a_log_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(tail(&path, 0, 10).is_err());
    assert!(flush(&path, 0).is_err());
}

/// What the log writer does at a rotation (keep ≥ 1).
fn rotate(path: &Path, keep: u32) {
    let _ = fs::remove_file(rotated_path(path, keep));
    for i in (1..keep).rev() {
        let _ = fs::rename(rotated_path(path, i), rotated_path(path, i + 1));
    }
    fs::rename(path, rotated_path(path, 1)).unwrap();
    fs::write(path, "").unwrap();
}

/// Every line a follower hands on, reading at most `max` bytes.
fn read_some(f: &mut Follower, max: usize, got: &mut Vec<String>) -> bool {
    f.read(max, |l| got.push(String::from_utf8_lossy(l).into_owned()))
        .unwrap()
}

#[test]
fn a_follower_behind_its_writer_reads_every_line_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    fs::write(&path, "before\n").unwrap();
    let mut f = Follower::open_at_end(&path, 3);
    let mut got = Vec::new();
    // The writer writes 100 lines a file, the reader takes about 40 of
    // them a file: behind by a few files at the end, over 6 rotations.
    for r in 0..6 {
        append(&path, &numbered(r * 100..(r + 1) * 100));
        read_some(&mut f, 300, &mut got);
        rotate(&path, 3);
    }
    append(&path, &numbered(600..650));
    assert!(
        got.len() < 400,
        "{} read: the reader was not behind",
        got.len()
    );
    while read_some(&mut f, 500, &mut got) {}
    assert_eq!(got, want(0..650));
}

#[test]
fn a_follower_behind_the_oldest_kept_file_is_told_exactly_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    fs::write(&path, "").unwrap();
    // keep 1: the follower holds at most 3 files.
    let mut f = Follower::open_at_end(&path, 1);
    for r in 0..8 {
        append(&path, &numbered(r * 100..(r + 1) * 100));
        f.refresh();
        rotate(&path, 1);
    }
    append(&path, &numbered(800..900));
    let mut got = Vec::new();
    while read_some(&mut f, 4096, &mut got) {}
    let mut expected = vec!["… 600 lines rotated away before they were read".to_string()];
    expected.extend(want(600..900));
    assert_eq!(got, expected);
    // A line begun, ended, then let go counts as one.
    let mut g = Follower::open_at_end(&path, 1);
    append(&path, "half");
    read_some(&mut g, 4096, &mut Vec::new());
    append(&path, " done\n");
    for _ in 0..3 {
        g.refresh();
        rotate(&path, 1);
        append(&path, "x\n");
    }
    g.refresh();
    let mut got = Vec::new();
    while read_some(&mut g, 4096, &mut got) {}
    assert_eq!(
        got,
        ["… 1 line rotated away before it was read", "x", "x", "x"]
    );
}

#[test]
fn files_that_came_and_went_unseen_are_said_where_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    fs::write(&path, "").unwrap();
    let mut f = Follower::open_at_end(&path, 1);
    append(&path, &numbered(0..10));
    f.refresh();
    // Three rotations with no look between: the file of lines 10..20 is
    // made and removed unseen.
    for r in 1..4 {
        rotate(&path, 1);
        append(&path, &numbered(r * 10..(r + 1) * 10));
    }
    let mut got = Vec::new();
    while read_some(&mut f, 4096, &mut got) {}
    assert_eq!(got[..10], want(0..10)[..]);
    assert!(got[10].contains("how many is not known"), "{}", got[10]);
    assert_eq!(got[11..], want(20..40)[..]);
}
