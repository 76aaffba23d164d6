"""Drives `oxidepm mcp` with the official MCP Python SDK, one session.

    python3 session.py OXIDEPM_BIN STEPS_JSON [SERVER_ARG...]

Runs each step of STEPS_JSON (a list) in order and prints one JSON line per
step (and one per progress notification as it arrives, so that the test
can act on it), flushed at once. The server inherits this environment
(OXIDEPM_HOME in particular).
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client


# The URIs of notifications/resources/updated, as they come.
UPDATES_TX, UPDATES = anyio.create_memory_object_stream(100)


async def on_message(message):
    message = getattr(message, "root", message)
    if isinstance(message, types.ResourceUpdatedNotification):
        await UPDATES_TX.send(str(message.params.uri))


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def result_json(r):
    text = "".join(getattr(c, "text", "") for c in r.content)
    return {
        "is_error": bool(r.is_error),
        "structured": r.structured_content,
        "text": text,
    }


async def step(session, i, s):
    op = s["op"]
    if op == "tools":
        tools = (await session.list_tools()).tools
        out({"step": i, "tools": [
            {"name": t.name, "schema": t.input_schema, "description": t.description or ""}
            for t in tools
        ]})
    elif op == "call":
        progress = []

        async def on_progress(p, total, message):
            progress.append(p)
            out({"step": i, "progress": p, "message": message})

        r = await session.call_tool(s["tool"], s.get("args", {}), progress_callback=on_progress)
        res = result_json(r)
        res.update({"step": i, "progress_count": len(progress)})
        out(res)
    elif op == "cancel":
        # Calls the tool, and cancels it when its first progress arrives.
        started = anyio.Event()

        async def on_progress(p, total, message):
            out({"step": i, "progress": p, "message": message})
            started.set()

        async with anyio.create_task_group() as tg:
            async def run():
                await session.call_tool(s["tool"], s.get("args", {}), progress_callback=on_progress)
                out({"step": i, "finished": True})

            tg.start_soon(run)
            await started.wait()
            tg.cancel_scope.cancel()
        out({"step": i, "cancelled": True})
    elif op == "subscribe":
        await session.subscribe_resource(s["uri"])
        out({"step": i, "subscribed": s["uri"]})
    elif op == "await_update":
        uri = await UPDATES.receive()
        out({"step": i, "updated": uri})
    elif op == "resources":
        rs = (await session.list_resources()).resources
        out({"step": i, "uris": [str(r.uri) for r in rs]})
    elif op == "read":
        r = await session.read_resource(s["uri"])
        out({"step": i, "text": "".join(getattr(c, "text", "") for c in r.contents)})
    else:
        raise SystemExit(f"unknown step {op!r}")


async def main():
    bin_, steps = sys.argv[1], json.loads(sys.argv[2])
    params = StdioServerParameters(
        command=bin_, args=["mcp", *sys.argv[3:]], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            out({"init": {
                "protocol": init.protocol_version,
                "server": init.server_info.name,
            }})
            for i, s in enumerate(steps):
                await step(session, i, s)
    out({"done": True})


anyio.run(main)
