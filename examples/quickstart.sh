#!/usr/bin/env bash
# The README's Quick start, command for command: a Python web server whose
# first log line shows at once, an agent answering a webhook, and the same
# agent refused when it asks to stop the web server. The variables below
# only let the test suite pick a private home and free ports; unset, they
# are the README's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${OXIDEPM_BIN_DIR:-$PWD/target/release}:$PATH"
export OXIDEPM_HOME="${OXIDEPM_HOME:-$HOME/.oxidepm}"
web_port="${QS_WEB_PORT:-8080}"
sink_port="${QS_SINK_PORT:-8799}"
webhook_port="${QS_WEBHOOK_PORT:-8787}"
agent_user="${QS_AGENT_USER:-alice}"

# Polls until "$@" succeeds: each command here waits for what it needs to
# have happened, never for a length of time.
until_ok() {
  local what=$1
  shift
  for _ in $(seq 1 300); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "quickstart: gave up waiting for $what" >&2
  return 1
}

if oxidepm status >/dev/null 2>&1; then
  echo "quickstart: a daemon already runs in $OXIDEPM_HOME; set OXIDEPM_HOME to an empty directory" >&2
  exit 1
fi

echo "== 1. a web server, and its first log line"
mkdir -p "$OXIDEPM_HOME"
cat > "$OXIDEPM_HOME/daemon.toml" <<TOML
[lanes]
sources = ["webhook"]
default_agent = "alice"

[lanes.webhook]
listen = "127.0.0.1:$webhook_port"
deliver = { "*" = "http://127.0.0.1:$sink_port/out" }
TOML
oxidepm start --name web -- python3 -m http.server "$web_port" --bind 127.0.0.1
until_ok "web's first log line" sh -c 'oxidepm logs web --lines 1 | grep -q "Serving HTTP"'
oxidepm logs web --lines 1

echo "== 2. an agent answers a webhook"
oxidepm start --name sink -- python3 examples/agents/sink.py "$sink_port"
user=()
if [ "$(id -u)" = 0 ]; then
  # A root daemon runs each agent under a user of its own (docs/security.md).
  id "$agent_user" >/dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin "$agent_user"
  user=(--user "$agent_user")
fi
oxidepm start --kind agent --name alice "${user[@]}" -- python3 examples/agents/agent.py Alice
until_ok "the webhook" curl -s -o /dev/null "http://127.0.0.1:$webhook_port/"
curl -s -H "Authorization: Bearer $(cat "$OXIDEPM_HOME/secrets/webhook_token")" \
  -H 'Content-Type: application/json' \
  -d '{"channel":"support","sender":"carol","text":"my login fails"}' \
  "http://127.0.0.1:$webhook_port/in/webhook"
echo
until_ok "alice's answer" sh -c 'oxidepm logs sink --lines 1 | grep -q "alice says"'
oxidepm logs sink --lines 1

echo "== 3. alice asks to stop web, which is not hers"
lane="$OXIDEPM_HOME/lanes/alice.sock"
redis-cli -s "$lane" XADD alice:ops:outbox '*' request '{"op":"stop","target":"web"}'
redis-cli -s "$lane" XREAD BLOCK 10000 STREAMS alice:ops:inbox 0
oxidepm status web
oxidepm audit --actor ai:alice --limit 1

oxidepm kill
