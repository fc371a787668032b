"""SSRF guard for webhook URLs: which addresses a webhook may reach; pure plus a resolver seam.

Owns the address policy: canonicalise an address (IPv4-mapped, IPv4-compatible, 6to4 and NAT64
IPv6 forms become the IPv4 they embed), then refuse it if an explicit deny list or
`ipaddress`'s own flags say it is not public, unless an allow-listed network admits it. The deny
list is explicit because `ipaddress.is_global` calls some of these ranges global. Resolution goes
through the `Resolver` protocol so tests can script DNS answers; the caller must connect to the
address it checked, or DNS rebinding defeats the check (`subscribers/webhooks/transport.py` resolves
once per connection, through this check).

Before any DNS, `known_addresses` recognises hosts whose address needs no lookup: IP literals in
every notation a resolver accepts (`inet_aton`'s decimal, octal, hex and short forms too),
`localhost` in its spellings, and wildcard-DNS names that spell an address (`10.0.0.1.nip.io`).
That catches at subscribe time what would only fail at delivery; the resolved-address check
stays the defence, since no list of names is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

__all__ = [
    "DENIED_NETWORKS",
    "AddressPolicy",
    "BlockedAddress",
    "Resolver",
    "SystemResolver",
    "Unresolvable",
    "canonical",
    "check_literal_url",
    "check_url",
    "known_addresses",
    "literal_address",
    "parse_target_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Refused unless allow-listed: (network, why). Checked after canonicalisation.
DENIED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), why)
    for cidr, why in (
        ("0.0.0.0/8", "unspecified/this-network"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("100.64.0.0/10", "carrier-grade NAT (RFC 6598)"),
        ("100.100.100.200/32", "cloud metadata (Alibaba)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.169.254/32", "cloud metadata"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("198.18.0.0/15", "benchmarking (RFC 2544)"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments (incl. Teredo)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing"),
        ("fd00:ec2::254/128", "cloud metadata (AWS)"),
        ("fc00::/7", "unique local (ULA)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPAT = ipaddress.ip_network("::/96")


class BlockedAddress(ValueError):
    """The webhook URL reaches an address outside the public internet."""


class Unresolvable(BlockedAddress):
    """The webhook host does not resolve (now); nothing can be connected to."""


def canonical(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form embeds (mapped, compatible, 6to4, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPAT and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Deny-by-range policy with an allow list (settings.webhook_allowed_networks)."""

    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> AddressPolicy:
        return cls(tuple(ipaddress.ip_network(c, strict=False) for c in cidrs))

    def _allow_listed(self, *forms: IPAddress) -> bool:
        return any(
            form.version == net.version and form in net for form in forms for net in self.allowed
        )

    def refusal(self, address: str | IPAddress) -> str | None:
        """Why `address` is refused, or None when a webhook may connect to it."""
        raw = ipaddress.ip_address(address) if isinstance(address, str) else address
        if isinstance(raw, ipaddress.IPv6Address) and raw.scope_id:
            raw = ipaddress.IPv6Address(str(raw).split("%", 1)[0])
        canon = canonical(raw)
        if self._allow_listed(raw, canon):
            return None
        for net, why in DENIED_NETWORKS:
            if canon.version == net.version and canon in net:
                return why
        if not canon.is_global or canon.is_multicast or canon.is_reserved:
            return "not a public address"
        return None

    def check(self, host: str, addresses: Sequence[str]) -> list[str]:
        """Every address of `host` checked; raise BlockedAddress if any is refused."""
        if not addresses:
            raise Unresolvable(f"webhook host {host!r} did not resolve to any address")
        for addr in addresses:
            why = self.refusal(addr)
            if why is not None:
                raise BlockedAddress(
                    f"webhook host {host!r} resolves to {addr} ({why}); refused to prevent "
                    "SSRF. Use a public address, or admit the network with "
                    "RIPPLE_WEBHOOK_ALLOWED_NETWORKS"
                )
        return list(addresses)


class Resolver(Protocol):
    """Turns a host name into IP address strings (the seam tests script)."""

    async def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    """The operating system's resolver (getaddrinfo), run off the event loop."""

    async def resolve(self, host: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise Unresolvable(f"webhook host {host!r} does not resolve: {exc}") from exc
        seen: list[str] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            addr = str(sockaddr[0]).split("%", 1)[0]
            if addr not in seen:
                seen.append(addr)
        return seen


def parse_target_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a webhook URL; ValueError saying what is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"webhook url must start with http:// or https:// (got {url!r})")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"webhook url has an invalid port: {url!r}") from exc
    if not host:
        raise ValueError(f"webhook url has no host: {url!r}")
    return scheme, host, port or (443 if scheme == "https" else 80)


def literal_address(host: str) -> str | None:
    """The address `host` spells when it is an IP literal (zone id dropped), else None."""
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        return None


