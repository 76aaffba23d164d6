#!/usr/bin/env python3
"""A local HTTP sink standing in for a chat service: prints what arrives."""
import http.server
import json
import sys

port = int(sys.argv[1]) if len(sys.argv) > 1 else 8799


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            msg = json.loads(body)
            print(f"sink: {msg.get('agent')} says {msg.get('text')!r} (entry {msg.get('id')})", flush=True)
        except ValueError:
            print(f"sink: {body!r}", flush=True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Sink).serve_forever()
