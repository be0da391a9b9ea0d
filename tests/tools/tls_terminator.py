#!/usr/bin/env python3
"""A small TLS terminator for the tests: accepts TLS on 127.0.0.1:LISTEN and relays the
plain bytes to 127.0.0.1:UPSTREAM (moto's HTTP port). pgBackRest 2.45 speaks only HTTPS
to S3, and moto's own --ssl mode closes sockets without close_notify, which pgBackRest
rejects (see FIELD-NOTES). Usage: tls_terminator.py LISTEN UPSTREAM CERT KEY
Prints "ready" once listening."""
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
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
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, ssl=ctx)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
