#!/usr/bin/env python3
"""A lane agent written with redis-py (sync), as its README tells an author to.

Connects with redis.from_url(OXIDEPM_LANE) and redis-py's default options
(a 5 s socket timeout), names its connection (client_name, as many authors
do), creates its group at start (BUSYGROUP means it is there), takes over
what a dead consumer left pending with XAUTOCLAIM, reads with a blocking
XREADGROUP, and answers each message with XADD + XACK in one MULTI/EXEC
transaction, or in a plain pipeline when the message asks for "[plain]".

A message saying "crash" makes it exit after reading it and before
answering, once (a marker file in the directory given as argument says it
did), so that its next run must recover the message with XAUTOCLAIM.
"""
import os
import sys
import time

import redis

LIB = "redis-py"
AGENT = os.environ["OXIDEPM_AGENT"]
GROUP = os.environ["OXIDEPM_GROUP"]
INBOX = next(k for k in os.environ["OXIDEPM_INBOXES"].split(",") if k.endswith(":webhook:inbox"))
OUTBOX = next(k for k in os.environ["OXIDEPM_OUTBOXES"].split(",") if k.endswith(":webhook:outbox"))
# A new name per run: the last run's consumer is dead, and what it left
# pending is taken over below.
CONSUMER = f"{AGENT}-{os.getpid()}"
CRASHED = os.path.join(sys.argv[1], f"{AGENT}.crashed")
# The read blocks 2 s, well inside redis-py's default socket timeout of 5 s:
# a read that blocks as long as the timeout fails with TimeoutError whenever
# the two race.
BLOCK_MS = 2000

r = redis.from_url(os.environ["OXIDEPM_LANE"], decode_responses=True, client_name=CONSUMER)


def handle(entry_id, fields):
    text = fields.get("text", "")
    if "crash" in text and not os.path.exists(CRASHED):
        open(CRASHED, "w").close()
        print(f"{CONSUMER}: exiting before answering {entry_id}", flush=True)
        os._exit(3)
    answer = {"channel": fields.get("channel", ""), "text": f"{LIB}: {text}"}
    pipe = r.pipeline(transaction="[plain]" not in text)
    pipe.xadd(OUTBOX, answer)
    pipe.xack(INBOX, GROUP, entry_id)
    pipe.execute()


def start():
    try:
        r.xgroup_create(INBOX, GROUP, id="$", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
    # Everything pending, whoever had it: only one instance of this agent
    # runs, so any other consumer is a dead run of it.
    cursor = "0-0"
    while True:
        cursor, entries, _deleted = r.xautoclaim(INBOX, GROUP, CONSUMER, 0, start_id=cursor)
        for entry_id, fields in entries:
            handle(entry_id, fields)
        if cursor == "0-0":
            break


def serve():
    print(f"{CONSUMER}: reading {INBOX}", flush=True)
    while True:
        got = r.xreadgroup(GROUP, CONSUMER, {INBOX: ">"}, count=10, block=BLOCK_MS)
        for _stream, entries in got or []:
            for entry_id, fields in entries:
                handle(entry_id, fields)


while True:
    try:
        start()
        serve()
    except (redis.ConnectionError, redis.TimeoutError) as e:
        # The proxy or Redis restarting: the next command reconnects.
        print(f"{CONSUMER}: connection lost ({e}); again", flush=True)
        time.sleep(0.2)
