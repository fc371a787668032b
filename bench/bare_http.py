"""Bare HTTP baselines: signed JSON POSTs to the local sink with no Ripple in the way.

`python -m bench.bare_http [CLIENT ...]` prints requests/s of bare aiohttp and bare httpx at
concurrency 1, 10 and 50 (3,000 POSTs each); `make bench` uses `aiohttp_posts` as the baseline
of the webhook figure. Each POST is signed the Standard Webhooks way (HMAC-SHA256), as Ripple's.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from bench.common import subprocess_module
from bench.publish import free_port

POSTS = 3000
KEY = os.urandom(24)

Post = Callable[[int], Awaitable[int]]


def _signed(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"type": "hook.event", "timestamp": "now", "data": {"n": n}}).encode()
    msg_id = f"msg_{uuid.uuid4().hex}"
    stamp = str(int(time.time()))
    digest = hmac.new(KEY, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return body, {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


async def _drive(post: Post, posts: int, concurrency: int) -> float:
    counter = iter(range(posts))

    async def one() -> None:
        for n in counter:
            status = await post(n)
            assert status < 300, status

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return posts / (time.perf_counter() - started)


async def aiohttp_posts(url: str, concurrency: int, posts: int = POSTS) -> float:
    """Requests/s of bare aiohttp POSTing signed JSON to `url`."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(n: int) -> int:
            body, headers = _signed(n)
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                return response.status

        return await _drive(post, posts, concurrency)


async def httpx_posts(url: str, concurrency: int, posts: int = POSTS) -> float:
    """Requests/s of bare httpx POSTing signed JSON to `url`."""
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def post(n: int) -> int:
            body, headers = _signed(n)
            response = await client.post(url, content=body, headers=headers)
            return response.status_code

        return await _drive(post, posts, concurrency)


CLIENTS = {"aiohttp": aiohttp_posts, "httpx": httpx_posts}


async def main(clients: list[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    async with subprocess_module("bench.sink", str(port)):
        for name in clients:
            for concurrency in (1, 10, 50):
                rate = await CLIENTS[name](url, concurrency)
                print(f"bare {name:<8} concurrency {concurrency:>3}: {rate:,.0f} requests/s")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or list(CLIENTS)))
