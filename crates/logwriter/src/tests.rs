use super::*;
use std::ffi::OsString;
use std::fs;
use std::io::{Cursor, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::thread;

fn rotated_path(path: &Path, i: u32) -> PathBuf {
    PathBuf::from(rotated_name(path.as_os_str(), i))
}

/// Milliseconds since the epoch of an RFC 3339 UTC time as the writer
/// formats it, checked field by field.
fn parse_stamp(ts: &str) -> u64 {
    let b = ts.as_bytes();
    assert_eq!(b.len(), 24, "{ts}");
    for (i, c) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ] {
        assert_eq!(b[i], c, "{ts}");
    }
    let n = |r: std::ops::Range<usize>| ts[r].parse::<u64>().unwrap();
    let (y, mo, d) = (n(0..4), n(5..7), n(8..10));
    assert!((1..=12).contains(&mo) && (1..=31).contains(&d), "{ts}");
    // Days since the epoch (valid for 1970..2100, no 2100 leap day).
    let leaps = (1969..y).filter(|y| y % 4 == 0).count() as u64
        - (1969..1972).filter(|y| y % 4 == 0).count() as u64;
    let month_days = [
        31,
        28 + u64::from(y % 4 == 0),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let days =
        (y - 1970) * 365 + leaps + month_days[..(mo - 1) as usize].iter().sum::<u64>() + d - 1;
    ((days * 24 + n(11..13)) * 60 + n(14..16)) * 60_000 + n(17..19) * 1000 + n(20..23)
}

fn read(path: &Path) -> String {
    String::from_utf8(fs::read(path).unwrap()).unwrap()
}

/// Each read returns what the closure gives (at most one read's worth; empty is EOF).
struct FnReader<F>(F);
impl<F: FnMut() -> Vec<u8>> Read for FnReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let piece = (self.0)();
        buf[..piece.len()].copy_from_slice(&piece);
        Ok(piece.len())
    }
}

/// Returns `data` in reads of `size` bytes, as a pipe might.
fn pieces(data: &[u8], size: usize) -> impl Read + '_ {
    let mut it = data.chunks(size);
    FnReader(move || it.next().unwrap_or_default().to_vec())
}

#[test]
fn args_round_trip() {
    let journal = Some(crate::JournalTarget {
        identifier: "web".into(),
        socket: "/tmp/j sock".into(),
    });
    for (timestamps, journal, files) in [
        (true, None, true),
        (false, None, true),
        (true, journal.clone(), true),
        (false, journal, false),
    ] {
        let cfg = WriterConfig {
            out_path: "/l/a b-out.log".into(),
            err_path: "/l/a b-err.log".into(),
            timestamps,
            max_bytes: 10 << 20,
            keep: 7,
            journal,
            files,
        };
        assert_eq!(WriterConfig::from_args(&cfg.to_args()).unwrap(), cfg);
    }
    for bad in [
        "--out a --err b --max-bytes 1",
        "--out a --err b --max-bytes x --keep 1",
        "--out a --err b --max-bytes 1 --keep 1 -v",
        "--out a --max-bytes 1 --keep 1",
        // Files off with no journal: the output would go nowhere.
        "--out a --err b --max-bytes 1 --keep 1 --no-files",
        "--out a --err b --max-bytes 1 --keep 1 --journal-socket /s",
        "--out",
    ] {
        let args: Vec<OsString> = bad.split(' ').map(OsString::from).collect();
        assert!(WriterConfig::from_args(&args).is_err(), "{bad}");
    }
}

#[test]
fn timestamps_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    copy_stream(Cursor::new("hello\n\nworld"), &path, true, 0, 0).unwrap();
    let text = read(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text:?}");
    for (line, want) in lines.iter().zip(["hello", "", "world"]) {
        let (ts, rest) = line.split_at(24);
        assert_eq!(rest, format!(" {want}"));
        // UTC, `Z`, three fraction digits, and now.
        let t = parse_stamp(ts);
        assert!(stamp::now_ms().abs_diff(t) < 60_000, "{ts}");
    }
    assert!(text.ends_with("world\n"));
}

#[test]
fn appends_to_existing_file_and_creates_0640() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    copy_stream(Cursor::new("old\n"), &path, false, 0, 0).unwrap();
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "mode {mode:o}");
    copy_stream(Cursor::new("a\nb\n"), &path, false, 0, 0).unwrap();
    assert_eq!(read(&path), "old\na\nb\n");
}

#[test]
fn partial_line_joined_across_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let mut it = ["hel", "lo\nwor", "ld\n", "ta", "il", ""].into_iter();
    let input = FnReader(move || it.next().unwrap().as_bytes().to_vec());
    copy_stream(input, &path, false, 0, 0).unwrap();
    assert_eq!(read(&path), "hello\nworld\ntail\n");
}

