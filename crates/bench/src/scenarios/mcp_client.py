"""The `mcp` benchmark's client: the official MCP Python SDK driving
`oxidepm mcp` over stdio, timed in-process.

    python3 mcp_client.py OXIDEPM_BIN

Prints {"ready": true} once initialized, then answers each command read
from stdin with one JSON line:
    status N [APP]  N timed tools/call status round trips (every app, or
                    one) -> p50/p99 in ms
    search APP TEXT  one logs search of APP's every kept file -> ms, lines
    quit
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            out({"ready": True})
            while True:
                line = await anyio.to_thread.run_sync(sys.stdin.readline)
                words = line.split(maxsplit=2)
                if not words or words[0] == "quit":
                    break
                if words[0] == "status":
                    times, apps = [], 0
                    for _ in range(int(words[1])):
                        t0 = time.perf_counter()
                        args = {"app": words[2].strip()} if len(words) > 2 else {}
                        r = await session.call_tool("status", args)
                        times.append((time.perf_counter() - t0) * 1000)
                        apps = len(r.structured_content["apps"])
                    out({"p50": pct(times, 50), "p99": pct(times, 99), "apps": apps, "n": len(times)})
                elif words[0] == "search":
                    t0 = time.perf_counter()
                    r = await session.call_tool("logs", {"app": words[1], "search": words[2].strip(), "lines": 10})
                    ms = (time.perf_counter() - t0) * 1000
                    s = r.structured_content or {}
                    out({"ms": ms, "lines": len(s.get("lines", [])), "error": bool(r.is_error), "text": r.content[0].text[:300]})


anyio.run(main)
