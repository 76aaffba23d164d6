//! `oxidepm mcp` fed 1,000 malformed JSON-RPC messages on its stdin (bad
//! JSON, wrong types, huge ids, 5 MiB strings): each line that is not a
//! message is answered with the protocol's error, and the server goes on
//! answering. Malformed bytes need no SDK: they are written as they are.

use crate::harness::{bin, Env};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The i-th malformed line, and whether it must be answered (a line that
/// is not JSON, or too long, always is; a JSON value of the wrong shape
/// is answered when it could be a request).
fn malformed(i: u64) -> (Vec<u8>, bool) {
    // A small LCG: the same 1,000 lines every run.
    let r = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33;
    match r % 8 {
        0 => (b"{".to_vec(), true),
        1 => (format!("garbage {r} \u{0}\u{7f}").into_bytes(), true),
        2 => (br#"{"jsonrpc":"2.0","id":{},"method":5}"#.to_vec(), true),
        3 => (
            format!(
                r#"{{"jsonrpc":"2.0","id":{r}{}0,"method":"ping"}}"#,
                "9".repeat(40)
            )
            .into_bytes(),
            true,
        ),
        4 => (br#"[1,2,3]"#.to_vec(), true),
        5 => (
            format!(r#"{{"jsonrpc":"1.0","id":"x{r}","method":null}}"#).into_bytes(),
            true,
        ),
        6 if i % 100 == 6 => {
            let s = "A".repeat(5 << 20);
            (format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"{s}"}}}}"#).into_bytes(), true)
        }
        _ => (vec![0xff, 0xfe, b'{', b'"'], true),
    }
}

#[test]
fn a_thousand_malformed_messages_are_answered_and_the_server_goes_on() {
    let env = Env::new();
    env.ok(&["ping"]);
    let mut child = Command::new(bin("oxidepm"))
        .arg("mcp")
        .env("OXIDEPM_HOME", &env.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.stdout.take().unwrap();
    let (tx, answers) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v = serde_json::from_str(&line).expect("every answer is JSON");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut send = |line: &[u8]| {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let next = || {
        answers
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer")
    };
    send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}})
        .to_string().as_bytes());
    assert_eq!(next()["id"], 1);
    send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    let mut must = 0;
    for i in 0..1000 {
        let (line, answered) = malformed(i);
        send(&line);
        must += usize::from(answered);
    }
    send(br#"{"jsonrpc":"2.0","id":"after","method":"tools/list"}"#);
    // Error answers are written as they are made, so the last answer may
    // come before some of them.
    let (mut errors, mut tools) = (0, None);
    while errors < must || tools.is_none() {
        let v = next();
        if v["id"] == "after" {
            tools = Some(v);
            continue;
        }
        let code = v["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("an error answer: {v}"));
        assert!([-32700, -32600, -32602, -32601].contains(&code), "{v}");
        errors += 1;
    }
    let tools = tools.unwrap();
    assert_eq!(errors, must, "one error answer per malformed line");
    assert!(
        tools["result"]["tools"].as_array().unwrap().len() >= 10,
        "{tools}"
    );
    // The 5 MiB lines were dropped as they came, never held.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 32 << 10, "peak RSS {rss_kib} KiB");
    drop(stdin);
    assert!(child.wait().unwrap().success(), "ends when its input does");
}
