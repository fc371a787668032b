"""Which HTTP methods a path allows, as the OpenAPI documents them: `OPTIONS` answers and 405s.

The allowed methods of a request path are those of the documented path template that matches
it most specifically (most literal segments: `/v1/runs/cancel` before `/v1/runs/{run_id}`), plus
HEAD where GET is documented, plus OPTIONS. `OPTIONS` is answered 204 with `Allow`; any other
undocumented method is answered 405 with `Allow` before routing (left to itself, routing would
hand `GET /v1/runs/cancel` to the run route as a run named "cancel"). Paths the OpenAPI does not
document (the dashboard, /docs) pass through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ripple.platform.api.problems import problem_response

__all__ = ["AllowedMethods", "PathMethods"]

_PARAM = re.compile(r"\{[^/{}]+\}")


@dataclass(frozen=True, slots=True)
class _Template:
    regex: re.Pattern[str]
    literal_segments: int
    methods: frozenset[str]


class PathMethods:
    """The documented methods of each OpenAPI path template, looked up by request path."""

    def __init__(self, paths: dict[str, dict[str, Any]]) -> None:
        self._templates: list[_Template] = []
        for template, item in paths.items():
            methods = {m.upper() for m in item}
            if "GET" in methods:
                methods.add("HEAD")
            pattern = "".join(
                "[^/]+" if _PARAM.fullmatch(part) else re.escape(part)
                for part in re.split(r"(\{[^/{}]+\})", template)
                if part
            )
            literal = sum(1 for s in template.split("/") if s and not _PARAM.search(s))
            self._templates.append(_Template(re.compile(pattern), literal, frozenset(methods)))

    def allowed(self, path: str) -> list[str]:
        """The methods allowed on `path` (sorted, with OPTIONS); empty if undocumented."""
        matches = [t for t in self._templates if t.regex.fullmatch(path)]
        if not matches:
            return []
        best = max(t.literal_segments for t in matches)
        methods: set[str] = {"OPTIONS"}
        for template in matches:
            if template.literal_segments == best:
                methods |= template.methods
        return sorted(methods)


class AllowedMethods:
    """ASGI middleware: 204 + `Allow` for `OPTIONS`, 405 + `Allow` for undocumented methods."""

    def __init__(self, app: ASGIApp, paths: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.app = app
        self._paths = paths
        self._methods: PathMethods | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._methods is None:
            self._methods = PathMethods(self._paths())
        allowed = self._methods.allowed(scope["path"])
        method = scope["method"]
        if not allowed or (method in allowed and method != "OPTIONS"):
            await self.app(scope, receive, send)
            return
        allow = {"Allow": ", ".join(allowed)}
        if method == "OPTIONS":
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [(b"allow", allow["Allow"].encode())],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        response = problem_response(
            405,
            f"{method} is not allowed on {scope['path']}; allowed: {allow['Allow']}",
            instance=scope["path"],
            headers=allow,
        )
        await response(scope, receive, send)
