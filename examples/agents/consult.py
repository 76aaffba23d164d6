#!/usr/bin/env python3
"""An agent that consults another, and answers those that consult it.

    consult.py                      answer every question that arrives
    consult.py bob "what is 2+2?"   ask bob once, then answer as above

Questions and answers travel through the agent's own lane: a question is
XADD <me>:consult:outbox * to <agent> text ..., and arrives in the other
agent's consult inbox with from = <me> (set by oxidepm's bridge, never by
the sender), kind = question and request_id; an answer is XADD ... to
<asker> re <request_id> text ..., and arrives with kind = answer and re.
Only what a [[lanes.consult]] rule of daemon.toml allows is delivered; the
rest lands in <sender>:consult:outbox:dead with the reason, and the sender
is told in its inbox: kind = refused, re = its outbox entry's id, error.
"""
import os
import sys
import time

import redis

agent = os.environ["OXIDEPM_AGENT"]
group = os.environ["OXIDEPM_GROUP"]
r = redis.from_url(os.environ["OXIDEPM_LANE"], decode_responses=True)
inbox = f"{agent}:consult:inbox"
# Shorter than redis-py's default 5 s socket timeout (see agent.py).
BLOCK_MS = 2000

if len(sys.argv) > 2:
    asked = r.xadd("consult:outbox", {"to": sys.argv[1], "text": sys.argv[2]})
    print(f"{agent}: asked {sys.argv[1]} ({asked})", flush=True)

while True:
    try:
        got = r.xreadgroup(group, agent, {inbox: ">"}, count=10, block=BLOCK_MS)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        print(f"{agent}: lane unavailable ({e}); trying again", flush=True)
        time.sleep(1)
        continue
    for _stream, entries in got or []:
        for entry_id, msg in entries:
            sender = msg.get("from", "")
            if msg.get("kind") == "question":
                answer = f"{agent} heard {len(msg.get('text', ''))} chars"
                r.xadd("consult:outbox", {"to": sender, "re": msg["request_id"], "text": answer})
                print(f"{agent}: answered {sender}'s {msg['request_id']}", flush=True)
            elif msg.get("kind") == "refused":
                print(f"{agent}: {msg.get('re')} was not delivered: {msg.get('error')}", flush=True)
            else:
                print(f"{agent}: {sender} answered {msg.get('re')}: {msg.get('text')}", flush=True)
            r.xack(inbox, group, entry_id)
