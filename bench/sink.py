"""A minimal local HTTP sink for webhook benchmarks: `python -m bench.sink PORT [SLOW]` answers
204, after SLOW seconds for paths that start with `/slow` (a slow endpoint on the same host)."""

from __future__ import annotations

import asyncio
import sys

#: Seconds a `/slow` path takes to answer.
SLOW = 0.0


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if SLOW and head.split(b" ", 2)[1].startswith(b"/slow"):
                await asyncio.sleep(SLOW)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) > 2:
        SLOW = float(sys.argv[2])
    asyncio.run(main(int(sys.argv[1])))
