"""A local cache of brokers and topic ownership, fed by one etcd watch.

Read once (list), then follow the watch from the revision of that read, so the cache never
misses a change; on a compacted watch it re-lists. Readers get eventually-consistent
answers; anything that must be exact (placement, ownership changes) goes through
transactions (:mod:`ownership`, :mod:`fallback_placement`), never through this cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.store import KeyValue, WatchEvent
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources


class ClusterView(WatchedCache):
    def __init__(self, resources: Resources) -> None:
        super().__init__(resources.store, resources.keys.root, what="cluster view")
        self._keys = resources.keys
        self.brokers: dict[str, BrokerRecord] = {}
        self.owners: dict[str, Ownership] = {}
        #: broker_id -> topics it owns (kept with ``owners``, so no reader has to count them).
        self.topic_counts: dict[str, int] = {}
        self._changed_event = asyncio.Event()
        #: Election keys (``/leaders/{role}/{candidate}``) -> create_revision: who campaigns.
        self.election_keys: dict[str, int] = {}

    def _listed_prefixes(self) -> Sequence[str]:
        k = self._keys
        return (k.brokers_prefix(), k.owners_prefix(), k.leaders_prefix())

    def _reset(self) -> None:
        self.brokers, self.owners, self.election_keys, self.topic_counts = {}, {}, {}, {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        k = self._keys
        if key.startswith(k.leaders_prefix()):
            self.election_keys[key] = item.create_revision or revision
            return
        if (broker_id := self._broker_id(key)) is not None:
            self.brokers[broker_id] = BrokerRecord.from_json(item.json())
            self._changed_event.set()
            return
        topic = k.parse_owner(key)
        if topic is not None:
            own = Ownership.of(str(topic), item.json(), revision)
            self._uncount(self.owners.get(own.topic))
            self.owners[own.topic] = own
            self.topic_counts[own.broker_id] = self.topic_counts.get(own.broker_id, 0) + 1
            self._changed_event.set()

    def _delete(self, key: str) -> None:
        k = self._keys
        if key.startswith(k.leaders_prefix()):
            self.election_keys.pop(key, None)
            return
        if (broker_id := self._broker_id(key)) is not None:
            self.brokers.pop(broker_id, None)
            self._changed_event.set()
            return
        topic = k.parse_owner(key)
        if topic is not None:
            self._uncount(self.owners.pop(str(topic), None))
            self._changed_event.set()

    def _uncount(self, own: Ownership | None) -> None:
        if own is None:
            return
        left = self.topic_counts.get(own.broker_id, 0) - 1
        if left > 0:
            self.topic_counts[own.broker_id] = left
        else:
            self.topic_counts.pop(own.broker_id, None)

    def _broker_id(self, key: str) -> str | None:
        """``/{cluster}/brokers/{id}`` -> id (None for any other key, deeper ones included)."""
        prefix = self._keys.brokers_prefix()
        if key.startswith(prefix) and "/" not in key[len(prefix) :]:
            return key[len(prefix) :]
        return None

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

    async def wait_changed(self) -> None:
        """Until a broker or an owner changed (since the last call)."""
        await self._changed_event.wait()
        self._changed_event.clear()
