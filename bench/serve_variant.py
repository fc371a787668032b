"""`ripple serve` with another HTTP parser or event loop, for bench/rest_variants.py.

python -m bench.serve_variant HTTP LOOP serve [ripple serve options]: HTTP is uvicorn's
parser (`h11`, `httptools`: uvicorn's own protocols) or `ripple` (the product's bounded httptools
protocol), LOOP `uvloop` or `asyncio`. Everything else is the product's.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from ripple.platform.processes import server


def main() -> None:
    http, loop, *args = sys.argv[1:]
    config_init = uvicorn.Config.__init__

    def init(self: uvicorn.Config, *a: Any, **kw: Any) -> None:
        config_init(self, *a, **{**kw, "http": http})

    if http != "ripple":
        uvicorn.Config.__init__ = init  # type: ignore[method-assign]
    if loop == "asyncio":
        server._loop_factory = lambda: None
    from ripple.platform.cli import main as ripple

    sys.argv = ["ripple", *args]
    ripple()


if __name__ == "__main__":
    main()
