//! `logs`: an app writes N numbered lines of 100 B; how long until the last
//! one is in its log (with the default rotation, so rotated files are read
//! too), whether every line is there once and in order, and the CPU the
//! daemon and the log shim spent. The baseline is the same writer with its
//! stdout on a plain file.

use super::{sleep_ms, with_sandbox, Plan};
use crate::procfs::{self, Stat};
use crate::report::{median, Row};
use crate::roles::{line, parse_rusage, LINE_LEN};
use crate::sandbox::{Bins, Result, Sandbox};
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Time without growth of the log after which the capture is declared over.
const STALL: Duration = Duration::from_secs(3);

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let n = plan.log_lines;
        let dpid = sb.ping()?;
        let mb = (n * LINE_LEN as u64) as f64 / 1e6;
        say!(
            "  {n} lines of {LINE_LEN} B = {mb:.0} MB per run, {} round(s), default rotation (50 MiB, 5 kept)",
            plan.log_rounds
        );
        let mut r = Rounds::default();
        for round in 1..=plan.log_rounds {
            r.run(sb, dpid, n, round)?;
        }
        let mut rows = r.rows(n, plan.log_rounds);
        rows.extend(super::logs_read::rows(sb, dpid, n)?);
        Ok(rows)
    })
}

/// What the rounds measured, one entry a round.
#[derive(Default)]
struct Rounds {
    /// Seconds of the writer on a plain file.
    plain: Vec<f64>,
    /// Seconds of the writer under oxidepm.
    piped: Vec<f64>,
    /// The daemon's CPU seconds in each run under oxidepm.
    daemon_cpu: Vec<f64>,
    /// The log shim's CPU seconds, when the writer's own is known.
    shim_cpu: Vec<f64>,
    /// Lines lost in all rounds.
    lost: u64,
    /// Lines duplicated, out of order or malformed in all rounds.
    bad: u64,
}

impl Rounds {
    /// One round: the writer on a plain file, then under oxidepm.
    fn run(&mut self, sb: &Sandbox, dpid: u32, n: u64, round: usize) -> Result<()> {
        let tck = procfs::ticks_per_second();
        let mb = (n * LINE_LEN as u64) as f64 / 1e6;
        let p = plain_run(sb, n, round)?;
        self.plain.push(p);
        say!(
            "  round {round}: plain file  {:>8.1} ms  {:>6.0} MB/s",
            p * 1e3,
            mb / p
        );
        let before = daemon_stat(dpid)?;
        let cap = capture_run(sb, dpid, n, round)?;
        let after = daemon_stat(dpid)?;
        let own = (after.utime + after.stime - before.utime - before.stime) as f64 / tck;
        let kids = (after.cutime + after.cstime - before.cutime - before.cstime) as f64 / tck;
        let shim = cap.writer_cpu.map(|w| (kids - w).max(0.0));
        let v = &cap.verdict;
        say!(
            "  round {round}: oxidepm     {:>8.1} ms  {:>6.0} MB/s  ({:.2}x plain)  kept {}/{n}, lost {}, dup/out of order {}, malformed {}, {} file(s)",
            cap.wall * 1e3,
            mb / cap.wall,
            cap.wall / p,
            v.kept,
            v.lost,
            v.disordered,
            v.malformed,
            v.files
        );
        say!(
            "           daemon CPU {}; reaped children CPU {} = writer {} + log shim {}",
            cpu(own, tck),
            cpu(kids, tck),
            cap.writer_cpu
                .map(|w| format!("{w:.2} s"))
                .unwrap_or_else(|| "?".into()),
            shim.map(|s| format!("{s:.2} s"))
                .unwrap_or_else(|| "? (writer's own CPU unknown)".into())
        );
        for note in &cap.notes {
            say!("           note: {note}");
        }
        self.piped.push(cap.wall);
        self.daemon_cpu.push(own);
        if let Some(s) = shim {
            self.shim_cpu.push(s);
        }
        self.lost += v.lost;
        self.bad += v.disordered + v.malformed;
        Ok(())
    }

