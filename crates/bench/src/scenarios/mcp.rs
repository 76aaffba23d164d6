//! `mcp`: `oxidepm mcp` driven by the official MCP Python SDK over stdio
//! (`mcp_client.py` beside this file): `tools/call status` round trips with N
//! apps, timed in the client (target p50 <= 2 ms), and the server's RSS
//! idle and at its peak through a search of a big log (targets 8 and
//! 16 MiB). The search itself runs in the daemon; the server holds only
//! the bounded result.

use super::{with_sandbox, Plan};
use crate::procfs;
use crate::report::{mib, Row};
use crate::sandbox::{Bins, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The client script, written next to the home at run time.
const CLIENT: &str = include_str!("mcp_client.py");

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn ask(&mut self, command: &str) -> Result<Value> {
        writeln!(self.stdin, "{command}").map_err(|e| format!("the MCP client is gone: {e}"))?;
        self.answer()
    }

    fn answer(&mut self) -> Result<Value> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading the MCP client: {e}"))?;
        serde_json::from_str(&line).map_err(|e| format!("the MCP client printed {line:?}: {e}"))
    }

    /// The `oxidepm mcp` process the SDK started.
    fn server_pid(&self) -> Result<u32> {
        procfs::children(self.child.id())
            .into_iter()
            .find(|p| procfs::cmdline(p.pid).get(1).map(String::as_str) == Some("mcp"))
            .map(|p| p.pid)
            .ok_or_else(|| "the SDK's `oxidepm mcp` process was not found".to_string())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    with_sandbox(bins, |sb| {
        let n = plan.apps;
        sb.ping()?;
        sb.start_sleepers(n, Duration::from_secs(30))?;

        // A big log: filler, then one needle at its very end, so that a
        // search reads every kept file.
        let big: u64 = if plan.quick { 64 << 20 } else { 1 << 30 };
        let part = big / 4;
        let script = sb.home().join("big.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nyes 'filler line of a big log, nothing to see here ..........' | head -c {big}\necho needle-at-the-end\nexec sleep 100000\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let spec = json!({"apps": [{ "name": "big", "script": script, "log_max_size": part, "log_files_kept": 5 }]});
        let file = sb.home().join("big.json");
        std::fs::write(&file, spec.to_string()).map_err(|e| e.to_string())?;
        sb.run(&["start", &file.to_string_lossy()])?;
        let t0 = std::time::Instant::now();
        let mut written = false;
        while t0.elapsed() < Duration::from_secs(600) {
            if sb
                .run(&["logs", "big", "-n", "1"])
                .is_ok_and(|t| t.contains("needle-at-the-end"))
            {
                written = true;
                break;
            }
            super::sleep_ms(200);
        }
        if !written {
            return Err(format!(
                "the big app did not write its {} log in 10 minutes",
                mib(big)
            ));
        }

        // Not `mcp.py`: that name would shadow the SDK's package.
        let py = sb.home().join("mcp_client.py");
        std::fs::write(&py, CLIENT).map_err(|e| e.to_string())?;
        let mut child = Command::new("python3")
            .arg(&py)
            .arg(&bins.cli)
            .env("OXIDEPM_HOME", sb.home())
            .env_remove("OXIDEPM_SOCKET")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run python3 (with `pip install mcp`): {e}"))?;
        let mut c = Client {
            stdin: child.stdin.take().ok_or("no stdin")?,
            stdout: BufReader::new(child.stdout.take().ok_or("no stdout")?),
            child,
        };
        let ready = c.answer()?;
        if ready["ready"] != true {
            return Err(format!("the MCP client did not start: {ready}"));
        }
        let server = c.server_pid()?;
        let idle = procfs::status_bytes(server, "VmRSS").unwrap_or(0);

        c.ask("status 20")?;
        let runs = if plan.quick { 200 } else { 1000 };
        let s = c.ask(&format!("status {runs}"))?;
        if s["apps"].as_u64() != Some(n as u64 + 1) {
            return Err(format!("status listed {} apps, not {}", s["apps"], n + 1));
        }
        let (p50, p99) = (
            s["p50"].as_f64().unwrap_or(0.0),
            s["p99"].as_f64().unwrap_or(0.0),
        );
        say!(
            "  tools/call status, {} apps, {runs} calls: p50 {p50:.2} ms, p99 {p99:.2} ms",
            n + 1
        );
        let one = c.ask(&format!("status {runs} big"))?;
        let one_p50 = one["p50"].as_f64().unwrap_or(0.0);
        say!(
            "  tools/call status of one app among {}: p50 {one_p50:.2} ms, p99 {:.2} ms",
            n + 1,
            one["p99"].as_f64().unwrap_or(0.0)
        );
        let after_status = procfs::status_bytes(server, "VmHWM").unwrap_or(0);

        let found = c.ask("search big needle-at-the-end")?;
        let peak = procfs::status_bytes(server, "VmHWM").unwrap_or(0);
        say!(
            "  search of a {} log: {:.0} ms, {} line(s) found; server RSS idle {}, peak after status {}, peak after the search {}",
            mib(big),
            found["ms"].as_f64().unwrap_or(0.0),
            found["lines"],
            mib(idle),
            mib(after_status),
            mib(peak)
        );
        if found["lines"] != 1 {
            return Err(format!("the search should find the needle: {found}"));
        }
        Ok(vec![
            Row::check(
                format!("mcp tools/call status, {} apps (p50)", n + 1),
                format!("{p50:.2} ms"),
                "<= 2 ms",
                p50 <= 2.0,
            ),
            Row::info(
                format!("mcp tools/call status, {} apps (p99)", n + 1),
                format!("{p99:.2} ms"),
            ),
            Row::info(
                format!("mcp tools/call status of 1 app among {} (p50)", n + 1),
                format!("{one_p50:.2} ms"),
            ),
            Row::check(
                "mcp server RSS idle".to_string(),
                mib(idle),
                "<= 8 MiB",
                idle <= 8 << 20,
            ),
            Row::check(
                format!("mcp server peak RSS, search of a {} log", mib(big)),
                mib(peak),
                "<= 16 MiB",
                peak <= 16 << 20,
            ),
        ])
    })
}
