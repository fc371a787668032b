"""The aiohttp resolver that guards webhook connections: what it hands the connector."""

from __future__ import annotations

import socket

import pytest

from ripple.subscribers.webhooks.ssrf import AddressPolicy, BlockedAddress, Unresolvable
from ripple.subscribers.webhooks.transport import GuardedResolver


class Answers:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls = 0

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return self.answers[host]


async def test_guarded_resolver__hands_only_checked_addresses_once() -> None:
    answers = Answers({"hooks.example": ["93.184.216.34", "2606:2800:220:1::1"]})
    resolver = GuardedResolver(AddressPolicy(), answers)
    results = await resolver.resolve("hooks.example", 443, socket.AF_UNSPEC)
    assert [(r["host"], r["family"], r["port"]) for r in results] == [
        ("93.184.216.34", socket.AF_INET, 443),
        ("2606:2800:220:1::1", socket.AF_INET6, 443),
    ]
    assert all(r["hostname"] == "hooks.example" for r in results)
    assert all(r["flags"] == socket.AI_NUMERICHOST for r in results)
    v4 = await resolver.resolve("hooks.example", 443, socket.AF_INET)
    assert [r["host"] for r in v4] == ["93.184.216.34"]
    assert answers.calls == 2


async def test_guarded_resolver__refuses_when_any_answer_is_refused() -> None:
    answers = Answers({"mixed.example": ["93.184.216.34", "169.254.169.254"], "none.example": []})
    resolver = GuardedResolver(AddressPolicy(), answers)
    with pytest.raises(BlockedAddress, match="cloud metadata"):
        await resolver.resolve("mixed.example", 80, socket.AF_UNSPEC)
    with pytest.raises(Unresolvable):
        await resolver.resolve("none.example", 80, socket.AF_UNSPEC)


async def test_guarded_resolver__allow_list_admits_networks() -> None:
    answers = Answers({"local.example": ["127.0.0.1"]})
    allowed = GuardedResolver(AddressPolicy.from_cidrs(["127.0.0.0/8"]), answers)
    assert [r["host"] for r in await allowed.resolve("local.example", 80)] == ["127.0.0.1"]
    with pytest.raises(BlockedAddress, match="loopback"):
        await GuardedResolver(AddressPolicy(), answers).resolve("local.example", 80)
