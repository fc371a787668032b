"""tests/e2e/test_api.py through PgBouncer: `ripple serve` and `ripple worker` processes."""

from tests.e2e.test_api import *  # noqa: F403
