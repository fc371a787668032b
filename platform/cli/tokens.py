"""API token commands: the `ripple tokens` group (create, list, revoke)."""

from __future__ import annotations

from typing import Annotated

import typer

from ripple.platform.cli.groups import tokens_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import Remote, duration_arg, operator_command
from ripple.platform.cli.output import emit, out, print_json, short_time, table

__all__ = ["tokens_create", "tokens_list", "tokens_revoke"]


@operator_command(tokens_app.command("create"))
def tokens_create(
    remote: Remote,
    name: Annotated[str, typer.Argument(help="A name for the token (shown in audit rows).")],
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope",
            help="Repeat for each: admin, read, operate, publish:<pattern>, start:<workflow>, "
            "signal:<workflow>, queue:<name>.",
        ),
    ],
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Lifetime, e.g. 90d (default: none).")
    ] = None,
    rate_limit: Annotated[
        int | None, typer.Option("--rate-limit", help="Requests allowed per --per seconds.")
    ] = None,
    per: Annotated[float, typer.Option("--per", help="Rate-limit period in seconds.")] = 1.0,
) -> None:
    """Create a token and print its secret (shown this once; only a hash is stored)."""
    body: dict[str, object] = {"name": name, "scopes": scope}
    if expires_in is not None:
        body["expiresIn"] = duration_arg(expires_in, "--expires-in").total_seconds()
    if rate_limit is not None:
        body["rateLimit"] = {"limit": rate_limit, "perSeconds": per}
    result = operate(remote, lambda op: op.token_create(body))
    emit(
        remote.as_json,
        result,
        lambda r: (
            f"token {r['id']} ({r['name']}: {', '.join(r['scopes'])})\n"
            f"secret: {r['secret']}\nstore it now: it is not shown again"
        ),
    )


@operator_command(tokens_app.command("list"))
def tokens_list(remote: Remote) -> None:
    """List tokens (never their secrets)."""
    result = operate(remote, lambda op: op.tokens(), writes=False)
    if remote.as_json:
        print_json(result)
        return
    rows = [
        [
            t["id"],
            t["name"],
            " ".join(t["scopes"]),
            "active" if t["active"] else ("revoked" if t.get("revokedAt") else "expired"),
            short_time(t.get("expiresAt"))[:19],
            short_time(t.get("lastUsedAt"))[:19],
        ]
        for t in result
    ]
    table("tokens", ["id", "name", "scopes", "state", "expires", "last used"], rows)


@operator_command(tokens_app.command("revoke"))
def tokens_revoke(
    remote: Remote, token_id: Annotated[str, typer.Argument(help="The token's id.")]
) -> None:
    """Revoke a token: every API process refuses it within a second."""
    result = operate(remote, lambda op: op.token_revoke(token_id))
    if remote.as_json:
        print_json(result)
        return
    state = "revoked" if result["revoked"] else "was not active (revoked or expired already)"
    out().print(f"token {token_id} {state}")
