#!/usr/bin/env bash
# Two agents, each on its own lane and under a user of its own, answering
# messages that arrive through the webhook; the answers reach a local HTTP
# sink. Then bob tries alice's lane and is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$PWD/target/release"
export OXIDEPM_HOME="${OXIDEPM_HOME:-$(mktemp -d /tmp/oxidepm-lanes.XXXXXX)}"
trap '"$bin/oxidepm" kill >/dev/null 2>&1 || true' EXIT
mkdir -p "$OXIDEPM_HOME"
cp examples/agents/daemon.toml "$OXIDEPM_HOME/daemon.toml"
py="$(command -v python3)"
agent_py="$py"

# The recommended setup: a root daemon, each agent under a user of its own
# (made here with useradd, as the tests make theirs). Run by anyone else,
# both agents run as that user and share its uid, which `oxidepm lanes`
# warns about.
alice=()
bob=()
if [ "$(id -u)" = 0 ]; then
  for u in oxidepm-alice oxidepm-bob; do
    id "$u" >/dev/null 2>&1 ||
      useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
  done
  alice=(--user oxidepm-alice)
  bob=(--user oxidepm-bob)
  # An agent's user runs the python3 of systemd's PATH for User=, not one
  # under root's home; it needs redis-py too.
  user_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  if ! runuser -u oxidepm-alice -- env PATH="$user_path" python3 -c 'import redis' 2>/dev/null; then
    echo "installing python3-redis (Debian package) for the agents' users" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-redis >/dev/null
  fi
  agent_py=python3
fi

echo "== home: $OXIDEPM_HOME"
"$bin/oxidepm" start --name sink -- "$py" examples/agents/sink.py 8799
"$bin/oxidepm" start --kind agent --name alice "${alice[@]}" -- "$agent_py" examples/agents/agent.py "Alice (support)"
"$bin/oxidepm" start --kind agent --name bob "${bob[@]}" -- "$agent_py" examples/agents/agent.py "Bob (sales)"
"$bin/oxidepm" route list
token="$(cat "$OXIDEPM_HOME/secrets/webhook_token")"
for _ in $(seq 1 50); do
  curl -s -o /dev/null "http://127.0.0.1:8787/" && break || sleep 0.1
done
echo "== two messages in, through the webhook"
curl -s -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"channel":"support","sender":"carol","text":"my login fails"}' http://127.0.0.1:8787/in/webhook; echo
curl -s -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"channel":"sales","sender":"dan","text":"how much is it?"}' http://127.0.0.1:8787/in/webhook; echo
echo "== the answers, as the sink received them"
for _ in $(seq 1 100); do
  [ "$("$bin/oxidepm" logs sink --lines 10 --out | grep -c 'says')" -ge 2 ] && break
  sleep 0.1
done
"$bin/oxidepm" logs sink --lines 10 --out
"$bin/oxidepm" lanes

echo "== bob tries to read alice's inbox"
lanes="$OXIDEPM_HOME/lanes"
if [ "$(id -u)" = 0 ]; then
  echo "\$ redis-cli -s $lanes/alice.sock XRANGE alice:webhook:inbox - +   # as oxidepm-bob"
  runuser -u oxidepm-bob -- redis-cli -s "$lanes/alice.sock" XRANGE alice:webhook:inbox - + 2>&1 || true
fi
echo "\$ redis-cli -s $lanes/bob.sock XRANGE alice:webhook:inbox - +     # through his own lane"
redis-cli -s "$lanes/bob.sock" XRANGE alice:webhook:inbox - + 2>&1 || true
