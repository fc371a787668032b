"""`make bench`: run the benchmark suites against the local Postgres and Redis.

python -m bench [--only workflows,waits,publish,queues,webhooks]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform

from ripple.platform.logs import configure_logging

SUITES = ["workflows", "waits", "publish", "queues", "webhooks"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    args = parser.parse_args()
    configure_logging(level="warning")
    print(
        f"# ripple bench on {platform.node()}: {os.cpu_count()} cores, python "
        f"{platform.python_version()}",
        flush=True,
    )
    for name in args.only.split(","):
        module = importlib.import_module(f"bench.{name.strip()}")
        asyncio.run(module.run())


if __name__ == "__main__":
    main()
