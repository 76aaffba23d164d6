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


def answer(entry_id, msg):
    """Answers one message and acknowledges it in one transaction: a crash
    between the two would answer it twice, or never."""
    text = msg.get("text", "")
    # The log says that a message came, never what it said: a log is read
    # by more people (and agents) than the conversation was for.
    print(f"{agent}: message {entry_id} ({len(text)} chars) on {msg.get('channel')}", flush=True)
    with r.pipeline() as tx:  # MULTI ... EXEC
        # The spec's shared outbox name works too; the lane maps it to this
        # agent's own outbox, so nobody can answer as someone else.
        tx.xadd("webhook:outbox", {"channel": msg.get("channel", ""), "text": f"{persona}: you said {text!r}"})
        tx.xack(inbox, group, entry_id)
        tx.execute()


def take_over_pending():
    """What was read and not acknowledged before (this process died, or
    the lane went away mid-answer) is answered first: a read of ">" gives
    only new entries, and those would stay pending for good."""
    start = "0-0"
    while True:
        start, entries, *_ = r.xautoclaim(inbox, group, agent, min_idle_time=0, start_id=start, count=10)
        for entry_id, msg in entries:
            if msg:  # an entry deleted meanwhile has no fields
                answer(entry_id, msg)
            else:
                r.xack(inbox, group, entry_id)
        if start == "0-0":
            return


print(f"{agent}: listening on {inbox}", flush=True)
claimed = False
while True:
    # Every command may meet the lane's proxy or Redis restarting: the
    # next one reconnects, and what was left pending is taken over again.
    try:
        if not claimed:
            take_over_pending()
            claimed = True
        got = r.xreadgroup(group, agent, {inbox: ">"}, count=10, block=BLOCK_MS)
        for _stream, entries in got or []:
            for entry_id, msg in entries:
                answer(entry_id, msg)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        print(f"{agent}: lane unavailable ({e}); trying again", flush=True)
        claimed = False
        time.sleep(1)
