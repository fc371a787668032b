"""tests/e2e/test_cli.py through PgBouncer: every CLI command, locally and through the API."""

from tests.e2e.test_cli import *  # noqa: F403
