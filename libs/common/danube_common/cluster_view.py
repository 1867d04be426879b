"""A local cache of brokers and topic ownership, fed by one etcd watch.

Read once (list), then follow the watch from the revision of that read, so the cache never
misses a change; on a compacted watch it re-lists. Readers get eventually-consistent
answers; anything that must be exact (placement, ownership changes) goes through
transactions in :mod:`resources`, never through this cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from danube_common.errors import DanubeError
from danube_common.metadata.store import WatchCompacted, WatchEvent
from danube_common.resources import BrokerRecord, Ownership, Resources

log = logging.getLogger(__name__)


class ClusterView:
    def __init__(self, resources: Resources) -> None:
        self._res = resources
        self._keys = resources.keys
        self.brokers: dict[str, BrokerRecord] = {}
        self.owners: dict[str, Ownership] = {}
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.revision = 0

    async def start(self) -> None:
        rev = await self._load()
        self._task = asyncio.create_task(self._follow(rev + 1), name="cluster-view")

    async def _load(self) -> int:
        brokers = await self._res.list_brokers()
        owners, rev = await self._res.list_owners()
        self.brokers = {b.broker_id: b for b in brokers}
        self.owners = owners
        self.revision = rev
        return rev

    async def _follow(self, start: int) -> None:
        """Apply events forever; re-list after compaction; retry (with backoff) on failures.

        Returns only when the store's watch ends normally (the store was closed).
        """
        backoff_s = 0.1
        while True:
            try:
                async for ev in self._res.store.watch_prefix(self._keys.root, start_revision=start):
                    self._apply(ev)
                    start = ev.revision + 1
                    backoff_s = 0.1
                return
            except WatchCompacted:
                log.warning("cluster view watch compacted; re-reading brokers and owners")
            except DanubeError as exc:
                log.warning("cluster view watch failed (%s); retrying in %.1fs", exc, backoff_s)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
            try:
                start = await self._load() + 1
            except DanubeError as exc:
                log.warning("cluster view could not re-read the cluster (%s); retrying", exc)

    def _apply(self, ev: WatchEvent) -> None:
        self.revision = ev.revision
        brokers_prefix = self._keys.brokers_prefix()
        if ev.key.startswith(brokers_prefix) and "/" not in ev.key[len(brokers_prefix) :]:
            broker_id = ev.key[len(brokers_prefix) :]
            if ev.kind == "put":
                self.brokers[broker_id] = BrokerRecord.from_json(ev.json())
            else:
                self.brokers.pop(broker_id, None)
            self._changed.set()
            return
        topic = self._keys.parse_owner(ev.key)
        if topic is not None:
            if ev.kind == "put":
                self.owners[str(topic)] = Ownership(str(topic), ev.json()["broker_id"], ev.revision)
            else:
                self.owners.pop(str(topic), None)
            self._changed.set()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The watch loop, for supervisors: it only ends by failing."""
        return self._task

    def owner_url(self, topic: str) -> str | None:
        """Advertised URL of the topic's owner, if the owner is known and registered."""
        own = self.owners.get(topic)
        if own is None:
            return None
        broker = self.brokers.get(own.broker_id)
        return broker.advertised_url if broker else None

    async def wait_changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
