"""Publish with fan-out, queues and the subscriber kinds through PgBouncer."""

from tests.integration.platform.test_publish import *  # noqa: F403
from tests.integration.platform.test_queues import *  # noqa: F403
from tests.integration.subscribers.test_queue_target import *  # noqa: F403
from tests.integration.subscribers.test_workflow_target import *  # noqa: F403
