//! HTTP on loopback: a one-shot client, a sink that records what it is
//! sent, and free ports.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A blocking HTTP/1.1 request with a JSON body, on one connection closed
/// after it: `(status, body)`.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// What a [`Sink`] answers.
#[derive(Clone, Copy, Debug)]
pub enum SinkMode {
    /// 200 to everything.
    Ok,
    /// This status to everything.
    Always(u16),
    /// 503 to the first n requests, then 200.
    FailFirst(usize),
}

/// A local HTTP sink (keep-alive) recording every JSON body it accepts.
pub struct Sink {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The bodies answered with a 2xx, in arrival order (`Null` for a body
    /// that is not JSON).
    pub got: Arc<Mutex<Vec<Value>>>,
    /// Requests received, whatever the answer.
    pub requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Sink {
    /// Starts a sink; `delay` is how long each answer takes.
    pub fn start(mode: SinkMode, delay: Duration) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, r, st) = (got.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (g, r) = (g.clone(), r.clone());
                std::thread::spawn(move || serve_sink(conn, mode, delay, g, r));
            }
        });
        Sink {
            addr,
            got,
            requests,
            stop,
        }
    }

    /// Its URL (any path is accepted).
    pub fn url(&self) -> String {
        format!("http://{}/out", self.addr)
    }

    /// The bodies accepted so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve_sink(
    conn: TcpStream,
    mode: SinkMode,
    delay: Duration,
    got: Arc<Mutex<Vec<Value>>>,
    requests: Arc<AtomicUsize>,
) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut len = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
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
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let n = requests.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(delay);
        let status = match mode {
            SinkMode::Ok => 200,
            SinkMode::Always(s) => s,
            SinkMode::FailFirst(k) if n < k => 503,
            SinkMode::FailFirst(_) => 200,
        };
        if status < 300 {
            got.lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        }
        let answer = if status < 300 { "" } else { "sink says no" };
        // One write: several small ones would meet Nagle and delayed ACKs.
        let out = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if conn.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}
