# SMTP sink for the email tests (python3 -m pip install aiosmtpd).
# Usage: python3 smtp_sink.py OUT_DIR  -> prints the port it listens on
# (127.0.0.1, chosen by the kernel); writes OUT_DIR/<n>.json per message
# ({"from", "to", "data"}); 550 for rcpt "reject5*", 450 for "reject4*";
# exits when stdin closes, or after 120 s.
import asyncio, json, os, sys, threading
from aiosmtpd.smtp import SMTP
out = sys.argv[1]
class Handler:
    n = 0
    async def handle_RCPT(self, server, session, envelope, address, options):
        if address.startswith("reject5"):
            return "550 5.1.1 no such user"
        if address.startswith("reject4"):
            return "450 4.2.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"
    async def handle_DATA(self, server, session, envelope):
        Handler.n += 1
        doc = {"from": envelope.mail_from, "to": envelope.rcpt_tos,
               "data": envelope.content.decode("utf-8", "replace")}
        tmp = os.path.join(out, "%d.tmp" % Handler.n)
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, os.path.join(out, "%d.json" % Handler.n))
        return "250 Message accepted"
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(Handler()), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    def wait_stdin():
        sys.stdin.read()
        loop.call_soon_threadsafe(stop.set)
    threading.Thread(target=wait_stdin, daemon=True).start()
    try:
        await asyncio.wait_for(stop.wait(), 120)
    except asyncio.TimeoutError:
        pass
    os._exit(0)
asyncio.run(main())
