//! A local stand-in for the parts of Discord the bridge's `discord` source
//! uses, so that its tests and the benchmark run the production code path
//! with only the addresses changed:
//!
//! * the **Gateway** ([`gateway`]), a websocket on `ws://127.0.0.1:<port>`:
//!   HELLO; IDENTIFY → READY (a wrong token: close code 4004) (with a `resume_gateway_url` back to itself);
//!   heartbeats and their ACK; MESSAGE_CREATE dispatched on demand with an
//!   increasing `s`; RESUME → the missed dispatches again, then RESUMED; and
//!   on demand a RECONNECT (op 7), a dropped connection, an
//!   INVALID_SESSION (op 9), a close with a given code (and IDENTIFY
//!   refused with one) or a frame of any size;
//! * **REST** ([`rest`]) on `http://127.0.0.1:<port>`: `POST
//!   /api/v10/channels/{id}/messages` recorded (the bot token checked,
//!   `403` for a channel the bot may not post to, `429` with `retry_after`
//!   and the rate-limit headers on demand (a route's, or a global one), `enforce_nonce` honoured), and
//!   each post dispatched back on the gateway as Discord does, so the bot
//!   sees its own messages; `GET /api/v10/gateway/bot`.
//!
//! The API is blocking (the stand-in runs on a runtime thread of its own),
//! for tests and the benchmark alike.

// A test and benchmark helper, never the daemon: its blocking waits run
// on threads of their own.
#![allow(clippy::disallowed_methods)]

mod gateway;
mod payload;
mod rest;

pub use payload::{Msg, BOT_ID, BOT_NAME, GUILD};

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// One message the bot posted.
#[derive(Debug, Clone)]
pub struct Post {
    /// The channel.
    pub channel: u64,
    /// The message id given to it.
    pub id: u64,
    /// Its text.
    pub content: String,
    /// Its nonce, if it had one.
    pub nonce: Option<String>,
    /// The message it answers, if any.
    pub reply_to: Option<String>,
    /// When it was taken.
    pub at: Instant,
}

/// What the gateway connection is told to do.
#[derive(Debug)]
enum Cmd {
    /// Send this text frame.
    Send(String),
    /// Send a RECONNECT (op 7).
    Reconnect,
    /// Drop the TCP connection without a close frame.
    Drop,
    /// Send INVALID_SESSION (op 9, not resumable).
    Invalidate,
    /// Close the connection with this close code.
    Close(u16),
    /// Send one text frame of this many bytes (not JSON).
    Huge(usize),
}

/// A gateway session: its dispatches, for a RESUME.
#[derive(Debug, Default)]
struct Session {
    seq: u64,
    log: Vec<(u64, String)>,
}

