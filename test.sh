#!/usr/bin/env bash
# Runs oxidepm's whole test suite: formatting, lints and docs first, then
# every test. Installs what the tests need when it is missing, so it works on
# a fresh Debian machine with only the Rust toolchain (and cargo-nextest,
# installed from crates.io when it is not there):
# redis-server and redis-cli (lanes), systemd-socket-activate (socket
# activation), useradd (agents as their own users), python3 with aiosmtpd (a
# real SMTP sink) and redis-py, promtool (checks /metrics and the example
# alert rules), node with ioredis and node-redis (the agents
# of the compatibility suite, tests/compat/).
#
# It prints the wall time of each step and the 20 slowest tests at the end.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/need.sh
. scripts/steps.sh

install() {
  need_packages redis-server:redis-server redis-cli:redis-tools tmux:tmux \
    systemd-socket-activate:systemd useradd:passwd curl:curl python3:python3 pip3:python3-pip \
    node:nodejs npm:npm promtool:prometheus
  need_python aiosmtpd redis mcp
  # The majors the compatibility suite was checked with; the suite finds them
  # in target/compat, and with every library installed it must not skip.
  need_npm target/compat ioredis@6 redis@6
  # The MCP tests drive `oxidepm mcp` with the Inspector's CLI too.
  need_npm target/mcp @modelcontextprotocol/inspector@2
  need_rust_components rustfmt clippy
  need_nextest
}
step install install
# With aiosmtpd installed, the email tests must not skip.
export OXIDEPM_REQUIRE_SMTP_SINK=1
# With promtool installed, the metrics checks must not skip.
export OXIDEPM_REQUIRE_PROMTOOL=1
export OXIDEPM_REQUIRE_COMPAT=1
# With the MCP Python SDK and the Inspector installed, the MCP tests must not skip.
export OXIDEPM_REQUIRE_MCP=1

step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
# The crates are programs: their docs are for developers, private items included.
step doc env RUSTDOCFLAGS="-D warnings -A rustdoc::private-intra-doc-links" \
  cargo doc --workspace --no-deps --document-private-items --quiet
# Every test binary, and every binary the tests run, built once (in the
# same target directory as the checks above, whose build scripts and
# proc-macros it reuses): no test runs cargo.
step build cargo build --workspace --all-targets
SLOWEST_REPORTS=(target/nextest/default/junit.xml target/nextest/shared/junit.xml)
rm -f "${SLOWEST_REPORTS[@]}"
step tests cargo nextest run --workspace --all-targets
# The isolation tests again with the lanes on a shared TLS redis-server
# ([lanes] redis_url), as several hosts run them.
step shared-pass env OXIDEPM_TEST_LANES=shared cargo nextest run --workspace --profile shared \
  -E 'package(oxidepm) & binary(it) & (test(/lanes::/) | test(/lanes_security/))'