#[test]
fn long_lines_cut_the_same_whatever_the_reads() {
    let mut data = vec![b'a'; 2 * MAX_LINE + 10];
    data.push(b'\n');
    data.extend(vec![b'b'; MAX_LINE]);
    data.push(b'\n');
    data.extend(vec![b'c'; MAX_LINE + 1]);
    let m = MAX_LINE;
    let want = [
        (b'a', m),
        (b'a', m),
        (b'a', 10),
        (b'b', m),
        (b'c', m),
        (b'c', 1),
    ];
    let dir = tempfile::tempdir().unwrap();
    for size in [1000, 4096, READ_CHUNK - 1, READ_CHUNK] {
        let path = dir.path().join(format!("{size}.log"));
        copy_stream(pieces(&data, size), &path, false, 0, 0).unwrap();
        let text = read(&path);
        let got: Vec<(u8, usize)> = text
            .split_terminator('\n')
            .map(|l| (l.as_bytes()[0], l.len()))
            .collect();
        assert_eq!(got, want, "read size {size}");
        assert!(text.ends_with('\n'));
    }
}

/// All rotated files oldest first, then the current one.
fn all_lines(path: &Path, keep: u32, max_bytes: u64) -> Vec<String> {
    let mut lines = Vec::new();
    for i in (0..=keep).rev() {
        let p = match i {
            0 => path.to_path_buf(),
            i => rotated_path(path, i),
        };
        if let Ok(text) = fs::read_to_string(&p) {
            assert!(text.is_empty() || text.ends_with('\n'), "{p:?}");
            assert!(text.len() as u64 <= max_bytes, "{p:?}: {}", text.len());
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    assert!(!rotated_path(path, keep + 1).exists());
    lines
}

#[test]
fn rotation_loses_and_tears_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a-out.log");
    let (max_bytes, keep, total) = (256 * 1024, 60, 200_000);
    let line = |i: usize| format!("line {i:07} {}", "x".repeat(i % 13));
    let (reader, mut writer) = io::pipe().unwrap();
    let feeder = thread::spawn(move || {
        let data: String = (0..total).map(|i| line(i) + "\n").collect();
        // Odd-sized writes put line ends anywhere in the shim's reads.
        for chunk in data.as_bytes().chunks(7919) {
            writer.write_all(chunk).unwrap();
        }
    });
    copy_stream(reader, &path, true, max_bytes, keep).unwrap();
    feeder.join().unwrap();
    assert!(rotated_path(&path, 20).exists());
    let lines = all_lines(&path, keep, max_bytes);
    assert_eq!(lines.len(), total);
    for (i, got) in lines.iter().enumerate() {
        assert_eq!(got[24..], format!(" {}", line(i)));
    }
}

#[test]
fn rotation_keeps_n_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let data: String = (0..10_000).map(|i| format!("{i:05}\n")).collect();
    copy_stream(pieces(data.as_bytes(), 1000), &path, false, 600, 3).unwrap();
    assert!(rotated_path(&path, 3).exists());
    let lines = all_lines(&path, 3, 600);
    // Each full file holds 100 lines of 6 bytes.
    assert!(lines.len() > 300 && lines.len() <= 400, "{}", lines.len());
    let first: usize = lines[0].parse().unwrap();
    for (k, line) in lines.iter().enumerate() {
        assert_eq!(line, &format!("{:05}", first + k));
    }
    assert_eq!(lines.last().unwrap(), "09999");
}

#[test]
fn keep_zero_starts_the_file_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let data: String = (0..1000).map(|i| format!("{i:03}\n")).collect();
    copy_stream(Cursor::new(data), &path, false, 100, 0).unwrap();
    let lines = all_lines(&path, 0, 100);
    assert_eq!(lines.last().unwrap(), "999");
}

#[test]
fn existing_size_counts_toward_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    fs::write(&path, "x".repeat(95) + "\n").unwrap();
    copy_stream(Cursor::new("abcdef\n"), &path, false, 100, 2).unwrap();
    assert_eq!(read(&rotated_path(&path, 1)).len(), 96);
    assert_eq!(read(&path), "abcdef\n");
}

