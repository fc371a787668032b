"""The HTTP transport webhooks are sent through: keep-alive pooled, and pinned to checked IPs.

Owns connection set-up only. Every new TCP connection resolves the host through the SSRF
`Resolver`, checks every answer against the `AddressPolicy`, and connects to the checked IP
itself, so a DNS answer that changes between the check and the connect (rebinding) cannot send
the request elsewhere. The URL keeps the host name, so the Host header, TLS SNI, certificate
verification and the keep-alive pool key all stay those of the original host name.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpcore
import httpx

from ripple.subscribers.ssrf import AddressPolicy, Resolver, check_host

__all__ = ["PinnedTransport"]


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to resolved-and-checked addresses."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = await check_host(host, port, self._policy, self._resolver)
        return await self._inner.connect_tcp(
            address,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks never connect to unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with its connection pool built on the pinned backend.

    httpx does not take a network backend, so the pool it builds is replaced by an equivalent
    one (same exception mapping and request conversion, inherited).
    """

    def __init__(
        self,
        policy: AddressPolicy,
        resolver: Resolver,
        *,
        max_connections: int = 100,
        max_keepalive_connections: int = 20,
        keepalive_expiry: float = 30.0,
    ) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=_PinnedBackend(policy, resolver),
        )
