"""Group commit on the SQLite store: concurrent writes share transactions, each caller is
answered only after its write committed, and one failing write does not fail the others.

Commits are counted in the write-ahead log itself: every committed transaction ends with one
WAL frame whose "database size after commit" field is not zero.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import struct
import uuid
from pathlib import Path

import httpx
import pytest
from a2a.types import Task, TaskState, TaskStatus

from a2a_gateway.stores.base import ConflictError, Scope
from a2a_gateway.stores.sqlite import SQLiteStore
from tests.support.cli_process import serving

SCOPE = Scope("default", "ep-1", "alice")
WRITES = 50


def wal_commits(db_path: Path) -> int:
    """Committed transactions in the current WAL (frames of this WAL generation, by salt)."""
    data = (db_path.parent / (db_path.name + "-wal")).read_bytes()
    if len(data) < 32:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(data):
        header = data[offset : offset + 24]
        if header[8:16] != salts:
            break
        if struct.unpack(">I", header[4:8])[0] != 0:
            commits += 1
        offset += 24 + page_size
    return commits


def new_task(task_id: str | None = None) -> Task:
    return Task(id=task_id or str(uuid.uuid4()), context_id="ctx",
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))


def committed_ids(db_path: Path) -> set[str]:
    """The task ids another connection sees: what is committed, nothing in flight."""
    with sqlite3.connect(db_path) as other:
        return {row[0] for row in other.execute("SELECT id FROM tasks")}


@pytest.fixture
async def opened(tmp_path: Path):
    path = tmp_path / "store.db"
    store = await SQLiteStore.open(str(path))
    try:
        yield store, path
    finally:
        await store.aclose()


async def test_concurrent_writes_are_committed_in_fewer_transactions_than_writes(opened):
    store, path = opened
    before = wal_commits(path)
    tasks = [new_task() for _ in range(WRITES)]
    versions = await asyncio.gather(*(store.create_task(SCOPE, t) for t in tasks))
    assert versions == [1] * WRITES
    creates = wal_commits(path) - before
    assert 1 <= creates < WRITES / 5, creates

    updated = [
        Task(id=t.id, context_id="ctx", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
        for t in tasks
    ]
    versions = await asyncio.gather(
        *(store.update_task(SCOPE, t, expected_version=1) for t in updated)
    )
    assert versions == [2] * WRITES
    assert 1 <= wal_commits(path) - before - creates < WRITES / 5
    for task in tasks:  # read-your-writes
        stored = await store.get_task(SCOPE, task.id)
        assert stored is not None and stored.version == 2
        assert stored.task.status.state == TaskState.TASK_STATE_WORKING


async def test_every_caller_is_answered_after_its_write_is_committed(opened):
    store, path = opened
    tasks = [new_task() for _ in range(WRITES)]

    async def create_then_look(task: Task) -> bool:
        await store.create_task(SCOPE, task)
        return task.id in committed_ids(path)

    assert all(await asyncio.gather(*(create_then_look(t) for t in tasks)))


async def test_a_conflicting_write_fails_alone_and_its_group_still_commits_once(opened):
    store, path = opened
    taken = new_task()
    await store.create_task(SCOPE, taken)
    before = wal_commits(path)
    others = [new_task() for _ in range(10)]
    results = await asyncio.gather(
        *(store.create_task(SCOPE, t) for t in others[:5]),
        store.create_task(SCOPE, new_task(taken.id)),
        store.update_task(SCOPE, new_task(taken.id), expected_version=7),
        *(store.create_task(SCOPE, t) for t in others[5:]),
        return_exceptions=True,
    )
    assert [type(r) for r in results[5:7]] == [ConflictError, ConflictError]
    assert results[:5] + results[7:] == [1] * 10
    assert committed_ids(path) == {taken.id, *(t.id for t in others)}
    assert wal_commits(path) - before == 1
    assert (await store.get_task(SCOPE, taken.id)).version == 1  # type: ignore[union-attr]


async def test_a_write_that_rolls_back_the_whole_transaction_fails_only_its_caller(opened):
    store, path = opened
    with sqlite3.connect(path) as admin:  # a write that takes the transaction down with it
        admin.execute("CREATE TRIGGER refuse BEFORE INSERT ON tasks WHEN NEW.id = 'refused'"
                      " BEGIN SELECT RAISE(ROLLBACK, 'refused by trigger'); END")
    others = [new_task() for _ in range(10)]
    results = await asyncio.gather(
        *(store.create_task(SCOPE, t) for t in others[:5]),
        store.create_task(SCOPE, new_task("refused")),
        *(store.create_task(SCOPE, t) for t in others[5:]),
        return_exceptions=True,
    )
    assert isinstance(results[5], ConflictError)
    assert results[:5] + results[6:] == [1] * 10
    assert committed_ids(path) == {t.id for t in others}


ENDPOINT_ID = "00000000-0000-4000-8000-00000000c0de"
ENDPOINTS = f"""endpoints:
  - id: {ENDPOINT_ID}
    name: echo
    handler: handlers.echo:EchoHandler
    public: true
    settings: {{delay: 0}}
"""


def send(n: int) -> dict:
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": f"burst {n}"}]}}}


async def test_every_task_answered_before_a_kill_9_is_in_the_file(tmp_path: Path):
    db = tmp_path / "gateway.db"
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(ENDPOINTS)
    process: list[asyncio.subprocess.Process] = []
    answered: set[str] = set()
    async with serving("serve", "--store", f"sqlite:///{db}", "--endpoints", str(endpoints),
                       process=process) as listening:
        url = f"{listening.group(1)}/{ENDPOINT_ID}/a2a"
        async with httpx.AsyncClient(timeout=60, headers={"A2A-Version": "1.0"}) as client:
            replies = await asyncio.gather(*(client.post(url, json=send(n)) for n in range(64)))
        process[0].send_signal(
            signal.SIGKILL
        )  # no shutdown, no checkpoint: only what was committed
        await process[0].wait()
        for reply in replies:
            assert reply.status_code == 200, reply.text
            task = reply.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            answered.add(task["id"])
    assert len(answered) == 64
    with sqlite3.connect(db) as after:
        states = dict(after.execute("SELECT id, state FROM tasks").fetchall())
    assert answered <= states.keys()
    assert {states[i] for i in answered} == {int(TaskState.TASK_STATE_COMPLETED)}
