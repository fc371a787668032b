"""The SSRF guard: literal IPs, IPv6 forms that embed IPv4, resolved names, the allow list."""

from __future__ import annotations

import ipaddress

import pytest

from ripple.subscribers.webhooks.ssrf import (
    AddressPolicy,
    BlockedAddress,
    Unresolvable,
    canonical,
    check_literal_url,
    check_url,
    known_addresses,
)

DENY = AddressPolicy()

REFUSED = [
    "127.0.0.1",
    "127.255.255.254",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "169.254.0.1",
    "100.64.0.1",
    "100.127.255.255",
    "100.100.100.200",
    "192.0.2.10",
    "198.51.100.7",
    "203.0.113.9",
    "198.18.0.1",
    "198.19.255.255",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.0.8",
    "::",
    "::1",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",
    "ff02::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::ffff:7f00:1",
    "::127.0.0.1",
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b::192.168.0.1",
    "fec0::1",
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "2002:808:808::1",
]


@pytest.mark.parametrize("address", REFUSED)
def test_policy__refuses_non_public_addresses(address: str) -> None:
    assert DENY.refusal(address) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_policy__admits_public_addresses(address: str) -> None:
    assert DENY.refusal(address) is None


def test_policy__explicit_list_beyond_is_global() -> None:
    # Python calls some of these global; the explicit list refuses them anyway.
    for address in ("100.100.100.200", "192.88.99.1"):
        assert DENY.refusal(address) is not None


def test_canonical__ipv4_mapped_and_embedded_forms() -> None:
    v4 = ipaddress.IPv4Address("127.0.0.1")
    for form in ("::ffff:127.0.0.1", "2002:7f00:1::", "64:ff9b::7f00:1", "::7f00:1"):
        assert canonical(ipaddress.IPv6Address(form)) == v4
    assert canonical(ipaddress.IPv6Address("::1")) == ipaddress.IPv6Address("::1")


def test_policy__allow_list_admits_named_networks_only() -> None:
    policy = AddressPolicy.from_cidrs(["127.0.0.0/8", "fd00::/8"])
    assert policy.refusal("127.0.0.1") is None
    assert policy.refusal("::ffff:127.0.0.1") is None
    assert policy.refusal("fd00::5") is None
    assert policy.refusal("10.0.0.1") is not None
    assert policy.refusal("169.254.169.254") is not None


class ScriptedResolver:
    """Answers from a script; `alternate` cycles through answers on each call."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: dict[str, int] = {}

    async def resolve(self, host: str, port: int) -> list[str]:
        n = self.calls.get(host, 0)
        self.calls[host] = n + 1
        options = self.answers[host]
        return options[n % len(options)]


async def test_check_url__literal_ips_need_no_resolver() -> None:
    resolver = ScriptedResolver({})
    assert await check_url("https://8.8.8.8/hook", DENY, resolver) == ["8.8.8.8"]
    for url in (
        "http://127.0.0.1:8080/",
        "http://[::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://169.254.169.254/latest/meta-data/",
    ):
        with pytest.raises(BlockedAddress):
            await check_url(url, DENY, resolver)
    assert resolver.calls == {}


async def test_check_url__hostnames_resolving_to_private_addresses_are_refused() -> None:
    resolver = ScriptedResolver(
        {
            "public.example": [["93.184.216.34"]],
            "internal.example": [["10.0.0.5"]],
            "mixed.example": [["93.184.216.34", "192.168.0.1"]],
            "metadata.example": [["::ffff:169.254.169.254"]],
        }
    )
    assert await check_url("https://public.example/x", DENY, resolver) == ["93.184.216.34"]
    for host in ("internal.example", "mixed.example", "metadata.example"):
        with pytest.raises(BlockedAddress, match=host):
            await check_url(f"https://{host}/x", DENY, resolver)


async def test_check_url__alternating_resolver_is_checked_on_every_call() -> None:
    resolver = ScriptedResolver({"rebind.example": [["93.184.216.34"], ["127.0.0.1"]]})
    await check_url("https://rebind.example/", DENY, resolver)
    with pytest.raises(BlockedAddress, match=r"127\.0\.0\.1"):
        await check_url("https://rebind.example/", DENY, resolver)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "file:///etc/passwd", "gopher://x/", "http:///nohost", "x"]
)
async def test_check_url__rejects_bad_schemes_and_hosts(url: str) -> None:
    with pytest.raises(ValueError, match="webhook url"):
        await check_url(url, DENY, ScriptedResolver({}))


async def test_check_url__empty_answer_is_refused() -> None:
    with pytest.raises(BlockedAddress, match="did not resolve"):
        await check_url(
            "https://nothing.example/", DENY, ScriptedResolver({"nothing.example": [[]]})
        )


def test_check_literal_url__checks_ip_hosts_and_leaves_names_to_connect_time() -> None:
    check_literal_url("https://8.8.8.8/hook", DENY)
    check_literal_url("https://internal.example/hook", DENY)  # resolved when connecting
    for url in ("http://127.0.0.1:8080/", "http://[::ffff:10.0.0.1]/", "http://[fe80::1%25eth0]/"):
        with pytest.raises(BlockedAddress):
            check_literal_url(url, DENY)
    with pytest.raises(ValueError, match="webhook url"):
        check_literal_url("ftp://8.8.8.8/", DENY)


class OfflineResolver:
    """A resolver with no DNS at all: every name is unresolvable (as in a sandbox)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        raise Unresolvable(f"webhook host {host!r} does not resolve")


