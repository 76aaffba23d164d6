#!/usr/bin/env bash
# Builds oxidepm and runs its main example: two AI agents, each on its own
# lane, answering messages that arrive through the webhook. Installs what it
# needs when missing: redis-server, redis-tools, python3, curl (Debian's
# packages) and the redis module for python3 (PyPI).
set -euo pipefail
cd "$(dirname "$0")"
. scripts/need.sh

need_packages redis-server:redis-server redis-cli:redis-tools curl:curl python3:python3 pip3:python3-pip
need_python redis

cargo build --release
scripts/static-logwriter.sh
exec examples/lanes-demo.sh
