#!/usr/bin/env python3
"""A small TLS terminator for the tests: accepts TLS on 127.0.0.1:LISTEN and relays the
plain bytes to 127.0.0.1:UPSTREAM (moto's HTTP port). pgBackRest 2.45 speaks only HTTPS
to S3, and moto's own --ssl mode closes sockets without close_notify, which pgBackRest
rejects (see FIELD-NOTES). Usage: tls_terminator.py LISTEN UPSTREAM CERT KEY [RATE LATENCY_MS]
RATE (bytes a second per connection, 0 for no limit) and LATENCY_MS (added once per
request sent, and per connection made) put the store at a distance: the benches' "store
far away". Prints "ready" once listening."""
import asyncio
import ssl
import sys


async def pipe(reader, writer, rate=0, latency=0.0):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if latency:
                await asyncio.sleep(latency)
            writer.write(data)
            await writer.drain()
            if rate:
                await asyncio.sleep(len(data) / rate)
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
            await writer.wait_closed()
        except Exception:
            pass


async def main():
    listen, upstream, cert, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    rate = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    latency = (float(sys.argv[6]) / 1000.0) if len(sys.argv) > 6 else 0.0
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    async def handle(cr, cw):
        if latency:
            await asyncio.sleep(latency)
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        # Requests wait a round trip; responses come at the link's rate.
        await asyncio.gather(pipe(cr, uw, 0, latency), pipe(ur, cw, rate, 0.0))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, ssl=ctx)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