#: Names for this machine wherever they are looked up (RFC 6761 reserves `localhost` and every
#: name under it; the others are the aliases Linux distributions put in /etc/hosts).
_LOCAL_NAMES: frozenset[str] = frozenset(
    {"localhost", "localhost.localdomain", "localhost6", "ip6-localhost", "ip6-loopback"}
)
_LOOPBACK: tuple[str, ...] = ("127.0.0.1", "::1")
#: Public domains whose every name answers 127.0.0.1.
_LOOPBACK_DOMAINS: tuple[str, ...] = ("localtest.me", "lvh.me", "vcap.me")
#: Public wildcard-DNS domains that answer the address spelled in the name (`10.0.0.1.nip.io`,
#: `app-10-0-0-1.sslip.io`, `app-0a000001.nip.io`, `--1.sslip.io` for ::1).
_ADDRESS_DOMAINS: tuple[str, ...] = ("nip.io", "sslip.io", "xip.io")
# One part of an inet_aton address, no longer than a 32-bit value needs (so never a huge int).
_INET_PART = re.compile(r"0[xX][0-9a-fA-F]{0,8}|0[0-7]{0,11}|[1-9][0-9]{0,9}")
# Four decimal octets joined by '.' or '-' anywhere in a name; hex: 8 digits ending a label.
_EMBEDDED_V4 = re.compile(
    r"(?<![0-9])([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})(?![0-9])"
)
_HEX_V4 = re.compile(r"(?:^|[.-])([0-9a-f]{8})(?=\.|$)")


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `text` spells in `inet_aton` notation (1-4 parts, each decimal, octal
    with a leading 0, or hex with 0x; the last part fills the remaining bytes), else None."""
    parts = text.split(".")
    if len(parts) > 4 or not all(_INET_PART.fullmatch(part) for part in parts):
        return None
    values = [
        int(p[2:] or "0", 16) if p[:2].lower() == "0x" else int(p, 8 if p[0] == "0" else 10)
        for p in parts
    ]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _normalise_host(host: str) -> str:
    """Lower-case `host` without trailing dots, in the ASCII form IDNA gives it (so full-width
    letters and ideographic full stops read as the ASCII a client would look up)."""
    host = host.split("%", 1)[0]
    with contextlib.suppress(UnicodeError):
        host = host.encode("idna").decode("ascii")
    return host.lower().rstrip(".")


def _embedded_addresses(labels: str) -> list[str]:
    """Every address a wildcard-DNS name's labels (the part before the domain) may spell."""
    found = [
        ".".join(str(int(octet)) for octet in match.groups())
        for match in _EMBEDDED_V4.finditer(labels)
        if all(int(octet) <= 255 for octet in match.groups())
    ]
    found += [str(ipaddress.IPv4Address(int(m[1], 16))) for m in _HEX_V4.finditer(labels)]
    for label in labels.split("."):
        if "--" in label or label.count("-") == 7:  # sslip.io's IPv6, ':' written '-'
            address = literal_address(label.replace("-", ":"))
            if address is not None:
                found.append(address)
    return found


def _literal_in_any_notation(host: str) -> str | None:
    """The address `host` spells as an IP literal in any notation a resolver reads as one."""
    literal = literal_address(host)
    if literal is None:
        name = _normalise_host(host)
        literal = literal_address(name)
        if literal is None and (v4 := _inet_aton(name)) is not None:
            literal = str(v4)
    return literal


def known_addresses(host: str) -> tuple[list[str], bool] | None:
    """The addresses `host` stands for without a DNS lookup, and whether they are a name's
    alternatives (any may answer) rather than all answers; None when only DNS can tell.

    Recognised: an IP literal in any notation (one address), a name for this machine (its
    loopback addresses, alternatives), a public name that always answers loopback, and a
    wildcard-DNS name that spells addresses (every address it spells; none: only DNS can tell).
    """
    literal = _literal_in_any_notation(host)
    if literal is not None:
        return [literal], False
    name = _normalise_host(host)
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return list(_LOOPBACK), True
    for domain in _LOOPBACK_DOMAINS:
        if name == domain or name.endswith("." + domain):
            return ["127.0.0.1"], False
    for domain in _ADDRESS_DOMAINS:
        if name.endswith("." + domain):
            embedded = _embedded_addresses(name.removesuffix("." + domain))
            return (embedded, False) if embedded else None
    return None


def _check_known(host: str, policy: AddressPolicy) -> None:
    """Refuse `host` when the addresses it stands for without DNS (`known_addresses`) are
    refused. A name for this machine passes when the allow list admits any of its loopback
    addresses; its resolved addresses are then checked as for any name."""
    known = known_addresses(host)
    if known is None:
        return
    addresses, alternatives = known
    if alternatives and any(policy.refusal(address) is None for address in addresses):
        return
    policy.check(host, addresses)


async def check_url(url: str, policy: AddressPolicy, resolver: Resolver) -> list[str]:
    """Resolve the URL's host and check every address; return the addresses to connect to.

    Raises `ValueError` for a malformed URL and `BlockedAddress` (a ValueError) for a refused one.
    """
    _scheme, host, port = parse_target_url(url)
    _check_known(host, policy)
    literal = _literal_in_any_notation(host)
    addresses = [literal] if literal is not None else await resolver.resolve(host, port)
    return policy.check(host, addresses)


def check_literal_url(url: str, policy: AddressPolicy) -> None:
    """Check a URL without DNS: a host `known_addresses` recognises is checked, any other host
    name is left to connect time.

    Raises `ValueError` for a malformed URL and `BlockedAddress` for a refused address.
    """
    _scheme, host, _port = parse_target_url(url)
    _check_known(host, policy)
