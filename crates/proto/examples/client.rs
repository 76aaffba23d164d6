//! A client of the oxidepm daemon that needs nothing but a unix socket and
//! the wire types: it asks "who am I?" and lists the apps.
//!
//! ```sh
//! cargo run -p oxidepm-proto --example client            # $OXIDEPM_SOCKET, else ~/.oxidepm/daemon.sock
//! OXIDEPM_SOCKET=~/.oxidepm/agent.sock cargo run -p oxidepm-proto --example client
//! ```
//!
//! The daemon decides who is asking from the connection; `claim` (here from
//! `OXIDEPM_ACTOR`, as the CLI does) can only make a request stricter.

use oxidepm_proto::{Op, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

fn socket() -> PathBuf {
    if let Some(s) = std::env::var_os("OXIDEPM_SOCKET") {
        return s.into();
    }
    let home = std::env::var_os("OXIDEPM_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".oxidepm")))
        .unwrap_or_else(|| PathBuf::from(".oxidepm"));
    home.join("daemon.sock")
}

/// Sends one request and reads lines until its final response.
fn ask(
    conn: &mut BufReader<UnixStream>,
    id: u64,
    op: Op,
) -> Result<Response, Box<dyn std::error::Error>> {
    let req = Request {
        id,
        claim: std::env::var("OXIDEPM_ACTOR").ok(),
        via: None,
        op,
    };
    let mut line = serde_json::to_vec(&req)?;
    line.push(b'\n');
    conn.get_mut().write_all(&line)?;
    loop {
        let mut text = String::new();
        if conn.read_line(&mut text)? == 0 {
            return Err("the daemon closed the connection".into());
        }
        let resp: Response = serde_json::from_str(&text)?;
        if resp.id == id && resp.is_final() {
            return Ok(resp);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = socket();
    let stream = UnixStream::connect(&path).map_err(|e| {
        format!(
            "cannot connect to {}: {e} (is oxidepmd running?)",
            path.display()
        )
    })?;
    let mut conn = BufReader::new(stream);
    for (id, op) in [(1, Op::Whoami), (2, Op::Status)] {
        let resp = ask(&mut conn, id, op)?;
        match (resp.result, resp.error) {
            (Some(result), _) => println!("{}", serde_json::to_string_pretty(&result)?),
            (None, Some(e)) => eprintln!("{}: {}", e.code, e.message),
            (None, None) => eprintln!("an empty answer"),
        }
    }
    Ok(())
}
