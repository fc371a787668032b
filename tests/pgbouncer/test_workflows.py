"""Workflow runs, waits and durability through PgBouncer (claims, group commit, leases)."""

from tests.integration.workflows.test_durability import *  # noqa: F403
from tests.integration.workflows.test_engine_basic import *  # noqa: F403
from tests.integration.workflows.test_waits import *  # noqa: F403
