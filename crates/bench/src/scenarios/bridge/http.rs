//! Minimal HTTP/1.1 for the `bridge` scenario: a blocking keep-alive
//! client, a driver of many keep-alive connections from one thread (as a
//! load generator such as wrk does it), and a keep-alive sink that counts
//! what it is POSTed.

use crate::sandbox::Result;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Reads one message's head and body from `r`: `(first line, body)`.
fn read_message(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut first = String::new();
    if r.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        if h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some((first, body)))
}

/// One keep-alive connection.
pub struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    addr: SocketAddr,
}

impl Client {
    /// Connects (no Nagle delay).
    pub fn connect(addr: SocketAddr) -> Result<Client> {
        let w = TcpStream::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = w.set_nodelay(true);
        w.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let r = BufReader::new(w.try_clone().map_err(|e| e.to_string())?);
        Ok(Client { r, w, addr })
    }

    /// Writes a POST without reading the answer.
    pub fn send_post(&mut self, path: &str, token: &str, body: &str) -> Result<()> {
        // One write: separate small ones would meet Nagle on the far side.
        let req = post_request(self.addr, path, token, body);
        self.w.write_all(&req).map_err(|e| format!("http: {e}"))
    }

    /// Reads one answer: `(status, body)`.
    pub fn read_answer(&mut self) -> Result<(u16, Vec<u8>)> {
        let (first, body) = read_message(&mut self.r)
            .map_err(|e| format!("http: {e}"))?
            .ok_or("http: the connection closed")?;
        let status = first
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("http: bad status line {first:?}"))?;
        Ok((status, body))
    }
}

/// A POST request, whole.
pub fn post_request(addr: SocketAddr, path: &str, token: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The length of the first complete answer in `buf` and its status, if
/// there is one.
fn complete_answer(buf: &[u8]) -> Result<Option<(usize, u16)>> {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "http: answer head not UTF-8")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("http: bad answer {head:?}"))?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let total = head_end + 4 + len;
    Ok((buf.len() >= total).then_some((total, status)))
}

/// Sends `requests[i]` over connection `i`, one at a time (keep-alive, the
/// next as soon as the previous is answered), every connection driven from
/// this one thread; every answer must have status `expect`.
pub fn drive(addr: SocketAddr, requests: Vec<Vec<Vec<u8>>>, expect: u16) -> Result<()> {
    struct Conn {
        s: TcpStream,
        reqs: std::vec::IntoIter<Vec<u8>>,
        buf: Vec<u8>,
        busy: bool,
    }
    let mut conns = Vec::new();
    for reqs in requests {
        let s = TcpStream::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = s.set_nodelay(true);
        let mut c = Conn {
            s,
            reqs: reqs.into_iter(),
            buf: Vec::with_capacity(4096),
            busy: false,
        };
        if let Some(r) = c.reqs.next() {
            c.s.write_all(&r).map_err(|e| format!("http: {e}"))?;
            c.busy = true;
        }
        conns.push(c);
    }
    let mut chunk = vec![0u8; 64 << 10];
    while conns.iter().any(|c| c.busy) {
        let fds: Vec<Option<BorrowedFd<'_>>> =
            conns.iter().map(|c| c.busy.then(|| c.s.as_fd())).collect();
        let ready = match oxidepm_sys::poll::readable_any(&fds, Duration::from_secs(30)) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("http: poll: {e}")),
        };
        if !ready.contains(&true) {
            return Err("http: no answer for 30 s".into());
        }
        for (c, ready) in conns.iter_mut().zip(ready) {
            if !ready {
                continue;
            }
            // Readable: this read does not block.
            let got = c.s.read(&mut chunk).map_err(|e| format!("http: {e}"))?;
            if got == 0 {
                return Err("http: the connection closed".into());
            }
            c.buf.extend_from_slice(&chunk[..got]);
            if let Some((len, status)) = complete_answer(&c.buf)? {
                if status != expect {
                    return Err(format!(
                        "the server answered {status}: {}",
                        String::from_utf8_lossy(&c.buf[..len])
                    ));
                }
                c.buf.drain(..len);
                match c.reqs.next() {
                    Some(r) => c.s.write_all(&r).map_err(|e| format!("http: {e}"))?,
                    None => c.busy = false,
                }
            }
        }
    }
    Ok(())
}

/// A local HTTP sink answering 200 to every request, counting them.
pub struct Sink {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered.
    pub count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sink {
    /// Starts it on a loopback port.
    pub fn start() -> Result<Sink> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("sink: cannot listen: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (count.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let c = c.clone();
                std::thread::spawn(move || serve(conn, c));
            }
        });
        Ok(Sink { addr, count, stop })
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, count: Arc<AtomicU64>) {
    let _ = conn.set_nodelay(true);
    let Ok(clone) = conn.try_clone() else { return };
    let mut r = BufReader::new(clone);
    let mut w = conn;
    while let Ok(Some(_)) = read_message(&mut r) {
        count.fetch_add(1, Ordering::SeqCst);
        if w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}
