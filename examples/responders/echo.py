#!/usr/bin/env python3
"""An echo responder: answers each agent's request with the request's text.

oxidepm starts it as an app of kind "responder" and tells it, through its
environment: OXIDEPM_RESPONDER (its name, which is also its consumer group),
OXIDEPM_LANE (its own Redis socket, unix:///...) and OXIDEPM_LANE_FILE (a
JSON file listing the outboxes to read; read again, as agents come and go).
Agents ask with `XADD <agent>:<name>:outbox * text ...`.
"""
import json
import os
import time

import redis

name = os.environ["OXIDEPM_RESPONDER"]
# Agents may send any bytes: decoding strictly would raise while reading,
# and the same request would stop the responder at every restart.
r = redis.from_url(
    os.environ["OXIDEPM_LANE"], decode_responses=True, encoding_errors="replace"
)
start = "0"  # first what was read but not answered before a restart
while True:
    with open(os.environ["OXIDEPM_LANE_FILE"]) as f:
        outboxes = json.load(f)["outboxes"]
    if not outboxes:
        time.sleep(1)
        continue
    got = r.xreadgroup(name, "echo", {k: start for k in outboxes}, count=16, block=2000)
    if not any(entries for _, entries in got or []):
        start = ">"
    for outbox, entries in got or []:
        agent = outbox.split(":")[0]  # the asker is the key's, never the payload's
        for entry_id, fields in entries:
            reply = {"request_id": entry_id, "text": fields.get("text", "")}
            # Reply first, then acknowledge: the lane proxy passes a reply
            # only while its request is pending.
            try:
                r.xadd(f"{agent}:{name}:inbox", reply, maxlen=1000, approximate=True)
            except redis.ResponseError as e:
                # Refused (too large, say): one agent's request must not
                # stop the answers to the others, so it is dropped.
                print(f"{agent} {entry_id}: {e}", flush=True)
            r.xack(outbox, name, entry_id)
