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
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The email tests send through a real SMTP sink (Python's aiosmtpd).
if ! python3 -c 'import aiosmtpd' >/dev/null 2>&1; then
  echo "test.sh: installing aiosmtpd for python3" >&2
  python3 -m pip install --quiet aiosmtpd 2>/dev/null || python3 -m pip install --quiet --break-system-packages aiosmtpd
fi
if ! python3 -c 'import redis' >/dev/null 2>&1; then
  python3 -m pip install --quiet redis 2>/dev/null || python3 -m pip install --quiet --break-system-packages redis
fi
export OXIDEPM_REQUIRE_SMTP_SINK=1

cargo test --workspace --all-targets
