#!/usr/bin/env bash
# Runs the demo apps in a private oxidepm home and shows what oxidepm sees.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/target/release"
export OXIDEPM_HOME="${OXIDEPM_HOME:-$(mktemp -d /tmp/oxidepm-demo.XXXXXX)}"
trap '"$bin/oxidepm" kill >/dev/null 2>&1 || true' EXIT

echo "== home: $OXIDEPM_HOME"
"$bin/oxidepm" start examples/apps.toml
echo "== waiting for the dependency chain (migrate -> web healthy -> worker)"
for _ in $(seq 1 100); do
  if "$bin/oxidepm" status --json | grep -q '"name":"worker","pid":[0-9]'; then break; fi
  sleep 0.1
done
"$bin/oxidepm" status
echo "== who am I?"
"$bin/oxidepm" whoami
OXIDEPM_ACTOR=ai:assistant "$bin/oxidepm" whoami
echo "== an AI may restart an app, but not define one"
OXIDEPM_ACTOR=ai:assistant "$bin/oxidepm" restart worker
OXIDEPM_ACTOR=ai:assistant "$bin/oxidepm" start --name sneaky -- sleep 1 || true
echo "== events of worker"
"$bin/oxidepm" events worker
echo "== audit"
"$bin/oxidepm" audit
echo "== logs of migrate"
"$bin/oxidepm" logs migrate --lines 5
echo "== done; stopping everything"
