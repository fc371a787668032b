"""Test helpers: wait on conditions instead of sleeping; call the REST API in process."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import httpx

if TYPE_CHECKING:
    from ripple.platform.client import Client

T = TypeVar("T")


@overload
async def assert_eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = ..., interval: float = ...
) -> T: ...


@overload
async def assert_eventually(
    check: Callable[[], T], *, timeout: float = ..., interval: float = ...
) -> T: ...


async def assert_eventually(
    check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll `check` until it returns a truthy value (returned) or raise AssertionError."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last = result
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)


def rest_client(client: Client) -> httpx.AsyncClient:
    """An HTTP client on the REST API of `client`, in process; an unhandled error answers 500
    as in production instead of raising into the test."""
    from ripple.platform.api.app import create_app

    transport = httpx.ASGITransport(app=create_app(client), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test")