    /// The medians said, and judged: every line kept, at most 1.2x a plain
    /// file's time, the daemon's CPU at most 0.2 s.
    fn rows(&self, n: u64, log_rounds: usize) -> Vec<Row> {
        let tck = procfs::ticks_per_second();
        let (plain, piped, shim_cpu) = (&self.plain, &self.piped, &self.shim_cpu);
        let (lost_total, bad_total) = (self.lost, self.bad);
        let (p, o) = (median(plain), median(piped));
        let ratio = o / p;
        let dcpu = median(&self.daemon_cpu);
        self.say_medians(n, log_rounds);
        say!("  target: all lines kept; <= 1.2x a plain file write; daemon CPU <= 0.2 s");
        let lines = if n.is_multiple_of(1_000_000) {
            format!("{}M lines", n / 1_000_000)
        } else {
            format!("{}k lines", n / 1000)
        };
        let mut rows = vec![
            Row::check(
                format!("logs {lines}: lines lost"),
                format!(
                    "{lost_total}{}",
                    if bad_total > 0 {
                        format!(" (+{bad_total} dup/bad)")
                    } else {
                        String::new()
                    }
                ),
                "0",
                lost_total == 0 && bad_total == 0,
            ),
            Row::check(
                format!("logs {lines}: time vs plain file"),
                format!("{ratio:.2}x ({:.0} vs {:.0} ms)", o * 1e3, p * 1e3),
                "<= 1.2x",
                ratio <= 1.2,
            ),
            Row::check(
                format!("logs {lines}: daemon CPU"),
                cpu(dcpu, tck),
                "<= 0.2 s",
                dcpu <= 0.2,
            ),
        ];
        if piped.len() > 1 {
            let ratios: Vec<f64> = piped.iter().zip(plain).map(|(o, p)| o / p).collect();
            rows.push(Row::info(
                format!("logs {lines}: ratio, best..worst round"),
                format!(
                    "{:.2}x..{:.2}x",
                    crate::report::min(&ratios),
                    crate::report::max(&ratios)
                ),
            ));
        }
        if !shim_cpu.is_empty() {
            rows.push(Row::info(
                format!("logs {lines}: log shim CPU"),
                format!("{:.2} s", median(shim_cpu)),
            ));
        }
        rows
    }

    /// The medians of the rounds, said.
    fn say_medians(&self, n: u64, log_rounds: usize) {
        let tck = procfs::ticks_per_second();
        let mb = (n * LINE_LEN as u64) as f64 / 1e6;
        let (plain, piped, shim_cpu) = (&self.plain, &self.piped, &self.shim_cpu);
        let (p, o) = (median(plain), median(piped));
        let ratio = o / p;
        let dcpu = median(&self.daemon_cpu);
        let rounds = if log_rounds > 1 {
            format!("median of {log_rounds}: ")
        } else {
            String::new()
        };
        say!(
            "  {rounds}plain {:.1} ms, oxidepm {:.1} ms ({:.0} MB/s), ratio {ratio:.2}x (rounds: {}); daemon CPU {}{}",
            p * 1e3,
            o * 1e3,
            mb / o,
            piped
                .iter()
                .zip(plain)
                .map(|(o, p)| format!("{:.2}x", o / p))
                .collect::<Vec<_>>()
                .join(" "),
            cpu(dcpu, tck),
            if shim_cpu.is_empty() {
                String::new()
            } else {
                format!(", log shim CPU {:.2} s", median(shim_cpu))
            }
        );
    }
}

/// CPU seconds measured in clock ticks; zero ticks is shown as below one tick.
fn cpu(secs: f64, tck: f64) -> String {
    if secs < 0.5 / tck {
        format!("< {:.2} s", 1.0 / tck)
    } else {
        format!("{secs:.2} s")
    }
}

fn daemon_stat(pid: u32) -> Result<Stat> {
    procfs::stat(pid).ok_or_else(|| format!("the daemon (pid {pid}) is gone"))
}

/// The writer with stdout on a plain file; seconds from spawn to exit.
fn plain_run(sb: &Sandbox, n: u64, round: usize) -> Result<f64> {
    let path = sb.home().join(format!("plain-{round}.txt"));
    let file = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t0 = Instant::now();
    let st = Command::new(&sb.bins.me)
        .args(["__write-lines", &n.to_string()])
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run the writer: {e}"))?;
    let wall = t0.elapsed().as_secs_f64();
    if !st.success() {
        return Err(format!("the writer failed on a plain file: {st}"));
    }
    let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = fs::remove_file(&path);
    if len != n * LINE_LEN as u64 {
        return Err(format!(
            "the plain file has {len} bytes, expected {}",
            n * LINE_LEN as u64
        ));
    }
    Ok(wall)
}

