"""A local cache of brokers and topic ownership, fed by one etcd watch.

Read once (list), then follow the watch from the revision of that read, so the cache never
misses a change; on a compacted watch it re-lists. Readers get eventually-consistent
answers; anything that must be exact (placement, ownership changes) goes through
transactions (:mod:`ownership`, :mod:`fallback_placement`), never through this cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from danube_common.metadata.follow import Waiters, follow
from danube_common.metadata.store import WatchEvent
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources

log = logging.getLogger(__name__)


class ClusterView:
    def __init__(self, resources: Resources) -> None:
        self._res = resources
        self._keys = resources.keys
        self.brokers: dict[str, BrokerRecord] = {}
        self.owners: dict[str, Ownership] = {}
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._waiters = Waiters()
        #: Election keys (``/leaders/{role}/{candidate}``) -> create_revision: who campaigns.
        self.election_keys: dict[str, int] = {}
        self.revision = 0

    async def start(self) -> None:
        rev = await self._load()
        self._task = asyncio.create_task(self._follow(rev + 1), name="cluster-view")

    async def _load(self) -> int:
        brokers = await self._res.list_brokers()
        owners, rev = await self._res.list_owners()
        elections, _ = await self._res.store.get_prefix(self._keys.leaders_prefix())
        self.brokers = {b.broker_id: b for b in brokers}
        self.owners = owners
        self.election_keys = {kv.key: kv.create_revision for kv in elections}
        self.revision = rev
        self._wake()
        return rev

    async def _follow(self, start: int) -> None:
        """Apply events forever (re-listing after a compaction); ends when the store closes."""
        await follow(
            self._res.store, self._keys.root, start, apply=self._apply, reload=self._load, what="cluster view"
        )

    def _apply(self, ev: WatchEvent) -> None:
        self.revision = ev.revision
        try:
            self._apply_event(ev)
        finally:
            self._wake()

    def _wake(self) -> None:
        self._waiters.wake()

    def _apply_event(self, ev: WatchEvent) -> None:
        if ev.key.startswith(self._keys.leaders_prefix()):
            if ev.kind == "put":
                self.election_keys[ev.key] = ev.create_revision or ev.revision
            else:
                self.election_keys.pop(ev.key, None)
            return
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
                self.owners[str(topic)] = Ownership.of(str(topic), ev.json(), ev.revision)
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

    def has_leader(self, role: str) -> bool:
        """Some candidate holds or campaigns for ``role`` (a hint; the election decides)."""
        prefix = self._keys.leader_candidates_prefix(role)
        return any(k.startswith(prefix) for k in self.election_keys)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds after some change of the view; False on timeout."""
        return await self._waiters.wait_for(predicate, timeout_s)

    async def wait_changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
