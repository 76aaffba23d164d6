//! The webhook's slots are not taken without the token: connections that
//! send nothing, or their headers byte by byte, or blank lines, neither
//! keep their slot past the deadlines nor keep genuine senders out.

use super::harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads one HTTP response from `r`: `(status, headers lowercased, body)`,
/// or `None` when the connection ends first.
fn response(r: &mut BufReader<TcpStream>) -> Option<(u16, String, Value)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((
        status,
        head,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

/// A keep-alive POST of `msg` to `/in/webhook` with `token`.
fn request(token: &str, msg: &Value) -> String {
    let body = msg.to_string();
    format!(
        "POST /in/webhook HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Connects with a long read timeout (a read that times out is a failure
/// of the test, not a result).
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Whether the server closed `s` (EOF, or a reset), reading whatever it
/// answered first; panics when it is still open after the read timeout.
fn closed_by_server(mut s: &TcpStream) -> bool {
    let mut sink = Vec::new();
    match s.read_to_end(&mut sink) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) => panic!("the webhook kept the connection open: {e}"),
    }
}

/// POSTs `msg` with the token on a new connection until it is accepted,
/// for at most `WAIT` in all; the attacker may take a try's slot.
fn post_until_accepted(addr: SocketAddr, msg: &Value) -> Value {
    let started = Instant::now();
    loop {
        let s = connect(addr);
        let mut w = s.try_clone().unwrap();
        if w.write_all(request(TOKEN, msg).as_bytes()).is_ok() {
            if let Some((st, _, body)) = response(&mut BufReader::new(s)) {
                assert_eq!(st, 202, "{body}");
                return body;
            }
        }
        assert!(started.elapsed() < WAIT, "no genuine POST got through");
    }
}

/// Holds `n` idle connections and `n` that send their headers (or blank
/// lines) a few bytes at a time, opening new ones as the webhook closes
/// them, until stopped.
struct Attack {
    stop: Arc<AtomicBool>,
    /// Rounds in which the attacker had all its connections open.
    rounds: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attack {
    fn start(addr: SocketAddr, n: usize) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let rounds = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r = rounds.clone();
        let thread = std::thread::spawn(move || {
            let mut idle: Vec<TcpStream> = Vec::new();
            let mut slow: Vec<TcpStream> = Vec::new();
            let mut tick = 0u64;
            while !s.load(Ordering::Relaxed) {
                // A connection the webhook closed reads EOF at once.
                idle.retain(|c| !gone(c));
                while idle.len() < n {
                    match TcpStream::connect(addr) {
                        Ok(c) => idle.push(c),
                        Err(_) => break,
                    }
                }
                while slow.len() < n {
                    match TcpStream::connect(addr) {
                        Ok(mut c) => {
                            let _ = c.write_all(b"POST /in/webhook HTTP/1.1\r\n");
                            slow.push(c)
                        }
                        Err(_) => break,
                    }
                }
                if idle.len() == n && slow.len() == n {
                    r.fetch_add(1, Ordering::Relaxed);
                }
                tick += 1;
                let piece: &[u8] = if tick.is_multiple_of(2) {
                    b"X-A: b\r\n"
                } else {
                    b"\r\n"
                };
                slow.retain_mut(|c| c.write_all(piece).is_ok() && !gone(c));
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Attack {
            stop,
            rounds,
            thread: Some(thread),
        }
    }

    /// Waits until the attack is in force: every connection opened, and
    /// the slow ones sent a piece, a few times over.
    fn wait_in_force(&self) {
        eventually(WAIT, "the attack in force", || {
            self.rounds.load(Ordering::Relaxed) >= 3
        });
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the other end closed `c`, seen without blocking.
fn gone(c: &TcpStream) -> bool {
    let _ = c.set_nonblocking(true);
    let mut b = [0u8; 256];
    let r = match (&*c).read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = c.set_nonblocking(false);
    r
}

/// Attacks a webhook with these caps with `n` idle and `n` slow
/// connections from this host, and sends 5 genuine messages meanwhile.
fn genuine_senders_get_through(max_connections: usize, per_ip: usize, n: usize) {
    let redis = Redis::start(&["alice"]);
    // Deadlines far longer than the test: what lets the genuine senders
    // in is that a connection without the token gives way.
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice", "webhook": {"limits": {
            "first_byte_ms": 600000, "headers_ms": 600000,
            "max_connections": max_connections, "max_connections_per_ip": per_ip}}}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let addr = tb.addr();
    let attack = Attack::start(addr, n);
    attack.wait_in_force();
    for i in 0..5 {
        let msg = json!({"channel": "c", "sender": "s", "text": format!("m{i}")});
        let r = post_until_accepted(addr, &msg);
        assert_eq!(r["routed_to"], "alice");
    }
    drop(attack);
    let mut con = redis.admin();
    assert_eq!(entries(&mut con, "alice:webhook:inbox").len(), 5);
}

#[test]
fn idle_and_slow_connections_filling_every_slot_do_not_keep_senders_out() {
    // Every slot of the listener taken (the attacker's address could hold
    // more).
    genuine_senders_get_through(32, 64, 32);
}

#[test]
fn idle_and_slow_connections_filling_an_address_do_not_keep_its_senders_out() {
    // Every slot of the address taken; loopback is one address for every
    // local user, so this is the attack of another local user.
    genuine_senders_get_through(256, 8, 16);
}

#[test]
fn a_connection_that_sends_nothing_or_dawdles_is_closed_at_its_deadline() {
    let redis = Redis::start(&["alice"]);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice", "webhook": {"limits": {
            "first_byte_ms": 500, "headers_ms": 1000, "body_ms": 1000}}}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let addr = tb.addr();

    // Nothing at all.
    let idle = connect(addr);
    // Headers a line at a time, and blank lines, never finished.
    let headers = connect(addr);
    let blanks = connect(addr);
    // The whole head, then a body that never comes.
    let mut body = connect(addr);
    body.write_all(
        b"POST /in/webhook HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer webhook-test-token\r\n\
          Content-Length: 100\r\n\r\n{",
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mut h, mut b) = (headers.try_clone().unwrap(), blanks.try_clone().unwrap());
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = h.write_all(b"POST /in/webhook HTTP/1.1\r\n");
            while !stop.load(Ordering::Relaxed) {
                let _ = h.write_all(b"X-A: b\r\n");
                let _ = b.write_all(b"\r\n");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    for s in [&idle, &headers, &blanks] {
        assert!(closed_by_server(s));
    }
    let mut r = BufReader::new(body.try_clone().unwrap());
    let (st, _, _) = response(&mut r).expect("an answer to the late body");
    assert_eq!(st, 408);
    assert!(closed_by_server(&body));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    // Nothing was written by any of them.
    let mut con = redis.admin();
    assert!(entries(&mut con, "alice:webhook:inbox").is_empty());
}

#[test]
fn a_wrong_token_is_answered_then_the_connection_closed_and_a_right_one_kept() {
    let redis = Redis::start(&["alice"]);
    redis.write_config(
        &redis.config_path(),
        json!({"agents": ["alice"], "default_agent": "alice"}),
    );
    let tb = TestBridge::start(&redis.config_path());
    let addr = tb.addr();
    let msg = json!({"channel": "c", "sender": "s", "text": "t"});

    let mut bad = connect(addr);
    bad.write_all(request("nope", &msg).as_bytes()).unwrap();
    let mut r = BufReader::new(bad.try_clone().unwrap());
    let (st, head, _) = response(&mut r).unwrap();
    assert_eq!(st, 401);
    assert!(head.contains("connection: close"), "{head}");
    assert!(response(&mut r).is_none(), "closed after the 401");

    // With the token, the connection is kept for the next request.
    let mut good = connect(addr);
    let mut r = BufReader::new(good.try_clone().unwrap());
    for _ in 0..2 {
        good.write_all(request(TOKEN, &msg).as_bytes()).unwrap();
        assert_eq!(response(&mut r).unwrap().0, 202);
    }
    let mut con = redis.admin();
    assert_eq!(entries(&mut con, "alice:webhook:inbox").len(), 2);
}
