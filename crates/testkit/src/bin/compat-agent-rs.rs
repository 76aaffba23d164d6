//! A lane agent written with redis-rs, as its README tells an author to:
//! the compatibility suite's redis-rs agent (tests/compat/ has the others).
//!
//! `Client::open(OXIDEPM_LANE)` with the crate's default features and
//! options (it sends `CLIENT SETINFO` at connect and ignores a refusal), a
//! new connection after a lost one, `XGROUP CREATE … MKSTREAM` at start
//! (BUSYGROUP means the group is there), `XAUTOCLAIM` of what a dead run
//! left pending, a blocking `XREADGROUP`, and answers by
//! `redis::pipe().atomic()` (MULTI/EXEC) or, for a message asking for
//! `[plain]`, by a plain `redis::pipe()`. A message saying "crash" makes
//! it exit once, after reading and before answering (a marker file in the
//! directory given as its argument says it did).

// A test helper process, never the daemon.
#![allow(clippy::disallowed_methods)]

use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamReadOptions};
use redis::streams::{StreamId, StreamReadReply};
use redis::{Commands, Connection, RedisResult};
use std::path::PathBuf;
use std::time::Duration;

const LIB: &str = "redis-rs";
/// redis-rs sets no read timeout by default, so any block works; 2 s keeps
/// the loop responsive.
const BLOCK_MS: usize = 2000;

/// What the agent is told by its environment and argument.
struct Agent {
    group: String,
    inbox: String,
    outbox: String,
    consumer: String,
    crashed: PathBuf,
}

fn main() {
    let agent = match Agent::from_env() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("compat-agent-rs: {e}");
            std::process::exit(2);
        }
    };
    let url = std::env::var("OXIDEPM_LANE").unwrap_or_default();
    let client = match redis::Client::open(url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compat-agent-rs: OXIDEPM_LANE {url:?}: {e}");
            std::process::exit(2);
        }
    };
    loop {
        let run = client.get_connection().and_then(|mut con| {
            agent.start(&mut con)?;
            agent.serve(&mut con)
        });
        match run {
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                // The proxy or Redis restarting: connect again.
                println!("{}: connection lost ({e}); again", agent.consumer);
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                // A refusal from the server is a bug of this agent.
                println!("{}: {e}", agent.consumer);
                std::process::exit(1);
            }
            Ok(()) => {}
        }
    }
}

impl Agent {
    fn from_env() -> Result<Agent, String> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| format!("{k} is not set: run me as an oxidepm agent"))
        };
        let name = var("OXIDEPM_AGENT")?;
        let pick = |list: String, suffix: &str| {
            list.split(',')
                .find(|k| k.ends_with(suffix))
                .map(str::to_string)
                .ok_or(format!(
                    "no {suffix} in {list:?}: is the webhook source configured?"
                ))
        };
        let dir = std::env::args()
            .nth(1)
            .ok_or("give the directory of the crash marker as the argument")?;
        Ok(Agent {
            group: var("OXIDEPM_GROUP")?,
            inbox: pick(var("OXIDEPM_INBOXES")?, ":webhook:inbox")?,
            outbox: pick(var("OXIDEPM_OUTBOXES")?, ":webhook:outbox")?,
            // A new name per run: the last run's consumer is dead, and what
            // it left pending is taken over in `start`.
            consumer: format!("{name}-{}", std::process::id()),
            crashed: PathBuf::from(dir).join(format!("{name}.crashed")),
        })
    }

    fn start(&self, con: &mut Connection) -> RedisResult<()> {
        match con.xgroup_create_mkstream::<_, _, _, ()>(&self.inbox, &self.group, "$") {
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            other => other?,
        }
        // Everything pending, whoever had it: only one run of this agent
        // lives.
        let mut cursor = "0-0".to_string();
        loop {
            let got: StreamAutoClaimReply = con.xautoclaim_options(
                &self.inbox,
                &self.group,
                &self.consumer,
                0,
                &cursor,
                StreamAutoClaimOptions::default(),
            )?;
            for entry in &got.claimed {
                self.handle(con, entry)?;
            }
            cursor = got.next_stream_id;
            if cursor == "0-0" {
                return Ok(());
            }
        }
    }

    fn serve(&self, con: &mut Connection) -> RedisResult<()> {
        println!("{}: reading {}", self.consumer, self.inbox);
        let opts = StreamReadOptions::default()
            .group(&self.group, &self.consumer)
            .count(10)
            .block(BLOCK_MS);
        loop {
            let got: Option<StreamReadReply> = con.xread_options(&[&self.inbox], &[">"], &opts)?;
            for key in got.map(|g| g.keys).unwrap_or_default() {
                for entry in &key.ids {
                    self.handle(con, entry)?;
                }
            }
        }
    }

    fn handle(&self, con: &mut Connection, entry: &StreamId) -> RedisResult<()> {
        let field = |k: &str| entry.get::<String>(k).unwrap_or_default();
        let text = field("text");
        if text.contains("crash") && !self.crashed.exists() {
            let _ = std::fs::write(&self.crashed, "");
            println!("{}: exiting before answering {}", self.consumer, entry.id);
            std::process::exit(3);
        }
        let answer = [
            ("channel", field("channel")),
            ("text", format!("{LIB}: {text}")),
        ];
        let mut pipe = redis::pipe();
        if !text.contains("[plain]") {
            pipe.atomic();
        }
        pipe.xadd(&self.outbox, "*", &answer)
            .ignore()
            .xack(&self.inbox, &self.group, &[&entry.id])
            .ignore();
        pipe.query::<()>(con)
    }
}
