#!/usr/bin/env bash
# Runs oxidepm's whole test suite: formatting, lints and docs first, then
# every test. Installs what the tests need when it is missing, so it works on
# a fresh Debian machine with only the Rust toolchain:
# redis-server and redis-cli (lanes), systemd-socket-activate (socket
# activation), useradd (agents as their own users), python3 with aiosmtpd (a
# real SMTP sink) and redis-py, promtool (checks /metrics and the example
# alert rules), node with ioredis and node-redis (the agents
# of the compatibility suite, tests/compat/).
set -euo pipefail
cd "$(dirname "$0")"
. scripts/need.sh

need_packages redis-server:redis-server redis-cli:redis-tools tmux:tmux \
  systemd-socket-activate:systemd useradd:passwd curl:curl python3:python3 pip3:python3-pip \
  node:nodejs npm:npm promtool:prometheus
need_python aiosmtpd redis
# With aiosmtpd installed, the email tests must not skip.
export OXIDEPM_REQUIRE_SMTP_SINK=1
# With promtool installed, the metrics checks must not skip.
export OXIDEPM_REQUIRE_PROMTOOL=1
# The majors the compatibility suite was checked with; the suite finds them
# in target/compat, and with every library installed it must not skip.
need_npm target/compat ioredis@6 redis@6
export OXIDEPM_REQUIRE_COMPAT=1

need_rust_components rustfmt clippy

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The crates are programs: their docs are for developers, private items included.
RUSTDOCFLAGS="-D warnings -A rustdoc::private-intra-doc-links" \
  cargo doc --workspace --no-deps --document-private-items --quiet
cargo test --workspace --all-targets
# The isolation tests again with the lanes on a shared TLS redis-server
# ([lanes] redis_url), as several hosts run them.
OXIDEPM_TEST_LANES=shared cargo test --workspace --test it -- lanes:: lanes_security
