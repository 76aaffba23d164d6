//! `oxidepm mcp` from the shell with the MCP Inspector's CLI (a second
//! real client, in node): `tools/list` and a `tools/call`. test.sh
//! installs it into `target/mcp`; without it the test is skipped with the
//! reason printed, unless `OXIDEPM_REQUIRE_MCP=1`.

use crate::harness::{bin, Env};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// The Inspector's command, when it is installed.
fn inspector() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/mcp/node_modules/.bin/mcp-inspector");
    if p.is_file() {
        return Some(p);
    }
    let why = "the MCP Inspector is missing: run test.sh, or npm install --prefix target/mcp @modelcontextprotocol/inspector@2";
    if std::env::var("OXIDEPM_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("{why} (OXIDEPM_REQUIRE_MCP=1)");
    }
    eprintln!("skipped: {why}");
    None
}

/// Runs the Inspector's CLI against `oxidepm mcp` in `env`'s home.
fn inspect(env: &Env, cli: &PathBuf, args: &[&str]) -> Value {
    let home = format!("OXIDEPM_HOME={}", env.home.display());
    let out = Command::new(cli)
        .args(["--cli", "-e", &home])
        .arg(bin("oxidepm"))
        .arg("mcp")
        .args(args)
        .env_remove("OXIDEPM_SOCKET")
        .output()
        .expect("the Inspector runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn the_inspector_lists_the_tools_and_calls_one_from_the_shell() {
    let Some(cli) = inspector() else { return };
    let env = Env::new();
    env.ok(&["start", "--name", "web", "--", "sleep", "100000"]);
    let tools = inspect(&env, &cli, &["--method", "tools/list"]);
    let tools = tools["tools"].as_array().unwrap();
    assert!(tools.len() >= 13, "{tools:?}");
    assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"));
    let got = inspect(
        &env,
        &cli,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "status",
            "--tool-arg",
            "app=web",
        ],
    );
    assert_eq!(got["isError"], false, "{got}");
    assert_eq!(got["structuredContent"]["apps"][0]["name"], "web", "{got}");
    assert_eq!(got["structuredContent"]["apps"][0]["pid"], env.pid("web"));
}