#[test]
fn write_errors_do_not_stop_the_shim() {
    // /dev/full is refused (only regular files are logs), and every later
    // open fails the same way: all input must still be consumed.
    let data = "y\n".repeat(100_000);
    let mut input = Cursor::new(data.as_bytes());
    copy_stream(&mut input, Path::new("/dev/full"), true, 0, 0).unwrap();
    assert_eq!(input.position() as usize, data.len());

    // A log directory that appears later: the open is retried on the next chunk.
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("logs");
    let path = sub.join("a.log");
    let mut reads = 0;
    let input = FnReader(|| {
        reads += 1;
        match reads {
            1 => b"lost\n".to_vec(),
            2 => {
                fs::create_dir(&sub).unwrap();
                b"kept\n".to_vec()
            }
            _ => Vec::new(),
        }
    });
    copy_stream(input, &path, false, 1000, 2).unwrap();
    // The gap is told where it was, and counted next to the log.
    let text = read(&path);
    let (marker, rest) = text.split_once('\n').unwrap();
    assert_eq!(rest, "kept\n");
    let (head, why) = marker.split_once(": ").unwrap();
    assert_eq!(why, "No such file or directory");
    let words: Vec<&str> = head.split(' ').collect();
    assert_eq!(words[..4], ["…", "5", "bytes", "dropped"], "{marker}");
    assert!(parse_stamp(words[5]) <= parse_stamp(words[7]), "{marker}");
    let counter = sub.join("a.log.dropped");
    assert_eq!(read(&counter), "5\n");
}

#[test]
fn every_gap_adds_to_the_count() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("logs");
    let path = sub.join("a.log");
    // An earlier writer of this log lost 6 bytes; this one loses a line:
    // 29 bytes as the log would have held it, timestamp included.
    let mut reads = 0;
    let input = FnReader(|| {
        reads += 1;
        match reads {
            1 => b"one\n".to_vec(),
            2 => {
                fs::create_dir(&sub).unwrap();
                fs::write(sub.join("a.log.dropped"), "6\n").unwrap();
                b"two\n".to_vec()
            }
            _ => Vec::new(),
        }
    });
    copy_stream(input, &path, true, 0, 0).unwrap();
    assert_eq!(read(&sub.join("a.log.dropped")), "35\n");
    let text = read(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0][24..].starts_with(" … 29 bytes dropped between "),
        "{text}"
    );
    assert!(lines[1].ends_with(" two"), "{text}");
    let logs = oxidepm_sys::dir::Dir::open(&sub).unwrap();
    assert_eq!(read_total(&logs, "a.log.dropped".as_ref()), 35);
}

#[test]
fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let lines = 200_000;
    let data = format!("{}\n", "z".repeat(99)).repeat(lines);
    let start = std::time::Instant::now();
    copy_stream(Cursor::new(data), &path, true, 0, 0).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let len = fs::metadata(&path).unwrap().len();
    assert_eq!(len, (lines * (100 + 25)) as u64);
    println!(
        "log writer: {lines} lines in {secs:.3}s, {:.0}/s",
        lines as f64 / secs
    );
}

#[test]
fn a_link_planted_as_the_log_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::write(&outside, "precious\n").unwrap();
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let path = logs.join("a-out.log");
    symlink(&outside, &path).unwrap();
    let data = "y\n".repeat(10_000);
    let mut input = Cursor::new(data.as_bytes());
    copy_stream(&mut input, &path, false, 1000, 2).unwrap();
    // Drained (the app never blocks), yet nothing went through the link,
    // and rotation never moved the link's target.
    assert_eq!(input.position() as usize, data.len());
    assert_eq!(read(&outside), "precious\n");
    assert!(fs::symlink_metadata(&path).unwrap().is_symlink());
    assert!(!rotated_path(&path, 1).exists());
}

#[test]
fn links_planted_as_rotated_logs_are_moved_and_removed_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let path = logs.join("a-out.log");
    let mut victims = Vec::new();
    for i in 1..=3 {
        let v = dir.path().join(format!("victim{i}"));
        fs::write(&v, "precious\n").unwrap();
        symlink(&v, rotated_path(&path, i)).unwrap();
        victims.push(v);
    }
    copy_stream(Cursor::new("z\n".repeat(5_000)), &path, false, 1000, 2).unwrap();
    for v in &victims {
        assert_eq!(read(v), "precious\n", "{}", v.display());
    }
    // Rotation went on: the kept files are real logs now.
    for i in 1..=2 {
        let meta = fs::symlink_metadata(rotated_path(&path, i)).unwrap();
        assert!(meta.is_file(), "{i}");
    }
}

#[test]
fn a_link_in_place_of_the_log_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("elsewhere");
    fs::create_dir(&real).unwrap();
    let logs = dir.path().join("logs");
    symlink(&real, &logs).unwrap();
    copy_stream(Cursor::new("x\n"), &logs.join("a-out.log"), false, 0, 0).unwrap();
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0);
}
