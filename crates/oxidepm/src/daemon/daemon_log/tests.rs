use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn record(i: usize) -> String {
    format!("2025-01-01T00:00:00.000Z INFO  status by human:cli via daemon {i:06}\n")
}

#[test]
fn the_log_rotates_by_size_and_keeps_so_many_files() {
    let t = tempfile::tempdir().unwrap();
    let mut log = DaemonLog::open(t.path(), "daemon.log".as_ref(), 1000, 2, false).unwrap();
    let len = record(0).len() as u64;
    for i in 0..500 {
        log.write_all(record(i).as_bytes()).unwrap();
    }
    assert_eq!(
        names(t.path()),
        ["daemon.log", "daemon.log.1", "daemon.log.2"]
    );
    for name in ["daemon.log", "daemon.log.1", "daemon.log.2"] {
        let text = std::fs::read_to_string(t.path().join(name)).unwrap();
        assert!(text.len() as u64 <= 1000, "{name}: {} bytes", text.len());
        // Whole records only: none is split across two files.
        assert!(text.lines().all(|l| l.len() as u64 == len - 1), "{name}");
    }
    // The newest record is in daemon.log, the ones before in .1.
    let current = std::fs::read_to_string(t.path().join("daemon.log")).unwrap();
    assert!(current.ends_with(&record(499)));
    let previous = std::fs::read_to_string(t.path().join("daemon.log.1")).unwrap();
    let first_current = current.lines().next().unwrap();
    let last_previous = previous.lines().last().unwrap();
    assert!(last_previous < first_current);
}

#[test]
fn what_others_append_counts_toward_the_size() {
    let t = tempfile::tempdir().unwrap();
    let mut log = DaemonLog::open(t.path(), "daemon.log".as_ref(), 1000, 1, false).unwrap();
    log.write_all(b"first\n").unwrap();
    // A panic message or a log shim, through its own descriptor.
    let mut other = std::fs::OpenOptions::new()
        .append(true)
        .open(t.path().join("daemon.log"))
        .unwrap();
    other.write_all(&[b'x'; 990]).unwrap();
    log.write_all(b"second\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("daemon.log")).unwrap(),
        "second\n"
    );
}

#[test]
fn a_link_planted_among_rotated_files_is_moved_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let outside = t.path().join("precious");
    std::fs::write(&outside, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&outside, home.join("daemon.log.1")).unwrap();
    std::os::unix::fs::symlink(&outside, home.join("daemon.log.2")).unwrap();
    let mut log = DaemonLog::open(&home, "daemon.log".as_ref(), 200, 2, false).unwrap();
    for i in 0..50 {
        log.write_all(record(i).as_bytes()).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    for name in ["daemon.log", "daemon.log.1", "daemon.log.2"] {
        let meta = std::fs::symlink_metadata(home.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is a plain file now");
    }
}

#[test]
fn a_link_in_place_of_the_log_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("precious");
    std::fs::write(&outside, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&outside, t.path().join("daemon.log")).unwrap();
    let e = DaemonLog::open(t.path(), "daemon.log".as_ref(), 200, 2, false)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
}

#[test]
fn keep_zero_starts_the_file_over_and_max_zero_never_rotates() {
    let t = tempfile::tempdir().unwrap();
    let mut log = DaemonLog::open(t.path(), "a.log".as_ref(), 100, 0, false).unwrap();
    let mut never = DaemonLog::open(t.path(), "b.log".as_ref(), 0, 3, false).unwrap();
    for i in 0..20 {
        log.write_all(record(i).as_bytes()).unwrap();
        never.write_all(record(i).as_bytes()).unwrap();
    }
    assert_eq!(names(t.path()), ["a.log", "b.log"]);
    assert_eq!(
        std::fs::read_to_string(t.path().join("a.log")).unwrap(),
        record(19)
    );
    let all = std::fs::read_to_string(t.path().join("b.log")).unwrap();
    assert_eq!(all.lines().count(), 20);
}
