"""`WaitExecution`: the calls that wait on time or on others: durable timers (`sleep`), event
waits (`wait_for_event`, registered with the writer) and child runs (`run_child`, started
idempotently), each with its timeout. Short timers are waited for in memory; the others block
the call until the run suspends and a later resume finds them resolved. No SQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ripple.platform.core.ids import new_id
from ripple.platform.errors import InvalidInput
from ripple.workflows import serde
from ripple.workflows.authoring.approvals import (
    APPROVAL_PREFIX,
    Approval,
    approval_url,
)
from ripple.workflows.authoring.definition import WorkflowDefinition, check_workflow_name
from ripple.workflows.authoring.retry import seconds
from ripple.workflows.errors import (
    StepTimeoutError,
    WorkflowFailed,
)
from ripple.workflows.journal import Entry, StepStatus, current_scope
from ripple.workflows.runtime.ledger import RunLedger, journal_write
from ripple.workflows.runtime.ports import ChildSpec, WaitSpec

__all__ = ["WaitExecution"]


def _as_utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


class WaitExecution(RunLedger):
    """Timers, event waits and child runs, on the run's ledger."""

    async def sleep(
        self, name: str, *, duration: timedelta | float | None = None, until: datetime | None = None
    ) -> None:
        key, seq, entry = self.allocate(name, "sleep")
        self._enter()
        try:
            if entry is not None and entry.status == StepStatus.COMPLETED:
                return
            if entry is None or entry.due_at is None:
                self._count_execution()
                now = self.clock()
                due = (
                    _as_utc(until)
                    if until is not None
                    else now + timedelta(seconds=seconds(duration or 0))
                )
                entry = Entry.begun(key, seq, "sleep", now, due_at=due)
                self.record(entry)
            assert entry.due_at is not None
            if entry.due_at > self.clock():
                await self._block("sleep", key, entry.due_at)
            self.record(entry.completed(None, self.clock()))
        finally:
            self._exit()

    async def wait_for_event(
        self,
        name: str,
        *,
        event: str | None,
        match: dict[str, Any] | None,
        timeout: timedelta | float | None,
    ) -> dict[str, Any] | None:
        if match is not None and not isinstance(match, dict):
            raise InvalidInput("wait_for_event match must be a dict (or None for any payload)")
        key, seq, entry = self.allocate(name, "wait")
        self._enter()
        try:
            if entry is not None and entry.finished:
                result: dict[str, Any] | None = entry.output
                return result
            if entry is None:
                if event is not None and match:
                    # A typo in the match would wait forever: refused before it is journaled.
                    async with journal_write():
                        await self.writer.check_match(event, match)
                self._count_execution()
                now = self.clock()
                expires = None if timeout is None else now + timedelta(seconds=seconds(timeout))
                entry = Entry.begun(key, seq, "wait", now, due_at=expires)
                self.journal.put(entry)
                async with self._flush_lock, journal_write():
                    found, payload = await self.writer.register_wait(
                        self._take(), self.step_count, WaitSpec(entry, name, event, match)
                    )
                if found:
                    self.journal.put(Entry.begun(key, seq, "wait", now).completed(payload, now))
                    resolved: dict[str, Any] | None = payload
                    return resolved
            await self._block("wait", key, entry.due_at)
            final = await self._time_out(entry, is_wait=True)
            timed_out: dict[str, Any] | None = final.output
            return timed_out
        finally:
            self._exit()

    async def wait_for_approval(
        self,
        name: str,
        *,
        approvers: list[str] | None,
        timeout: timedelta | float | None,
        details: dict[str, Any] | None,
        on_timeout: str,
    ) -> Approval:
        if on_timeout not in ("reject", "raise"):
            raise InvalidInput("on_timeout must be 'reject' or 'raise'", field="on_timeout")
        if details is not None and not isinstance(details, dict):
            raise InvalidInput("approval details must be a dict (or None)", field="details")
        names: Any = approvers
        if names is not None and (
            isinstance(names, str) or not all(isinstance(a, str) for a in names)
        ):
            raise InvalidInput("approvers must be a list of names (or None)", field="approvers")
        key, seq, entry = self.allocate(APPROVAL_PREFIX + name, "wait")
        # The approval's step: its journal key without the prefix (`refund-ok`, `refund-ok:1`
        # for a second call, `branch/scope/refund-ok` inside a race or loop).
        scope = current_scope.get()
        step = scope + key[len(scope) :].removeprefix(APPROVAL_PREFIX)
        self._enter()
        try:
            if entry is None:
                self._count_execution()
                now = self.clock()
                expires = None if timeout is None else now + timedelta(seconds=seconds(timeout))
                entry = Entry.begun(key, seq, "wait", now, due_at=expires)
                self.journal.put(entry)
                approval = {
                    "step": step,
                    "workflow": self.facts.workflow,
                    "details": serde.dump(details, field="details"),
                    "approvers": list(approvers) if approvers is not None else None,
                }
                spec = WaitSpec(entry, key, None, None, approval)
                async with self._flush_lock, journal_write():
                    found, payload = await self.writer.register_wait(
                        self._take(), self.step_count, spec
                    )
                if found:
                    self.journal.put(Entry.begun(key, seq, "wait", now).completed(payload, now))
                    return Approval.from_payload(payload)
            if not entry.finished:
                await self._block("wait", key, entry.due_at)
                entry = await self._time_out(entry, is_wait=True)
            if entry.output is not None:
                return Approval.from_payload(entry.output)
            if on_timeout == "raise":
                raise StepTimeoutError(f"approval {step!r} of run {self.run_id} timed out")
            return Approval(False, None, None, entry.due_at or self.clock())
        finally:
            self._exit()

    def approval_url(self, name: str) -> str:
        if self.approval_key is None:
            raise InvalidInput("approval links need a worker connected to the database")
        step = current_scope.get() + name
        return approval_url(self.approval_public_url, self.approval_key, self.run_id, step)

    async def _time_out(self, entry: Entry, *, is_wait: bool) -> Entry:
        async with self._flush_lock, journal_write():
            final = await self.writer.time_out(self._take(), self.step_count, entry, is_wait)
        self.journal.put(final)
        return final

    async def run_child(
        self,
        workflow: WorkflowDefinition[Any, Any] | str,
        input: Any,
        *,
        name: str | None,
        timeout: timedelta | float | None,
    ) -> Any:
        definition = workflow if isinstance(workflow, WorkflowDefinition) else None
        wf_name = definition.name if definition else check_workflow_name(str(workflow))
        if definition is None:
            definition = self.resolve(wf_name)
        key, seq, entry = self.allocate(name or wf_name, "child")
        output_type = definition.output_type if definition is not None else serde.NO_TYPE
        self._enter()
        try:
            if entry is None:
                entry = await self._start_child(key, seq, wf_name, definition, input, timeout)
            if entry.status == StepStatus.PENDING:
                await self._block("child", key, entry.due_at)
                entry = await self._time_out(entry, is_wait=False)
            if entry.status == StepStatus.FAILED:
                raise self._child_error(entry)
            try:
                return serde.load(entry.output, output_type)
            except ValidationError:
                return entry.output
        finally:
            self._exit()

    async def _start_child(
        self,
        key: str,
        seq: int,
        wf_name: str,
        definition: WorkflowDefinition[Any, Any] | None,
        input: Any,
        timeout: timedelta | float | None,
    ) -> Entry:
        self._count_execution()
        if definition is not None and definition.takes_input:
            try:
                child_input = serde.validate(input, definition.input_type)
            except ValidationError as exc:
                raise InvalidInput(f"invalid input for child workflow {wf_name}: {exc}") from exc
        else:
            child_input = serde.dump(input)
        now = self.clock()
        expires = None if timeout is None else now + timedelta(seconds=seconds(timeout))
        child_id = new_id()
        entry = Entry.begun(key, seq, "child", now, output={"runId": child_id}, due_at=expires)
        self.journal.put(entry)
        version = definition.version if definition is not None else None
        idempotency = f"{self.run_id}:{key}"
        if self.attempt > 1:
            idempotency += f":attempt-{self.attempt}"
        spec = ChildSpec(entry, child_id, wf_name, version, child_input, idempotency)
        async with self._flush_lock, journal_write():
            entry = await self.writer.start_child(self._take(), self.step_count, spec)
        self.journal.put(entry)
        return entry

    def _child_error(self, entry: Entry) -> Exception:
        error = entry.error or {}
        child_id = (entry.output or {}).get("runId", "?") if isinstance(entry.output, dict) else "?"
        if error.get("type") == "StepTimeout":
            return StepTimeoutError(str(error.get("message")))
        return WorkflowFailed(child_id, error)
