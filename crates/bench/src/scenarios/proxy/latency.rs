//! Round trips at one client: what the proxy adds to one request's
//! latency when nothing else queues in front of it.
//!
//! One connection through the lane and one directly to Redis; each makes
//! the same request in a loop, one at a time, and every round trip is
//! timed. The two alternate in blocks, so that whatever else the machine
//! does at a moment falls on both alike.

use crate::report::percentile;
use crate::sandbox::Result;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// Round trips per block; the paths alternate between blocks.
const BLOCK: usize = 1_000;

/// One request as it goes on the wire, and what its reply starts with.
pub struct Probe<'a> {
    /// What the rows call it.
    pub label: &'a str,
    /// The encoded command.
    pub request: Vec<u8>,
    /// The reply's first bytes (a one-line reply: status or integer).
    pub expect: &'a [u8],
}

impl Probe<'_> {
    /// The probe for `args`.
    pub fn new<'a>(label: &'a str, args: &[&str], expect: &'a [u8]) -> Probe<'a> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            request.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        Probe {
            label,
            request,
            expect,
        }
    }
}

/// The round trips of one path, in microseconds.
#[derive(Debug, Default)]
pub struct Trips {
    /// Every round trip, in the order made.
    pub us: Vec<f64>,
}

impl Trips {
    /// The median round trip.
    pub fn p50(&self) -> f64 {
        percentile(&self.us, 50.0)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> f64 {
        percentile(&self.us, 99.0)
    }
}

/// One round trip of `p` on `s`; `buf` is scratch space for the reply.
fn once(s: &mut UnixStream, p: &Probe<'_>, buf: &mut [u8]) -> Result<f64> {
    let t = Instant::now();
    s.write_all(&p.request)
        .map_err(|e| format!("{}: write: {e}", p.label))?;
    let mut got = 0;
    // One-line replies only: the reply is complete at its first CRLF.
    while got < 2 || &buf[got - 2..got] != b"\r\n" {
        if got == buf.len() {
            return Err(format!("{}: reply longer than expected", p.label));
        }
        let n = s
            .read(&mut buf[got..])
            .map_err(|e| format!("{}: read: {e}", p.label))?;
        if n == 0 {
            return Err(format!("{}: the connection was closed", p.label));
        }
        got += n;
    }
    let us = t.elapsed().as_secs_f64() * 1e6;
    if !buf[..got].starts_with(p.expect) {
        return Err(format!(
            "{}: unexpected reply {:?}",
            p.label,
            String::from_utf8_lossy(&buf[..got])
        ));
    }
    Ok(us)
}

/// `n` round trips of `p` on each of `direct` and `proxied`, alternating
/// in blocks (after a short warm-up of each).
pub fn measure(
    direct: &mut UnixStream,
    proxied: &mut UnixStream,
    p: &Probe<'_>,
    n: usize,
) -> Result<(Trips, Trips)> {
    let mut buf = [0u8; 256];
    for _ in 0..BLOCK.min(n) {
        once(direct, p, &mut buf)?;
        once(proxied, p, &mut buf)?;
    }
    let (mut d, mut x) = (Trips::default(), Trips::default());
    d.us.reserve(n);
    x.us.reserve(n);
    let mut block = 0;
    while d.us.len() < n {
        let k = BLOCK.min(n - d.us.len());
        // Which goes first alternates too.
        let order: [bool; 2] = if block % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for through_proxy in order {
            let (s, t) = if through_proxy {
                (&mut *proxied, &mut x)
            } else {
                (&mut *direct, &mut d)
            };
            for _ in 0..k {
                t.us.push(once(s, p, &mut buf)?);
            }
        }
        block += 1;
    }
    Ok((d, x))
}