#: Hosts recognisably local without DNS: localhost spellings, other notations of IP literals,
#: and public names that answer a local address.
LOCAL_HOSTS = [
    "LOCALHOST.",
    "localhost.",
    "LocalHost",
    "api.localhost",
    "ip6-localhost",
    "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54",  # full-width "localhost"
    "2130706433",  # decimal 127.0.0.1
    "017700000001",  # octal
    "0x7f000001",  # hex
    "0x7f.1",  # inet_aton short form
    "0177.0.0.1",
    "127.1",
    "127.0.0.1.",
    "0",
    "[::ffff:127.0.0.1]",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "127.0.0.1.nip.io",
    "app.10.0.0.1.nip.io",
    "app-192-168-0-1.sslip.io",
    "customer-127-0-0-1.nip.io",
    "magic-a9fea9fe.nip.io",  # hex 169.254.169.254
    "--1.sslip.io",  # ::1
    "10.0.0.1.xip.io.",
    "localtest.me",
    "www.LOCALTEST.ME",
    "lvh.me",
]


@pytest.mark.parametrize("host", LOCAL_HOSTS)
async def test_check_url__recognisably_local_hosts_are_refused_without_dns(host: str) -> None:
    with pytest.raises(BlockedAddress, match="SSRF") as caught:
        await check_url(f"http://{host}:8080/hook", DENY, OfflineResolver())
    assert not isinstance(caught.value, Unresolvable)
    with pytest.raises(BlockedAddress, match="SSRF"):
        check_literal_url(f"http://{host}:8080/hook", DENY)


def test_known_addresses__spell_the_address_a_resolver_would_answer() -> None:
    assert known_addresses("2130706433") == (["127.0.0.1"], False)
    assert known_addresses("0x7f.1") == (["127.0.0.1"], False)
    assert known_addresses("8.8.8.8.nip.io") == (["8.8.8.8"], False)
    assert known_addresses("2a01-4f8-c17-b8f--2.sslip.io") == (["2a01:4f8:c17:b8f::2"], False)
    assert known_addresses("LOCALHOST.") == (["127.0.0.1", "::1"], True)
    huge = "1" * 5000  # more digits than int() converts
    for only_dns_can_tell in (
        "example.com",
        "nip.io",
        "app.nip.io",
        "256.1.1.1",
        "1.2.3.4.5",
        huge,
    ):
        assert known_addresses(only_dns_can_tell) is None, only_dns_can_tell


async def test_check_url__public_names_are_still_resolved_and_checked() -> None:
    # a wildcard-DNS name spelling a public address passes the spelling, then DNS decides
    resolver = ScriptedResolver({"8.8.8.8.nip.io": [["8.8.8.8"]], "app.nip.io": [["10.0.0.1"]]})
    assert await check_url("https://8.8.8.8.nip.io/", DENY, resolver) == ["8.8.8.8"]
    with pytest.raises(BlockedAddress, match=r"10\.0\.0\.1"):
        await check_url("https://app.nip.io/", DENY, resolver)
    with pytest.raises(Unresolvable):
        await check_url("https://8.8.8.8.nip.io/", DENY, OfflineResolver())


async def test_check_url__the_allow_list_admits_local_names_too() -> None:
    loopback = AddressPolicy.from_cidrs(["127.0.0.0/8"])
    resolver = ScriptedResolver(
        {"localhost.": [["127.0.0.1"]], "127.0.0.1.nip.io": [["127.0.0.1"]]}
    )
    assert await check_url("http://localhost.:8080/", loopback, resolver) == ["127.0.0.1"]
    assert await check_url("http://127.0.0.1.nip.io/", loopback, resolver) == ["127.0.0.1"]
    assert await check_url("http://2130706433/", loopback, OfflineResolver()) == ["127.0.0.1"]
    check_literal_url("http://LOCALHOST./", loopback)
    with pytest.raises(BlockedAddress):
        check_literal_url("http://10.0.0.1.nip.io/", loopback)
