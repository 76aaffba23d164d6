//! The benchmark binary doubles as the apps it measures:
//! `oxidepm-bench __write-lines N` and `oxidepm-bench __probe SOCKET`.

use crate::sandbox::mono_ns;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;

/// Bytes of each line written by `__write-lines`, newline included.
pub const LINE_LEN: usize = 100;

/// Line `i` of `__write-lines` (without its newline): a 10-digit number, a
/// space, and 88 letters that depend on the number.
pub fn line(i: u64, buf: &mut [u8; LINE_LEN - 1]) {
    let mut n = i;
    for k in (0..10).rev() {
        buf[k] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    buf[10] = b' ';
    for (k, b) in buf[11..].iter_mut().enumerate() {
        *b = b'a' + ((i + k as u64) % 26) as u8;
    }
}

/// Writes lines 0..n to stdout through a 64 KiB buffer, then reports its own
/// CPU time on stderr (so that the log shim's share can be told apart).
pub fn write_lines(args: &[String]) -> ExitCode {
    let Some(n) = args.first().and_then(|a| a.parse::<u64>().ok()) else {
        eprintln!("usage: oxidepm-bench __write-lines N");
        return ExitCode::FAILURE;
    };
    // Write to fd 1 directly: std's stdout is line-buffered.
    let out = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(e) => {
            eprintln!("__write-lines: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut w = BufWriter::with_capacity(64 * 1024, out);
    let mut buf = [0u8; LINE_LEN - 1];
    for i in 0..n {
        line(i, &mut buf);
        if let Err(e) = w.write_all(&buf).and_then(|()| w.write_all(b"\n")) {
            eprintln!("__write-lines: line {i}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = w.flush() {
        eprintln!("__write-lines: {e}");
        return ExitCode::FAILURE;
    }
    let (user_us, sys_us) = own_cpu_us();
    eprintln!("writer-rusage user_us={user_us} sys_us={sys_us}");
    ExitCode::SUCCESS
}

/// This process's CPU time, microseconds (user, system).
fn own_cpu_us() -> (u64, u64) {
    let t = oxidepm_sys::rusage::own();
    (t.user.as_micros() as u64, t.system.as_micros() as u64)
}

/// Parses the `writer-rusage` line; total CPU seconds.
pub fn parse_rusage(text: &str) -> Option<f64> {
    let l = text.lines().rev().find(|l| l.contains("writer-rusage "))?;
    let field = |k: &str| -> Option<u64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    Some((field("user_us")? + field("sys_us")?) as f64 / 1e6)
}

/// Records the monotonic time of its own start, sends `<pid> <ns>` to the
/// benchmark's socket, then sleeps until killed.
pub fn probe(args: &[String]) -> ExitCode {
    let started = mono_ns();
    let Some(sock) = args.first() else {
        eprintln!("usage: oxidepm-bench __probe SOCKET");
        return ExitCode::FAILURE;
    };
    let msg = format!("{} {started}\n", std::process::id());
    match std::os::unix::net::UnixStream::connect(sock) {
        Ok(mut s) => {
            let _ = s.write_all(msg.as_bytes());
        }
        Err(e) => eprintln!("__probe: cannot reach {sock}: {e}"),
    }
    loop {
        oxidepm_sys::signal::pause();
    }
}
