from __future__ import annotations

import pytest

from ripple.platform.core.config import load_settings
from ripple.platform.errors import ConfigError


def test_config__defaults_are_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIPPLE_DATABASE_URL", raising=False)
    settings = load_settings()
    assert settings.poll_interval == 1.0
    assert settings.lease_seconds == 30.0
    assert settings.api_tokens == []


def test_config__csv_lists_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIPPLE_API_TOKENS", "a, b,,c")
    monkeypatch.setenv("RIPPLE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    settings = load_settings()
    assert settings.api_tokens == ["a", "b", "c"]
    assert settings.webhook_allowed_networks == ["127.0.0.0/8", "::1/128"]


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("RIPPLE_POLL_INTERVAL", "soon", "RIPPLE_POLL_INTERVAL"),
        ("RIPPLE_POLL_INTERVAL", "-1", "greater than 0"),
        ("RIPPLE_DATABASE_URL", "mysql://x", "postgresql://"),
        ("RIPPLE_REDIS_URL", "http://x", "redis://"),
        ("RIPPLE_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8,nope", "CIDR"),
        ("RIPPLE_LOG_LEVEL", "loud", "debug, info"),
    ],
)
def test_config__bad_value_names_variable_and_accepted_values(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert var in str(info.value)
    assert expected in str(info.value)
