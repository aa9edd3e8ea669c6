"""Group commit for the PostgreSQL store's task creations: those waiting at the same moment
share one statement.

A blocking send writes its task once (``create_task``), and each INSERT was one round trip
and one commit of its own; a round trip to the server costs the gateway more CPU than the
rest of the write (the socket write alone, loopback included, was the largest item of its
profile). Creations queued while one statement runs go out together as the next one: a single
``INSERT … SELECT … FROM unnest(…) ON CONFLICT DO NOTHING RETURNING id``, one round trip and
one commit for all of them. One statement is one transaction: every row of it is committed,
or none is.

Each caller is answered only after that statement returned, so no caller is told its task
exists before it is committed. A row whose id exists already is not inserted and only its
caller gets ``ConflictError``; any other failure of the statement (a value the server refuses,
a lost connection) reruns each creation alone, so each caller gets its own write's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from a2a_gateway.stores.base import ConflictError
from a2a_gateway.stores.usage_rows import USAGE_COLUMNS


@dataclass(frozen=True, slots=True)
class NewTask:
    """One row of ``tasks`` to insert (version 1), in the columns' order of ``INSERT_MANY``."""

    tenant: str
    endpoint_id: str
    principal: str
    id: str
    context_id: str
    state: int
    status_us: int
    task: bytes
    run_ref: str | None
    run_state: Any
    owner: str | None
    lease_until: float | None
    usage: tuple[Any, ...] = (None,) * len(USAGE_COLUMNS)
    """The ledger's columns (``usage_values``): NULLs unless the task is created ended."""

    def values(self) -> tuple[Any, ...]:
        return (*(getattr(self, name) for name in self.__slots__[:-1]), *self.usage)


_USAGE_ARRAYS = (
    "$13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::int[], $18::bigint[],"
    " $19::bigint[], $20::bigint[], $21::bigint[], $22::bigint[], $23::text[]"
)
"""The ledger's columns (``USAGE_COLUMNS``) as arrays."""

INSERT_MANY = (
    "INSERT INTO tasks (tenant, endpoint_id, principal, id, context_id, state, status_us, version,"
    f" task, run_ref, run_state, owner, lease_until, {', '.join(USAGE_COLUMNS)})"
    " SELECT tenant, endpoint_id, principal, id, context_id, state, status_us, 1,"
    f" task, run_ref, run_state, owner, lease_until, {', '.join(USAGE_COLUMNS)}"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::smallint[],"
    f" $7::bigint[], $8::bytea[], $9::text[], $10::jsonb[], $11::text[], $12::float8[],"
    f" {_USAGE_ARRAYS})"
    " AS t(tenant, endpoint_id, principal, id, context_id, state, status_us, task, run_ref,"
    f" run_state, owner, lease_until, {', '.join(USAGE_COLUMNS)})"
    " ON CONFLICT DO NOTHING RETURNING id"
)
"""Inserts every row it is given but those whose id (or scoped id) exists; returns the ids
inserted."""


def columns(rows: Sequence[NewTask]) -> list[list[Any]]:
    """The rows as ``INSERT_MANY``'s arrays (one per column)."""
    return [list(column) for column in zip(*(row.values() for row in rows), strict=True)]


@dataclass(frozen=True, slots=True)
class _Waiting:
    row: NewTask
    answer: asyncio.Future[None]


class TaskCreations:
    """The queue of task creations of one store and the task that sends them."""

    def __init__(
        self,
        insert_many: Callable[[Sequence[NewTask]], Awaitable[set[str]]],
        insert_one: Callable[[NewTask], Awaitable[None]],
        max_batch: int = 256,
    ) -> None:
        self._insert_many = insert_many
        """Inserts the rows in one statement; the ids it inserted."""
        self._insert_one = insert_one
        """Inserts one row alone (``ConflictError`` if its id exists)."""
        self._max_batch = max_batch
        self._queue: list[_Waiting] = []
        self._draining: asyncio.Task[None] | None = None

    async def create(self, row: NewTask) -> None:
        """Returns once ``row`` is committed; ``ConflictError`` if its id exists."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[None] = loop.create_future()
        self._queue.append(_Waiting(row, answer))
        if self._draining is None:
            self._draining = loop.create_task(self._drain(), name="postgres-task-creations")
        await answer

    async def _drain(self) -> None:
        batch: list[_Waiting] = []
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                if len(batch) == 1:
                    await self._alone(batch[0])
                else:
                    await self._together(batch)
        finally:
            self._draining = None
            for waiting in (*batch, *self._queue):  # unanswered only when this task was cancelled
                waiting.answer.cancel()
            self._queue.clear()

    async def _together(self, batch: list[_Waiting]) -> None:
        try:
            inserted = await self._insert_many([w.row for w in batch])
        except Exception:
            for waiting in batch:
                await self._alone(waiting)
            return
        for waiting in batch:
            if waiting.row.id in inserted:
                inserted.discard(
                    waiting.row.id
                )  # a second row of the same id in the batch conflicts
                _answer(waiting, None)
            else:
                _answer(waiting, ConflictError(f"task {waiting.row.id} exists"))

    async def _alone(self, waiting: _Waiting) -> None:
        try:
            await self._insert_one(waiting.row)
        except Exception as exc:  # the caller's error, handed back to the caller
            _answer(waiting, exc)
        else:
            _answer(waiting, None)


def _answer(waiting: _Waiting, outcome: Exception | None) -> None:
    if waiting.answer.done():  # the caller was cancelled
        return
    if outcome is None:
        waiting.answer.set_result(None)
    else:
        waiting.answer.set_exception(outcome)
