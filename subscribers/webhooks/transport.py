"""The HTTP transport webhooks are sent through: aiohttp, keep-alive pooled, SSRF-guarded.

Owns connection set-up only. The connector resolves host names through `GuardedResolver`,
which checks every answer against the `AddressPolicy` and hands the connector only the checked
addresses, so validation and connection use one resolution and a DNS answer that changes
between a check and a connect (rebinding) cannot send the request elsewhere. The URL keeps the
host name, so the Host header, TLS SNI, certificate verification and the keep-alive pool key
stay those of the original host. aiohttp connects to IP literals without resolving them, so the
caller checks those itself (`ssrf.check_literal_url`) before each request.
"""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from ripple.subscribers.webhooks.ssrf import AddressPolicy, Resolver

__all__ = ["GuardedResolver", "open_session"]

#: Seconds an idle keep-alive connection is kept.
KEEPALIVE: float = 30.0


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that returns only addresses the SSRF policy admits.

    Raises `BlockedAddress` (from `ssrf`) when any answer is refused and `Unresolvable` when
    there is none; both propagate unchanged out of the request.
    """

    def __init__(self, policy: AddressPolicy, resolver: Resolver) -> None:
        self._policy = policy
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self._policy.check(host, await self._resolver.resolve(host, port))
        results: list[ResolveResult] = []
        for addr in addresses:
            version = ipaddress.ip_address(addr).version
            if family != socket.AF_UNSPEC and family != (
                socket.AF_INET if version == 4 else socket.AF_INET6
            ):
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=addr,
                    port=port,
                    family=socket.AF_INET if version == 4 else socket.AF_INET6,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        if not results:
            raise OSError(f"webhook host {host!r} has no address of family {family!r}")
        return results

    async def close(self) -> None:
        return None


def open_session(
    policy: AddressPolicy,
    resolver: Resolver,
    *,
    limit: int,
    limit_per_host: int,
    user_agent: str,
) -> aiohttp.ClientSession:
    """A session whose new connections go only to SSRF-checked addresses.

    `limit` bounds connections overall and `limit_per_host` per origin (host, port, TLS); a
    request beyond either waits for a connection inside its own timeout. No DNS cache: every
    new connection resolves, and is checked, again. Redirects are the caller's to refuse.
    """
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(policy, resolver),
        use_dns_cache=False,
        limit=limit,
        limit_per_host=limit_per_host,
        keepalive_timeout=KEEPALIVE,
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers={"user-agent": user_agent},
        timeout=aiohttp.ClientTimeout(total=None),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
