#!/usr/bin/env bash
# Builds oxidepm and runs its main example: two AI agents, each on its own
# lane, answering messages that arrive through the webhook. Installs what it
# needs when missing: redis-server, redis-tools, python3, curl (Debian's
# packages) and the redis module for python3 (PyPI).
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import redis' >/dev/null 2>&1; then
  echo "run.sh: installing the redis module for python3 (used by the example agents)" >&2
  python3 -m pip install --quiet redis 2>/dev/null || python3 -m pip install --quiet --break-system-packages redis
fi

cargo build --release
exec examples/lanes-demo.sh
