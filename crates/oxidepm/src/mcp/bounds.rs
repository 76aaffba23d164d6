//! What one MCP client may make this server hold: messages, results and
//! calls in flight are bounded here, in one place, so that a model that
//! asks for too much gets a clear answer instead of a server that grows.

use serde_json::Value;

/// The longest JSON-RPC message read or written, in bytes.
pub const MAX_MESSAGE: usize = 4 << 20;
/// A tool result's default bound, in bytes (`--max-result-bytes`).
pub const DEFAULT_RESULT: usize = 256 << 10;
/// Tool calls run at once by default (`--max-calls`); the rest wait.
pub const DEFAULT_CALLS: usize = 8;
/// Answers written but not yet read by the client, in bytes, past which
/// the server reads no more requests: a client that stops reading stops
/// being served instead of making the server hold its answers.
pub const MAX_UNREAD: usize = 1 << 20;
/// Requests received and not yet answered (running or waiting for a
/// turn); a request past this is answered at once that the server is busy.
pub const MAX_IN_FLIGHT: usize = 64;
/// The most log lines one `logs` call asks the daemon for.
pub const MAX_LINES: usize = 2000;
/// Log lines a `logs` call returns when it does not say.
pub const DEFAULT_LINES: usize = 50;

/// The bounds this server runs with.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// A tool result's bound, in bytes.
    pub result_bytes: usize,
    /// Tool calls run at once.
    pub calls: usize,
}

/// The size of `v` as JSON, in bytes.
pub fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())
}

/// Drops the oldest of `lines` until they and `rest` fit in `limit` bytes
/// of JSON; returns whether any was dropped. The newest lines are what a
/// model asked for when it asks for a tail, so they are the ones kept.
pub fn keep_newest(lines: &mut Vec<Value>, rest: usize, limit: usize) -> bool {
    let mut total = rest;
    let mut keep = 0;
    for line in lines.iter().rev() {
        let n = json_len(line) + 1;
        if total + n > limit {
            break;
        }
        total += n;
        keep += 1;
    }
    let dropped = lines.len() - keep;
    lines.drain(..dropped);
    dropped > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_newest_lines_are_kept_within_the_bound() {
        let mut lines: Vec<Value> = (0..100)
            .map(|i| json!({ "line": format!("{i:04}") }))
            .collect();
        let one = json_len(&lines[0]) + 1;
        assert!(keep_newest(&mut lines, 10, 10 + one * 3));
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["line"], "0099");
        let mut few = vec![json!(1)];
        assert!(!keep_newest(&mut few, 0, 100));
        assert_eq!(few.len(), 1);
    }
}
