"""`WorkflowClient`: the workflow part of `Client`, one of each part built once over one pool
and waker — `registry` (definitions), `starts`, `reads`, `signals` and `cancels`. Each call is
one transaction; wake hints go out after commit.
"""

from __future__ import annotations

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.contracts.validation import Contracts
from ripple.workflows import store
from ripple.workflows.runs.approvals import Approvals
from ripple.workflows.runs.cancels import Cancels
from ripple.workflows.runs.reads import Reads
from ripple.workflows.runs.registry import Registry
from ripple.workflows.runs.signals import Signals
from ripple.workflows.runs.starts import Starts

__all__ = ["WorkflowClient"]


class WorkflowClient:
    """Start, inspect, cancel and signal workflow runs.

    The parts' methods are bound here once, so a call through the client is the part's own
    call (no extra frame on the start path); code needing one responsibility takes the part.
    """

    def __init__(
        self,
        pool: Pool,
        waker: NullWaker,
        settings: Settings,
        *,
        read_pool: Pool | None = None,
        contracts: Contracts | None = None,
    ) -> None:
        self.pool = pool
        #: Topic schemas that `signal_matching` payloads and event waits' matches must fit.
        self.contracts = contracts
        self.waker = waker
        self.settings = settings
        self.registry = Registry(pool)
        self.starts = Starts(pool, waker, settings, self.registry)
        self.reads = Reads(pool, settings, read_pool=read_pool)
        self.signals = Signals(pool, waker, settings, contracts)
        self.cancels = Cancels(pool, waker, settings)
        #: Approvals of runs: `list`, `get`, `decide`.
        self.approvals = Approvals(pool, waker, settings)
        #: Where run listings read (a replica's pool with RIPPLE_DATABASE_READ_URL).
        self.read_pool = self.reads.read_pool
        #: The workflow store's side of the retention and statistics ports (the sweeper,
        #: the gauges and the API reach the workflow tables through it).
        self.upkeep = store.RunUpkeep()
        #: Counts what starts in a caller's transaction create once that transaction commits.
        self.commit_watch = self.starts.commit_watch

        self.definitions = self.registry.definitions
        self.register = self.registry.register
        self.sync_definitions = self.registry.sync_definitions
        self.resolve = self.registry.resolve

        self.start = self.starts.start
        self.create_runs = self.starts.create_runs
        self.prepare_input = self.starts.prepare_input
        self.notify_runs_ready = self.starts.notify_runs_ready
        self.handle = self.starts.handle

        self.get_run = self.reads.get_run
        self.is_active = self.reads.is_active
        self.list_steps = self.reads.list_steps
        self.list_runs = self.reads.list_runs

        self.cancel = self.cancels.cancel

        self.signal = self.signals.signal
        self.signal_matching = self.signals.signal_matching
        self.resolve_event_waits = self.signals.resolve_event_waits
        self.matching_wait_runs = self.signals.matching_wait_runs

    @property
    def start_batches(self) -> int:
        """Transactions this client's group-committed starts have used so far."""
        return self.starts.start_batches