struct Capture {
    /// Seconds from `oxidepm start` to the last line in the log.
    wall: f64,
    /// The writer's own CPU seconds (it reports them on stderr).
    writer_cpu: Option<f64>,
    verdict: Verdict,
    notes: Vec<String>,
}

/// One app run under oxidepm; returns once its processes are reaped.
fn capture_run(sb: &Sandbox, dpid: u32, n: u64, round: usize) -> Result<Capture> {
    let name = format!("lines{round}");
    let out = sb.logs_dir().join(format!("{name}-out.log"));
    let err = sb.logs_dir().join(format!("{name}-err.log"));
    let me = sb.bins.me.to_string_lossy().into_owned();
    let mut notes = Vec::new();
    let t0 = Instant::now();
    sb.run(&[
        "start",
        "--name",
        &name,
        "--restart",
        "never",
        "--",
        &me,
        "__write-lines",
        &n.to_string(),
    ])?;
    let mut procs = Procs {
        daemon: dpid,
        out_arg: out.to_string_lossy().into_owned(),
        writer: None,
        shim: None,
    };
    // Both are spawned before `start` answers; look for them briefly.
    let found_by = Instant::now() + Duration::from_millis(100);
    loop {
        procs.find();
        if (procs.writer.is_some() && procs.shim.is_some()) || Instant::now() > found_by {
            break;
        }
        sleep_ms(1);
    }
    // Sleep until the writer exits rather than polling beside it.
    if let Some(w) = &procs.writer {
        wait_exit(w, Duration::from_secs(120));
    }
    let wall = last_line_in(&out, n, t0, &mut procs, &mut notes);
    procs.wait_reaped(&mut notes);
    let writer_cpu = fs::read_to_string(&err).ok().and_then(|t| parse_rusage(&t));
    let verdict = verify(&out, n)?;
    for f in log_files(&out) {
        let _ = fs::remove_file(f);
    }
    let _ = fs::remove_file(&err);
    Ok(Capture {
        wall: wall.as_secs_f64(),
        writer_cpu,
        verdict,
        notes,
    })
}

/// The writer and its log shim, children of the daemon, once seen.
struct Procs {
    daemon: u32,
    /// The path of the log the shim writes, as its command line has it.
    out_arg: String,
    writer: Option<Stat>,
    shim: Option<Stat>,
}

impl Procs {
    /// Looks for whichever of the two is not seen yet.
    fn find(&mut self) {
        for p in procfs::children(self.daemon) {
            let args = procfs::cmdline(p.pid);
            if self.writer.is_none() && args.iter().any(|a| a == "__write-lines") {
                self.writer = Some(p);
            } else if self.shim.is_none()
                && args.iter().any(|a| a == "__logshim")
                && args.contains(&self.out_arg)
            {
                self.shim = Some(p);
            }
        }
    }

    /// Waits for the writer and the shim to be reaped, so that their CPU
    /// time is in the daemon's cutime/cstime.
    fn wait_reaped(&self, notes: &mut Vec<String>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for (what, p) in [("writer", &self.writer), ("log shim", &self.shim)] {
            match p {
                None => notes.push(format!("did not see the {what} process")),
                Some(p) => {
                    while procfs::stat(p.pid).is_some_and(|s| s.start_ticks == p.start_ticks)
                        && Instant::now() < deadline
                    {
                        sleep_ms(2);
                    }
                    if let Some(s) = procfs::stat(p.pid).filter(|s| s.start_ticks == p.start_ticks)
                    {
                        notes.push(format!(
                            "the {what} (pid {}) was not reaped 10 s after the capture (state {})",
                            p.pid, s.state as char
                        ));
                    }
                }
            }
        }
    }
}

