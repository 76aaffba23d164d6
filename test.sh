#!/usr/bin/env bash
# Runs oxidepm's whole test suite. Installs what the tests need (from
# Debian's packages) when it is missing, so it works on a fresh machine
# that has only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v systemd-socket-activate >/dev/null 2>&1 || missing+=(systemd)
command -v useradd >/dev/null 2>&1 || missing+=(passwd)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo test --workspace --all-targets
