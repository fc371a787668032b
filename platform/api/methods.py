"""Which HTTP methods a path allows, as the OpenAPI documents them: `OPTIONS` answers and 405s.

The allowed methods of a request path are those of the documented path template that matches
it most specifically (most literal segments: `/v1/runs/cancel` before `/v1/runs/{run_id}`), plus
HEAD where GET is documented, plus OPTIONS. `OPTIONS` is answered 204 with `Allow`; any other
undocumented method is answered 405 with `Allow` (left to itself, routing would hand
`GET /v1/runs/cancel` to the run route as a run named "cancel" and answer 404). Paths the
OpenAPI does not document (the dashboard, /docs) pass through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
    """ASGI middleware: 204 + `Allow` for `OPTIONS`, 405 + `Allow` for undocumented methods.

    Requests pass through first, and only an error answer (or `OPTIONS`) is looked at: a
    request with a documented method never pays for the lookup (nor for building the OpenAPI
    document it needs, which the CLI's in-process app would otherwise build on every command).
    An undocumented method reaches at most a less specific route, whose error answer (a run
    named "cancel" is not found) is then replaced by the 405.
    """

    def __init__(self, app: ASGIApp, paths: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.app = app
        self._paths = paths
        self._methods: PathMethods | None = None

    def _allowed(self, path: str) -> list[str]:
        if self._methods is None:
            self._methods = PathMethods(self._paths())
        return self._methods.allowed(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        replaced = False

        async def answer(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the app's body of the answer that was replaced
            if message["type"] == "http.response.start" and (
                method == "OPTIONS" or message["status"] >= 400
            ):
                allowed = self._allowed(scope["path"])
                if allowed and (method == "OPTIONS" or method not in allowed):
                    replaced = True
                    await self._refuse(scope, receive, send, method, allowed)
                    return
            await send(message)

        await self.app(scope, receive, answer)

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, method: str, allowed: list[str]
    ) -> None:
        allow = ", ".join(allowed)
        if method == "OPTIONS":
            start = {
                "type": "http.response.start",
                "status": 204,
                "headers": [(b"allow", allow.encode())],
            }
            await send(start)
            await send({"type": "http.response.body", "body": b""})
            return
        response = problem_response(
            405,
            f"{method} is not allowed on {scope['path']}; allowed: {allow}",
            instance=scope["path"],
            headers={"Allow": allow},
        )
        await response(scope, receive, send)
