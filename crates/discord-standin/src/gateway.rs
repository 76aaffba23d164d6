//! The stand-in's gateway: one websocket connection at a time holds the
//! session; commands from the test reach it through a channel.

use crate::{lock, payload, Cmd, Session, Shared, State};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_websockets::{CloseCode, Message, ServerBuilder};

/// What the connection sends in answer to an op.
enum Out {
    /// A text frame.
    Text(String),
    /// A close frame with this code, then the end of the connection.
    Close(u16, &'static str),
}

/// Kept dispatches per session, for a RESUME.
const LOG: usize = 100_000;

/// Accepts connections until the listener fails.
pub async fn serve(listener: TcpListener, state: Shared) {
    while let Ok((tcp, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            if let Ok((_req, ws)) = ServerBuilder::new().accept(tcp).await {
                connection(ws, state).await;
            }
        });
    }
}

/// Adds a dispatch to the current session and sends it when connected.
pub fn dispatch(st: &mut State, t: &str, d: Value) {
    let Some(session_id) = st.current.as_ref().map(|c| c.0.clone()).or_else(|| {
        // No live connection: the last session gets it, for its RESUME.
        st.sessions.keys().max().cloned()
    }) else {
        return;
    };
    let Some(s) = st.sessions.get_mut(&session_id) else {
        return;
    };
    s.seq += 1;
    let text = json!({ "op": 0, "t": t, "s": s.seq, "d": d }).to_string();
    s.log.push((s.seq, text.clone()));
    if s.log.len() > LOG {
        s.log.remove(0);
    }
    if let Some((_, _, tx)) = &st.current {
        let _ = tx.send(Cmd::Send(text));
    }
}

fn token_ok(st: &State, given: Option<&str>) -> bool {
    let Some(g) = given else { return false };
    g.strip_prefix("Bot ").unwrap_or(g) == st.token
}

async fn connection(
    mut ws: tokio_websockets::WebSocketStream<tokio::net::TcpStream>,
    state: Shared,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Cmd>();
    let conn = {
        let mut st = lock(&state);
        st.next_conn += 1;
        st.next_conn
    };
    let hello = json!({ "op": 10, "d": { "heartbeat_interval": 10_000 } }).to_string();
    if ws.send(Message::text(hello)).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            frame = ws.next() => {
                let Some(Ok(frame)) = frame else { break };
                let Some(text) = frame.as_text() else {
                    if frame.is_close() { break }
                    continue;
                };
                let Ok(v) = serde_json::from_str::<Value>(text) else { continue };
                let mut end = false;
                for out in handle(&state, conn, &tx, &v) {
                    let frame = match out {
                        Out::Text(t) => Message::text(t),
                        Out::Close(code, why) => {
                            end = true;
                            Message::close(CloseCode::try_from(code).ok(), why)
                        }
                    };
                    if ws.send(frame).await.is_err() {
                        end = true;
                    }
                }
                if end {
                    break;
                }
            }
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                let text = match cmd {
                    Cmd::Close(code) => {
                        let frame = Message::close(CloseCode::try_from(code).ok(), "closed by the stand-in");
                        let _ = ws.send(frame).await;
                        break;
                    }
                    Cmd::Huge(n) => {
                        let sent = ws.send(Message::text("x".repeat(n))).await;
                        lock(&state).huge_frames_done += 1;
                        if sent.is_err() {
                            break;
                        }
                        continue;
                    }
                    Cmd::Send(t) => t,
                    Cmd::Reconnect => json!({ "op": 7, "d": null }).to_string(),
                    Cmd::Invalidate => {
                        let mut st = lock(&state);
                        let ended: Vec<String> = st.sessions.keys().cloned().collect();
                        for s in ended { st.sessions.remove(&s); }
                        json!({ "op": 9, "d": false }).to_string()
                    }
                    Cmd::Drop => break,
                };
                if ws.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
        }
    }
    let mut st = lock(&state);
    if st.current.as_ref().is_some_and(|c| c.1 == conn) {
        st.current = None;
    }
}

/// Answers one op of the client; returns the frames to send.
fn handle(state: &Shared, conn: u64, tx: &mpsc::UnboundedSender<Cmd>, v: &Value) -> Vec<Out> {
    let mut st = lock(state);
    match v["op"].as_u64() {
        Some(1) => vec![Out::Text(json!({ "op": 11 }).to_string())],
        Some(2) => {
            st.identify_attempts += 1;
            if let Some(code) = st.refuse_identify {
                return vec![Out::Close(code, "refused by the stand-in")];
            }
            if !token_ok(&st, v["d"]["token"].as_str()) {
                return vec![Out::Close(4004, "Authentication failed.")];
            }
            st.identifies += 1;
            let id = format!("session-{:04}", st.identifies);
            let s = Session {
                seq: 1,
                ..Session::default()
            };
            let ready = json!({ "op": 0, "t": "READY", "s": 1,
                "d": payload::ready(&id, &st.gateway_url) })
            .to_string();
            st.sessions.insert(id.clone(), s);
            st.current = Some((id, conn, tx.clone()));
            vec![Out::Text(ready)]
        }
        Some(6) => {
            let d = &v["d"];
            let sid = d["session_id"].as_str().unwrap_or_default().to_string();
            let seq = d["seq"].as_u64().unwrap_or(0);
            if !token_ok(&st, d["token"].as_str()) || !st.sessions.contains_key(&sid) {
                return vec![Out::Text(json!({ "op": 9, "d": false }).to_string())];
            }
            st.resumes += 1;
            let from = seq.saturating_sub(st.resume_overlap);
            let Some(s) = st.sessions.get_mut(&sid) else {
                return vec![];
            };
            let mut out: Vec<Out> = s
                .log
                .iter()
                .filter(|(n, _)| *n > from)
                .map(|(_, t)| Out::Text(t.clone()))
                .collect();
            s.seq += 1;
            let resumed = json!({ "op": 0, "t": "RESUMED", "s": s.seq, "d": {} }).to_string();
            out.push(Out::Text(resumed));
            st.current = Some((sid, conn, tx.clone()));
            out
        }
        _ => vec![],
    }
}
