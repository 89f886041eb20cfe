"""A minimal HTTP/1.1 consumer for benchmarks: answers every request 204, keep-alive, one
asyncio loop (several times the requests per second of http.server's threads, so the relay, not
the consumer, is what a drain measures). Prints the number of requests served on SIGTERM.
  python3 bench/http_204.py PORT
"""
import asyncio
import signal
import sys

served = 0


class Consumer(asyncio.Protocol):
    def connection_made(self, transport):
        self.t = transport
        self.buf = b""

    def data_received(self, data):
        global served
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            served += 1
            self.t.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")


async def main(port):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Consumer, "127.0.0.1", port, backlog=1024)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    async with server:
        await stop
    print(f"served {served} requests", file=sys.stderr)


asyncio.run(main(int(sys.argv[1])))
