#!/usr/bin/env python3
"""A small agent: reads its webhook inbox and answers through its outbox.

oxidepm starts it as an agent app and tells it everything through its
environment: OXIDEPM_AGENT (its name), OXIDEPM_LANE (its own Redis socket,
redis+unix://...), OXIDEPM_GROUP (its consumer group). It holds no
password: the socket is the identity.
"""
import os
import sys

import redis

agent = os.environ["OXIDEPM_AGENT"]
lane = os.environ["OXIDEPM_LANE"]
group = os.environ["OXIDEPM_GROUP"]
persona = sys.argv[1] if len(sys.argv) > 1 else agent

r = redis.Redis(unix_socket_path=lane.removeprefix("redis+unix://"), decode_responses=True)
inbox = f"{agent}:webhook:inbox"
print(f"{agent}: listening on {inbox}", flush=True)
while True:
    for _stream, entries in r.xreadgroup(group, agent, {inbox: ">"}, count=10, block=5000) or []:
        for entry_id, msg in entries:
            text = msg.get("text", "")
            # The log says that a message came, never what it said: a log is
            # read by more people (and agents) than the conversation was for.
            print(f"{agent}: message {entry_id} ({len(text)} chars) on {msg.get('channel')}", flush=True)
            # The spec's shared outbox name works too; the lane maps it to
            # this agent's own outbox, so nobody can answer as someone else.
            r.xadd("webhook:outbox", {"channel": msg.get("channel", ""), "text": f"{persona}: you said {text!r}"})
            r.xack(inbox, group, entry_id)
