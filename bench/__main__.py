"""`make bench`: run the benchmark suites against the local Postgres and Redis.

python -m bench [--only workflows,waits,publish,queues,dead_letters,webhooks,flow,fairness,rest,
                        cloudevents,operations,verify,cli]

The search suite seeds 1M runs and 10M events first (minutes): `python -m bench --only search`
(`make bench-search`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform
import time

from ripple.platform.core.logs import configure_logging

SUITES = [
    "workflows",
    "waits",
    "publish",
    "queues",
    "dead_letters",
    "webhooks",
    "flow",
    "fairness",
    "rest",
    "cloudevents",
    "operations",
    "verify",
    "cli",
]
#: Suites whose module is named differently from the suite.
MODULES = {"cli": "cli_startup"}


def cpu_calibration() -> str:
    """How fast this machine runs Python right now: the best of three 1M-iteration loops.

    On a shared VM this moves by tens of percent within seconds (other tenants), and every
    figure below moves with it; printed before and after the suites to tell such runs apart.
    """
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i
        best = min(best, time.perf_counter() - started)
    return f"{best * 1000:.0f} ms per 1M-iteration Python loop (lower is faster)"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    args = parser.parse_args()
    configure_logging(level="warning")
    print(
        f"# ripple bench on {platform.node()}: {os.cpu_count()} cores, python "
        f"{platform.python_version()}; cpu {cpu_calibration()}",
        flush=True,
    )
    for name in args.only.split(","):
        name = name.strip()
        module = importlib.import_module(f"bench.{MODULES.get(name, name)}")
        asyncio.run(module.run())
    print(f"# cpu after the suites: {cpu_calibration()}", flush=True)


if __name__ == "__main__":
    main()
