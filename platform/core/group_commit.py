"""`GroupCommit`: many concurrent writers, few transactions.

Callers submit requests and wait for their own outcome. When no batch is in flight a request
goes at once (no added latency on an idle process); while one is, the requests that arrive
meanwhile gather and go together in the next batch, as Postgres's own group commit and
Kafka's linger do: the busier the process, the larger the batches and the cheaper each
request. There is no timer. A writer may allow several batches in flight (`flushers`); a
second one starts only once `spill` requests wait, so a busy process is not split into many
small transactions whose fixed cost (round trips, BEGIN and COMMIT) it pays in CPU.

A batch the writer refuses as a whole (any exception) is retried one request at a time, so
one bad request fails alone; an outage (`Unavailable`) fails the batch at once (retrying each
request would only wait out the outage again). A caller that is canceled while it waits
cancels only its own wait, never the batch.

A caller's `timeout` (its `RIPPLE_DB_TIMEOUT`, see `deadlines`) holds whatever the batch
ahead of it does: at the deadline it gets `Unavailable`. A request that timed out before a
batch took it is never written; one already in a batch in flight may still commit, and its
caller finds that outcome by retrying with the same idempotency key.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ripple.platform.core.deadlines import timed_out
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import RippleError, Unavailable

__all__ = ["GroupCommit"]

log = get_logger("ripple.group_commit")

Req = TypeVar("Req")
Res = TypeVar("Res")


@dataclass(slots=True)
class _Waiting(Generic[Req, Res]):
    request: Req
    done: asyncio.Future[Res] = field(repr=False)
    #: When the caller's timeout passes (loop time), if it has one.
    expires: float = 0.0
    #: The caller's timeout passed before the request was written.
    expired: bool = False


class GroupCommit(Generic[Req, Res]):
    """Coalesces concurrent requests into batches written by `write`.

    `write(batch)` writes a batch (in one transaction, typically one statement) and returns
    one outcome per request, in order: a result, or an exception for that request alone. If
    it raises, the whole batch failed: see the module docstring for what happens next.
    """

    def __init__(
        self,
        write: Callable[[list[Req]], Awaitable[Sequence[Res | BaseException]]],
        *,
        name: str,
        max_batch: int = 500,
        flushers: int = 1,
        spill: int = 1,
        refused_event: str = "group_commit_refused",
    ) -> None:
        self._write = write
        self.name = name
        #: The log event of a batch refused as a whole (then retried request by request).
        self.refused_event = refused_event
        self.max_batch = max_batch
        self.flushers = flushers
        #: Waiting requests that start another batch while one is in flight (up to `flushers`).
        self.spill = spill
        self._queue: list[_Waiting[Req, Res]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Requests with a timeout, in submit order, and the one timer that expires them: a
        #: timer per request would cost starts and publishes more than the rest of `submit`.
        self._watched: deque[_Waiting[Req, Res]] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        #: Batches written and requests in them (metrics and tests).
        self.batches = 0
        self.written = 0

    async def submit(self, request: Req, *, timeout: float | None = None) -> Res:
        """Write `request` with the next batch and return its outcome (or raise its error);
        with `timeout`, raise `Unavailable` once that many seconds passed (see the module
        docstring for what becomes of the request)."""
        loop = asyncio.get_running_loop()
        waiting: _Waiting[Req, Res] = _Waiting(request, loop.create_future())
        self._queue.append(waiting)
        running = len(self._tasks)
        if not running or (running < self.flushers and len(self._queue) >= self.spill):
            self._tasks.add(loop.create_task(self._drain(), name=self.name))
        if timeout is not None:
            waiting.expires = loop.time() + timeout
            self._watch(waiting, loop)
        return await waiting.done

    def _watch(self, waiting: _Waiting[Req, Res], loop: asyncio.AbstractEventLoop) -> None:
        watched = self._watched
        while watched and watched[0].done.done():  # settled: most leave in submit order
            watched.popleft()
        watched.append(waiting)
        watchdog = self._watchdog
        if watchdog is None or waiting.expires < watchdog.when():
            if watchdog is not None:
                watchdog.cancel()
            self._watchdog = loop.call_at(waiting.expires, self._expire_due, loop)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer the callers whose timeout passed; wake again at the next one's."""
        self._watchdog = None
        now = loop.time()
        left: deque[_Waiting[Req, Res]] = deque()
        for waiting in self._watched:
            if waiting.done.done():
                continue
            if waiting.expires <= now:
                _expire(waiting)
            else:
                left.append(waiting)
        self._watched = left
        if left:
            self._watchdog = loop.call_at(min(w.expires for w in left), self._expire_due, loop)

    async def _drain(self) -> None:
        me = asyncio.current_task()
        try:
            while self._queue:
                # A request that timed out waiting is dropped: its caller was told to retry.
                batch = [w for w in self._queue[: self.max_batch] if not w.expired]
                del self._queue[: self.max_batch]
                if batch:
                    await self._commit(batch)
        except BaseException:
            if not self._tasks - {me}:
                left, self._queue = self._queue, []
                for waiting in left:
                    _settle(waiting, Unavailable(f"{self.name} was interrupted; retry"))
            raise
        finally:
            # Synchronously: a request queued after the loop saw an empty queue must find
            # this task gone and start another (a done-callback would run a step too late).
            self._tasks.discard(me)

    async def _commit(self, batch: list[_Waiting[Req, Res]]) -> None:
        try:
            outcomes = await self._write([w.request for w in batch])
        except Unavailable as exc:
            for waiting in batch:
                _settle(waiting, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            log.warning(self.refused_event, name=self.name, size=len(batch), error=str(exc))
            for waiting in batch:
                await self._commit([waiting])
            return
        except BaseException as exc:  # canceled: every waiter must hear how the batch ended
            for waiting in batch:
                _settle(waiting, RippleError(f"{self.name} was interrupted ({exc!r}); retry"))
            raise
        self.batches += 1
        self.written += len(batch)
        for waiting, outcome in zip(batch, outcomes, strict=True):
            _settle(waiting, outcome)


def _expire(waiting: _Waiting[Req, Res]) -> None:
    if not waiting.done.done():
        waiting.expired = True
        waiting.done.set_exception(timed_out())


def _settle(waiting: _Waiting[Req, Res], outcome: Res | BaseException) -> None:
    if waiting.done.done():
        return
    if isinstance(outcome, BaseException):
        waiting.done.set_exception(outcome)
    else:
        waiting.done.set_result(outcome)