/// Everything both servers share.
#[derive(Debug)]
struct State {
    token: String,
    gateway_url: String,
    sessions: HashMap<String, Session>,
    /// The connection with a live session: its id and where its commands go.
    current: Option<(String, u64, mpsc::UnboundedSender<Cmd>)>,
    next_conn: u64,
    next_id: u64,
    posts: Vec<Post>,
    channels: HashSet<u64>,
    throttle: u32,
    reset_after: f64,
    /// Whether the `429`s answered are global ones.
    global_limit: bool,
    /// Posts to let through, then posts to answer 500.
    fail_after: (u32, u32),
    rate_limited: Vec<Instant>,
    nonces: HashMap<(u64, String), u64>,
    identifies: u32,
    /// IDENTIFYs received, refused ones included.
    identify_attempts: u32,
    /// The close code every IDENTIFY is answered with, if any.
    refuse_identify: Option<u16>,
    resumes: u32,
    /// Frames of [`StandIn::send_frame_of`] sent whole, or whose
    /// connection ended while they were sent.
    huge_frames_done: u32,
    resume_overlap: u64,
    echo_posts: bool,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running stand-in; stopped when dropped.
pub struct StandIn {
    state: Shared,
    gateway_addr: SocketAddr,
    api_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    /// Starts both servers on loopback; `token` is the bot token they take.
    pub fn start(token: &str) -> std::io::Result<StandIn> {
        let gw = std::net::TcpListener::bind("127.0.0.1:0")?;
        let api = std::net::TcpListener::bind("127.0.0.1:0")?;
        gw.set_nonblocking(true)?;
        api.set_nonblocking(true)?;
        let gateway_addr = gw.local_addr()?;
        let api_addr = api.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            token: token.to_string(),
            gateway_url: format!("ws://{gateway_addr}"),
            sessions: HashMap::new(),
            current: None,
            next_conn: 0,
            next_id: 1_300_000_000_000_000_000,
            posts: Vec::new(),
            channels: HashSet::new(),
            throttle: 0,
            reset_after: 0.2,
            global_limit: false,
            fail_after: (0, 0),
            rate_limited: Vec::new(),
            nonces: HashMap::new(),
            identifies: 0,
            identify_attempts: 0,
            refuse_identify: None,
            resumes: 0,
            huge_frames_done: 0,
            resume_overlap: 0,
            echo_posts: true,
        }));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = state.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                let (Ok(gw), Ok(api)) = (
                    tokio::net::TcpListener::from_std(gw),
                    tokio::net::TcpListener::from_std(api),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = gateway::serve(gw, s.clone()) => {}
                    _ = rest::serve(api, s) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Ok(StandIn {
            state,
            gateway_addr,
            api_addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The gateway's URL, for `gateway_url`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}", self.gateway_addr)
    }

    /// The REST base, for `api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.api_addr)
    }

    /// Lets the bot post in `channel` (any other is answered 403).
    pub fn allow_channel(&self, channel: u64) {
        lock(&self.state).channels.insert(channel);
    }

    /// Whether a session is connected and identified or resumed.
    pub fn connected(&self) -> bool {
        lock(&self.state).current.is_some()
    }

    /// Waits until a session is connected; false after `within`.
    pub fn wait_connected(&self, within: Duration) -> bool {
        wait(within, || self.connected())
    }

    /// Dispatches MESSAGE_CREATE for `m` (queued for a RESUME when no
    /// session is connected); returns its message id.
    pub fn send_message(&self, m: &Msg) -> u64 {
        let mut st = lock(&self.state);
        let id = m.id.unwrap_or_else(|| {
            st.next_id += 1;
            st.next_id
        });
        let d = payload::message(id, m);
        gateway::dispatch(&mut st, "MESSAGE_CREATE", d);
        id
    }

    /// Sends a RECONNECT (op 7): the client is to resume on a new connection.
    pub fn force_reconnect(&self) {
        self.command(Cmd::Reconnect);
    }

    /// Drops the gateway connection without a word.
    pub fn drop_connection(&self) {
        self.command(Cmd::Drop);
    }

    /// Ends the session (INVALID_SESSION, not resumable): the client has to
    /// identify again.
    pub fn invalidate_session(&self) {
        self.command(Cmd::Invalidate);
    }

    fn command(&self, c: Cmd) {
        let mut st = lock(&self.state);
        if let Some((_, _, tx)) = st.current.take() {
            let _ = tx.send(c);
        }
    }

    /// Closes the session's connection with close `code` (Discord's fatal
    /// ones, 4004 and 4010–4014, end the session for good; others are to
    /// be resumed).
    pub fn close_connection(&self, code: u16) {
        self.command(Cmd::Close(code));
    }

    /// Sends the session's connection one text frame of `bytes` bytes, as
    /// a hostile gateway could.
    pub fn send_frame_of(&self, bytes: usize) {
        self.command(Cmd::Huge(bytes));
    }

    /// How many frames of [`StandIn::send_frame_of`] are done with: sent
    /// whole, or cut short by the connection ending.
    pub fn huge_frames_done(&self) -> u32 {
        lock(&self.state).huge_frames_done
    }

    /// Answers every IDENTIFY with close `code` (`None`: as usual), as
    /// Discord does for a revoked token (4004) or a privileged intent the
    /// bot may not have (4014).
    pub fn refuse_identify(&self, code: Option<u16>) {
        lock(&self.state).refuse_identify = code;
    }

    /// How many websocket connections the gateway accepted.
    pub fn connections(&self) -> u64 {
        lock(&self.state).next_conn
    }

    /// How many IDENTIFYs the gateway received, refused ones included.
    pub fn identify_attempts(&self) -> u32 {
        lock(&self.state).identify_attempts
    }

    /// A RESUME replays this many dispatches the client had already seen
    /// too (as a real gateway may), besides those it missed.
    pub fn set_resume_overlap(&self, n: u64) {
        lock(&self.state).resume_overlap = n;
    }

    /// Whether the bot's own posts come back on the gateway (default yes).
    pub fn set_echo_posts(&self, on: bool) {
        lock(&self.state).echo_posts = on;
    }

    /// The next `n` posts are answered `429` with a reset after `secs`.
    pub fn rate_limit_next(&self, n: u32, secs: f64) {
        let mut st = lock(&self.state);
        st.throttle = n;
        st.reset_after = secs;
        st.global_limit = false;
    }

    /// The next `n` posts are answered with Discord's global `429`
    /// (`X-RateLimit-Global: true`, `"global": true`, no bucket headers),
    /// asking to wait `secs`.
    pub fn rate_limit_global_next(&self, n: u32, secs: f64) {
        let mut st = lock(&self.state);
        st.throttle = n;
        st.reset_after = secs;
        st.global_limit = true;
    }

    /// After `skip` more posts are taken, the next `n` are answered 500
    /// (Discord having trouble), and nothing is posted for them.
    pub fn fail_after(&self, skip: u32, n: u32) {
        lock(&self.state).fail_after = (skip, n);
    }

    /// When each `429` was answered.
    pub fn rate_limited(&self) -> Vec<Instant> {
        lock(&self.state).rate_limited.clone()
    }

    /// Every message posted, in order.
    pub fn posts(&self) -> Vec<Post> {
        lock(&self.state).posts.clone()
    }

    /// How many messages were posted.
    pub fn post_count(&self) -> usize {
        lock(&self.state).posts.len()
    }

    /// Waits until `n` messages were posted, polling finely (for latency
    /// figures); false after `within`.
    pub fn wait_posts(&self, n: usize, within: Duration) -> bool {
        let end = Instant::now() + within;
        while self.post_count() < n {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// How many IDENTIFYs and RESUMEs the gateway took.
    pub fn sessions_started(&self) -> (u32, u32) {
        let st = lock(&self.state);
        (st.identifies, st.resumes)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` every 10 ms until it holds; false after `within`.
pub fn wait(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
