#!/usr/bin/env python3
"""A small agent: reads its webhook inbox and answers through its outbox.

oxidepm starts it as an agent app and tells it everything through its
environment: OXIDEPM_AGENT (its name), OXIDEPM_LANE (its own Redis socket,
unix:///..., the URL redis.from_url takes), OXIDEPM_GROUP (its consumer
group). It holds no password: the socket is the identity.
"""
import os
import sys
import time

import redis

agent = os.environ["OXIDEPM_AGENT"]
group = os.environ["OXIDEPM_GROUP"]
persona = sys.argv[1] if len(sys.argv) > 1 else agent

r = redis.from_url(os.environ["OXIDEPM_LANE"], decode_responses=True)
inbox = f"{agent}:webhook:inbox"
# redis-py waits at most 5 s (its default socket_timeout) for any answer,
# and a blocking read answers only when it times out: a read blocking as
# long as that races it and fails with TimeoutError. Blocking 2 s keeps the
# default timeout, which still catches a lane that stops answering.
BLOCK_MS = 2000
print(f"{agent}: listening on {inbox}", flush=True)
while True:
    try:
        got = r.xreadgroup(group, agent, {inbox: ">"}, count=10, block=BLOCK_MS)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        # The lane's proxy or Redis restarting: the next command reconnects.
        print(f"{agent}: lane unavailable ({e}); trying again", flush=True)
        time.sleep(1)
        continue
    for _stream, entries in got or []:
        for entry_id, msg in entries:
            text = msg.get("text", "")
            # The log says that a message came, never what it said: a log is
            # read by more people (and agents) than the conversation was for.
            print(f"{agent}: message {entry_id} ({len(text)} chars) on {msg.get('channel')}", flush=True)
            # The spec's shared outbox name works too; the lane maps it to
            # this agent's own outbox, so nobody can answer as someone else.
            r.xadd("webhook:outbox", {"channel": msg.get("channel", ""), "text": f"{persona}: you said {text!r}"})
            r.xack(inbox, group, entry_id)