/// From `t0` until the `n`th line is in the log `out` (or, said in
/// `notes`, until the log stopped growing for [`STALL`]).
fn last_line_in(
    out: &Path,
    n: u64,
    t0: Instant,
    procs: &mut Procs,
    notes: &mut Vec<String>,
) -> Duration {
    let mut prefix: Option<u64> = None;
    let mut last_size = 0u64;
    let mut last_change = Instant::now();
    loop {
        if procs.writer.is_none() || procs.shim.is_none() {
            procs.find();
        }
        let files = log_files(out);
        let size: u64 = files
            .iter()
            .filter_map(|f| fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        if size != last_size {
            last_size = size;
            last_change = Instant::now();
        }
        if prefix.is_none() {
            prefix = first_prefix(out);
        }
        if let Some(pre) = prefix {
            if size >= n * (LINE_LEN as u64 + pre) && ends_with_last(out, n) {
                return t0.elapsed();
            }
        }
        if last_change.elapsed() > STALL {
            notes.push(format!(
                "the log stopped growing before the last line arrived; waited {} s",
                STALL.as_secs()
            ));
            return last_change.duration_since(t0);
        }
        sleep_ms(1);
    }
}

/// Blocks until process `p` exits (through a pidfd), at most `timeout`.
/// Returns at once when the process is already gone or pidfds are unavailable.
fn wait_exit(p: &Stat, timeout: Duration) {
    let Ok(fd) = oxidepm_sys::pidfd::open(p.pid) else {
        return;
    };
    if !matches!(procfs::stat(p.pid), Some(s) if s.start_ticks == p.start_ticks) {
        return;
    }
    let _ = oxidepm_sys::poll::readable(&fd, timeout);
}

/// `<out>.K` … `<out>.1`, `<out>`: the log's files that exist, oldest first.
fn log_files(out: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (1..=100)
        .map(|i| PathBuf::from(format!("{}.{i}", out.display())))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    if out.exists() {
        files.push(out.to_path_buf());
    }
    files
}

/// Length of the timestamp prefix of the log's first line (through its space).
fn first_prefix(out: &Path) -> Option<u64> {
    let mut buf = [0u8; 512];
    let n = File::open(out).ok()?.read(&mut buf).ok()?;
    let nl = buf[..n].iter().position(|&b| b == b'\n')?;
    ((nl + 1) as u64)
        .checked_sub(LINE_LEN as u64)
        .filter(|&p| p < 256)
}

/// Whether the log file ends with the writer's last line.
fn ends_with_last(out: &Path, n: u64) -> bool {
    let want = {
        let mut l = [0u8; LINE_LEN - 1];
        line(n - 1, &mut l);
        l
    };
    let Ok(mut f) = File::open(out) else {
        return false;
    };
    let mut tail = [0u8; LINE_LEN];
    f.seek(SeekFrom::End(-(LINE_LEN as i64)))
        .and_then(|_| f.read_exact(&mut tail))
        .is_ok()
        && tail[..LINE_LEN - 1] == want
        && tail[LINE_LEN - 1] == b'\n'
}

#[derive(Debug, Default)]
struct Verdict {
    kept: u64,
    lost: u64,
    disordered: u64,
    malformed: u64,
    files: usize,
}

/// Reads every file of the log, oldest first, and checks that lines
/// 0..n appear once each and in order, each byte as written.
fn verify(out: &Path, n: u64) -> Result<Verdict> {
    let files = log_files(out);
    let mut v = Verdict {
        files: files.len(),
        ..Verdict::default()
    };
    let mut next = 0u64;
    let mut want = [0u8; LINE_LEN - 1];
    let mut buf = Vec::with_capacity(256);
    for f in &files {
        let file = File::open(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, file);
        loop {
            buf.clear();
            let got = r
                .read_until(b'\n', &mut buf)
                .map_err(|e| format!("{}: {e}", f.display()))?;
            if got == 0 {
                break;
            }
            let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
            // `<timestamp> <line>`: the line is the last LINE_LEN - 1 bytes.
            let Some(content) = body
                .len()
                .checked_sub(LINE_LEN - 1)
                .filter(|&at| at > 0 && body[at - 1] == b' ')
                .map(|at| &body[at..])
            else {
                v.malformed += 1;
                continue;
            };
            let Some(i) = std::str::from_utf8(&content[..10])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                v.malformed += 1;
                continue;
            };
            line(i, &mut want);
            if content != want || i >= n {
                v.malformed += 1;
                continue;
            }
            if i == next {
                v.kept += 1;
                next += 1;
            } else if i > next {
                v.lost += i - next;
                v.kept += 1;
                next = i + 1;
            } else {
                v.disordered += 1;
            }
        }
    }
    v.lost += n - next;
    Ok(v)
}
