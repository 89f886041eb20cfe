#!/usr/bin/env python3
"""A test double of the network, not of the broker: a TCP proxy that forwards every byte to the
real broker behind it and adds a fixed latency to what the broker sends back (its acks, confirms
and replies), so every publish takes at least DELAY longer while the broker itself works as usual.
Bytes keep their order; the delay is latency, not a bandwidth limit (pipelined requests are all
late by DELAY, not DELAY each one after the other).

  net_delay.py LISTEN_PORT UPSTREAM_HOST:PORT DELAY_MS [--both]

--both delays the client's bytes too (a round trip then costs 2 x DELAY). A client that closes
its side closes the upstream connection, and the other way round. Used by bench/experiments/tx-slow.sh.
"""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    """Copies reader to writer, each chunk released `delay` seconds after it was read."""
    queue = asyncio.Queue()

    async def read():
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + delay, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            queue.put_nowait((time.monotonic() + delay, b""))

    reading = asyncio.ensure_future(read())
    try:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        reading.cancel()
        try:
            writer.close()
        except OSError:
            pass


async def main():
    listen, upstream, delay_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    both = "--both" in sys.argv[4:]
    host, port = upstream.rsplit(":", 1)
    delay = delay_ms / 1000.0

    async def handle(client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            pump(client_r, up_w, delay if both else 0.0),
            pump(up_r, client_w, delay),
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen, reuse_address=True)
    print(f"net_delay: 127.0.0.1:{listen} -> {upstream}, +{delay_ms:g} ms", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
