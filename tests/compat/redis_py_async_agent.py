#!/usr/bin/env python3
"""A lane agent written with redis-py's asyncio client.

The same agent as redis_py_agent.py (see there), on redis.asyncio with its
default options, without a client name.
"""
import asyncio
import os
import sys

import redis
import redis.asyncio as aioredis

LIB = "redis-py-asyncio"
AGENT = os.environ["OXIDEPM_AGENT"]
GROUP = os.environ["OXIDEPM_GROUP"]
INBOX = next(k for k in os.environ["OXIDEPM_INBOXES"].split(",") if k.endswith(":webhook:inbox"))
OUTBOX = next(k for k in os.environ["OXIDEPM_OUTBOXES"].split(",") if k.endswith(":webhook:outbox"))
CONSUMER = f"{AGENT}-{os.getpid()}"
CRASHED = os.path.join(sys.argv[1], f"{AGENT}.crashed")
# Inside the default socket timeout of 5 s (see redis_py_agent.py).
BLOCK_MS = 2000


async def handle(r, entry_id, fields):
    text = fields.get("text", "")
    if "crash" in text and not os.path.exists(CRASHED):
        open(CRASHED, "w").close()
        print(f"{CONSUMER}: exiting before answering {entry_id}", flush=True)
        os._exit(3)
    answer = {"channel": fields.get("channel", ""), "text": f"{LIB}: {text}"}
    async with r.pipeline(transaction="[plain]" not in text) as pipe:
        pipe.xadd(OUTBOX, answer)
        pipe.xack(INBOX, GROUP, entry_id)
        await pipe.execute()


async def start(r):
    try:
        await r.xgroup_create(INBOX, GROUP, id="$", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
    cursor = "0-0"
    while True:
        cursor, entries, _deleted = await r.xautoclaim(INBOX, GROUP, CONSUMER, 0, start_id=cursor)
        for entry_id, fields in entries:
            await handle(r, entry_id, fields)
        if cursor == "0-0":
            break


async def serve(r):
    print(f"{CONSUMER}: reading {INBOX}", flush=True)
    while True:
        got = await r.xreadgroup(GROUP, CONSUMER, {INBOX: ">"}, count=10, block=BLOCK_MS)
        for _stream, entries in got or []:
            for entry_id, fields in entries:
                await handle(r, entry_id, fields)


async def main():
    r = aioredis.from_url(os.environ["OXIDEPM_LANE"], decode_responses=True)
    while True:
        try:
            await start(r)
            await serve(r)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            print(f"{CONSUMER}: connection lost ({e}); again", flush=True)
            await asyncio.sleep(0.2)


asyncio.run(main())
