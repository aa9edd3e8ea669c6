"""Group commit for the SQLite store: the writes waiting at the same moment share one transaction.

Every read and write is queued; while one batch runs in the connection's thread the next one
gathers.
A batch of several writes runs as ``BEGIN IMMEDIATE`` … ``COMMIT``, one thread hop and one
commit for all of them; each caller's future is resolved only after that ``COMMIT`` returned,
so a caller is never told a write happened before it is in the database (WAL: in the file's
write-ahead log, durable against a crash of the process).

Reads queued meanwhile ride in the same hop, run before the batch's transaction: they see
only committed writes (a caller that awaited its write reads it back; a caller never sees
another's write that might still be rolled back).

A write that fails on a constraint (a duplicate id) is undone by SQLite on its own, the others
in the batch go on, and only its caller gets the error. When the transaction itself is lost (a
failed ``COMMIT``, a trigger's ``RAISE(ROLLBACK)``, I/O errors), the batch is rolled back and
every write is run again alone, so each caller gets its own write's outcome.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite


@dataclass(frozen=True)
class Written:
    rowcount: int
    rows: list[sqlite3.Row]
    """What a ``RETURNING`` clause returned (empty for other statements)."""


@dataclass(frozen=True)
class _Write:
    sql: str
    params: Sequence[Any]
    many: bool
    answer: asyncio.Future[Written]


@dataclass(frozen=True)
class _Read:
    sql: str
    params: Sequence[Any]
    answer: asyncio.Future[list[sqlite3.Row]]


def _read(db: sqlite3.Connection, read: _Read) -> list[sqlite3.Row] | Exception:
    try:
        return db.execute(read.sql, read.params).fetchall()
    except Exception as exc:  # the caller's error, handed back to the caller
        return exc


def _run(db: sqlite3.Connection, write: _Write) -> Written:
    if write.many:
        cur = db.executemany(write.sql, write.params)
        return Written(cur.rowcount, [])
    cur = db.execute(write.sql, write.params)
    rows = cur.fetchall()
    return Written(cur.rowcount, rows)


def _alone(db: sqlite3.Connection, write: _Write) -> Written | Exception:
    try:
        return _run(db, write)  # autocommit: its own transaction
    except Exception as exc:  # the caller's error, handed back to the caller
        return exc


def _one_hop(db: sqlite3.Connection, reads: list[_Read], writes: list[_Write]) -> tuple[list, list]:
    return [_read(db, read) for read in reads], _one_transaction(db, writes)


def _one_transaction(db: sqlite3.Connection, writes: list[_Write]) -> list[Written | Exception]:
    if not writes:
        return []
    if len(writes) == 1:
        return [_alone(db, writes[0])]
    outcomes: list[Written | Exception] = []
    try:
        db.execute("BEGIN IMMEDIATE")
        for write in writes:
            try:
                outcomes.append(_run(db, write))
            except sqlite3.IntegrityError as exc:
                if not db.in_transaction:  # RAISE(ROLLBACK): the others' writes are gone too
                    raise
                outcomes.append(exc)  # only this statement was undone
        db.execute("COMMIT")
        return outcomes
    except Exception:
        if db.in_transaction:
            db.execute("ROLLBACK")
        return [_alone(db, write) for write in writes]


class BatchedConnection:
    def __init__(self, conn: aiosqlite.Connection, max_batch: int = 256) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._reads: list[_Read] = []
        self._writes: list[_Write] = []
        self._draining: asyncio.Task[None] | None = None

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        answer: asyncio.Future[list[sqlite3.Row]] = self._wake().create_future()
        self._reads.append(_Read(sql, params, answer))
        return await answer

    async def write(self, sql: str, params: Sequence[Any] = ()) -> Written:
        return await self._write(sql, params, many=False)

    async def write_many(self, sql: str, params: Sequence[Sequence[Any]]) -> Written:
        return await self._write(sql, params, many=True)

    async def _write(self, sql: str, params: Sequence[Any], many: bool) -> Written:
        answer: asyncio.Future[Written] = self._wake().create_future()
        self._writes.append(_Write(sql, params, many, answer))
        return await answer

    def _wake(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._draining is None:
            self._draining = loop.create_task(self._drain())
        return loop

    async def _drain(self) -> None:
        try:
            while self._reads or self._writes:
                reads, self._reads = self._reads, []
                writes = self._writes[: self._max_batch]
                del self._writes[: self._max_batch]
                try:
                    # aiosqlite runs the function in its thread, in order with the other calls
                    read_outcomes, write_outcomes = await self._conn._execute(
                        _one_hop, self._conn._conn, reads, writes)
                except Exception as exc:  # the connection is closed or broken
                    read_outcomes, write_outcomes = [exc] * len(reads), [exc] * len(writes)
                _answer(reads, read_outcomes)
                _answer(writes, write_outcomes)
        finally:
            self._draining = None
            for waiting in (*self._reads, *self._writes):  # only when this task was cancelled
                waiting.answer.cancel()
            self._reads.clear()
            self._writes.clear()


def _answer(calls: Sequence[_Read | _Write], outcomes: Sequence[Any]) -> None:
    for call, outcome in zip(calls, outcomes, strict=True):
        if call.answer.done():  # the caller was cancelled
            continue
        if isinstance(outcome, Exception):
            call.answer.set_exception(outcome)
        else:
            call.answer.set_result(outcome)
