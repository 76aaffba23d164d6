//! Minimal blocking HTTP/1.1 for the `bridge` scenario: a keep-alive
//! client, and a keep-alive sink that counts what it is POSTed.

use crate::sandbox::Result;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
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
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.w
            .write_all(req.as_bytes())
            .map_err(|e| format!("http: {e}"))
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

    /// A POST and its answer.
    pub fn post(&mut self, path: &str, token: &str, body: &str) -> Result<(u16, Vec<u8>)> {
        self.send_post(path, token, body)?;
        self.read_answer()
    }
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
