"""`RunHandle`: a started run, and waiting for its output."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from pydantic import ValidationError

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.wake import NullWaker, run_channel
from ripple.platform.errors import NotFound
from ripple.workflows import serde, store
from ripple.workflows.authoring.retry import seconds
from ripple.workflows.errors import WorkflowCanceled, WorkflowFailed
from ripple.workflows.runs.records import RunStatus

__all__ = ["RunHandle", "RunSource"]

OutT = TypeVar("OutT")


class RunSource(Protocol):
    """Where a handle reads its run and hears of its end (a `WorkflowClient` or its parts)."""

    @property
    def pool(self) -> Pool: ...
    @property
    def waker(self) -> NullWaker: ...


class RunHandle(Generic[OutT]):
    """A started run: `run_id`, and `await result()` for its output."""

    __slots__ = ("_client", "_output_type", "run_id")

    def __init__(self, client: RunSource, run_id: str, output_type: Any = serde.NO_TYPE):
        self._client = client
        self.run_id = run_id
        self._output_type = output_type

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id}>"

    async def result(self, timeout: timedelta | float | None = None) -> OutT:
        """The run's output once it completes.

        Raises WorkflowFailed (with the stored error), WorkflowCanceled, or TimeoutError
        when `timeout` passes first (the run keeps going).
        """
        limit = None if timeout is None else seconds(timeout)
        end = None if limit is None else time.monotonic() + limit
        waker = self._client.waker
        async with waker.listen(run_channel(self.run_id)) as listener:
            while True:
                with map_errors():
                    run = await store.read_run_outcome(self._client.pool, run_id=self.run_id)
                if run is None:
                    raise NotFound(f"no run {self.run_id}")
                status = run.status
                if status == RunStatus.COMPLETED:
                    try:
                        value: OutT = serde.load(run.output, self._output_type)
                    except ValidationError:
                        value = run.output
                    return value
                if status == RunStatus.FAILED:
                    raise WorkflowFailed(self.run_id, run.error)
                if status == RunStatus.CANCELED:
                    raise WorkflowCanceled(self.run_id)
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"run {self.run_id} did not finish within {limit}s")
                await listener.wait(remaining)
