"""Which replica runs a task: an owner id and a lease on the task's row.

A replica that drives a task writes itself as owner with a lease deadline and renews
the leases of all its runs in one batch per interval. A lease that runs out means the
owner is gone: another replica claims the task (a conditional write, so only one
does) and re-attaches or fails it. Releasing a lease (a deadline of now) hands the
task over at once, e.g. on shutdown.
"""

from __future__ import annotations

import time

from a2a_gateway.stores.base import ClaimedTask, Store, StoredTask


class Ownership:
    def __init__(self, store: Store, replica_id: str, lease_seconds: float) -> None:
        self._store = store
        self.replica_id = replica_id
        self.lease_seconds = lease_seconds

    def lease_deadline(self) -> float:
        return time.time() + self.lease_seconds

    def owned_elsewhere(self, stored: StoredTask) -> bool:
        """True when another replica runs the task and its lease is current."""
        return (
            stored.owner is not None
            and stored.owner != self.replica_id
            and (stored.lease_until or 0) > time.time()
        )

    async def renew(self, task_ids: list[str]) -> None:
        if task_ids:
            await self._store.renew_leases(self.replica_id, task_ids, self.lease_deadline())

    async def release(self, task_ids: list[str]) -> None:
        if task_ids:
            await self._store.renew_leases(self.replica_id, task_ids, time.time())

    async def claim_expired(self) -> list[ClaimedTask]:
        """Tasks whose owner stopped renewing, now owned by this replica."""
        return await self._store.claim_expired_tasks(
            self.replica_id, time.time(), self.lease_deadline()
        )
