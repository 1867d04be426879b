"""Cluster membership: the broker's leased registration, and the watch on its assignments.

- Registration: ``/{cluster}/brokers/{id}`` = BrokerRecord, attached to a lease kept alive by
  :class:`KeptLease` (in the broker, from a thread of its own: see ``app.py``). It is created
  only if absent: if a previous run with the same id left
  its key behind (killed without revoking), we wait for that lease to expire (at most one
  TTL) rather than take over the key from what might be a live process.
- Assignments: ``/{cluster}/assignments/{id}/...`` listed once, then watched from the list's
  revision + 1, so no change is missed; puts load topics, deletes unload them. The epoch of
  an assignment is its key's mod_revision, which is the owner key's (one transaction writes both).
  An assignment that carries a ``traceparent`` (the load manager's decision, or the previous
  owner's hand-over) makes the topic's load, or its hand-over, a span of that trace.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import NoReturn

from danube_broker.handoff import TopicMover
from danube_broker.metrics import BrokerEvents
from danube_broker.registry import BrokerRegistry
from danube_common.errors import MetadataUnavailable
from danube_common.metadata.lease import KeepaliveClientFactory, KeptLease
from danube_common.metadata.store import WatchCompacted
from danube_common.observability import tracing
from danube_common.observability.record_context import traceparent_of
from danube_common.ownership import LogClose
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: How often a start-up that found a stale registration checks whether it has expired.
_STALE_POLL_S = 0.25


def _moving_to(value: object) -> str:
    return str(value.get("moving_to") or "") if isinstance(value, dict) else ""


def _moved_from(value: object) -> str:
    """The broker a topic was handed over from (an assignment written by a hand-over), or ""."""
    return str(value.get("moved_from") or "") if isinstance(value, dict) else ""


class Membership:
    def __init__(
        self,
        resources: Resources,
        registry: BrokerRegistry,
        *,
        registration_ttl_s: int,
        stale_wait_s: float | None = None,
        ack_margin_s: float = 0.0,
        keepalive_client: KeepaliveClientFactory | None = None,
    ) -> None:
        """``keepalive_client``: renew the registration from a thread of its own, through the
        client this makes there (see :class:`KeptLease`); None: from this event loop."""
        self._res = resources
        self._store = resources.store
        self._keys = resources.keys
        self._registry = registry
        self._ttl_s = registration_ttl_s
        self._ack_margin_s = ack_margin_s
        self._keepalive_client = keepalive_client
        #: How long start-up waits for a previous registration of our id to expire.
        self._stale_wait_s = registration_ttl_s + 2.0 if stale_wait_s is None else stale_wait_s
        self.lease: KeptLease | None = None
        self.record: BrokerRecord | None = None
        #: Carries out moves the load manager marks on our assignments (None: moves are ignored).
        self.mover: TopicMover | None = None
        #: Told of topics moved here (metrics; None: nobody).
        self.events: BrokerEvents | None = None

    @property
    def broker_id(self) -> str:
        return self._registry.broker_id

    async def register(self, record: BrokerRecord) -> KeptLease:
        """Create our registration on a fresh lease; return the lease (watch ``lease.lost``)."""
        lease = KeptLease(
            self._store,
            self._ttl_s,
            name=f"broker {self.broker_id} registration",
            margin_s=self._ack_margin_s,
            keepalive_client=self._keepalive_client,
        )
        await lease.start()
        try:
            await self._create_registration(record, lease.lease_id)
        except BaseException:
            await lease.aclose(revoke=True)
            raise
        self.lease = lease
        self.record = record
        log.info(
            "registered as broker %s (%s), lease %x (renewed every %.1fs from %s)",
            self.broker_id,
            record.advertised_url,
            lease.lease_id,
            lease.timing.interval_s,
            f"thread {lease.thread.name!r}" if lease.thread is not None else "the event loop",
        )
        return lease

    async def _create_registration(self, record: BrokerRecord, lease_id: int) -> None:
        key = self._keys.broker(self.broker_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stale_wait_s
        warned = False
        while not await self._store.create(key, record.to_json(), lease=lease_id):
            if loop.time() > deadline:
                raise MetadataUnavailable(
                    f"broker id {self.broker_id} is registered by another live process ({key} did not expire "
                    f"within the {self._ttl_s}s registration TTL); give this broker another --broker-id"
                )
            if not warned:
                warned = True
                log.warning(
                    "broker id %s is still registered (a previous run?); waiting up to %ds for its lease to expire",
                    self.broker_id,
                    self._ttl_s,
                )
            await asyncio.sleep(_STALE_POLL_S)

    async def mark_draining(self) -> None:
        """Say ``state=draining`` in our registration, so lookups place no new topics here."""
        lease, record = self.lease, self.record
        if lease is None or record is None or lease.lost.is_set():
            return
        draining = replace(record, state="draining")
        await self._store.put(self._keys.broker(self.broker_id), draining.to_json(), lease=lease.lease_id)
        self.record = draining

    async def load_assignments(self) -> int:
        """List our assignments and hand them to the registry; return the listing's revision."""
        kvs, revision = await self._store.get_prefix(self._keys.broker_assignments_prefix(self.broker_id))
        assigned: dict[str, tuple[TopicName, int]] = {}
        for kv in kvs:
            parsed = self._keys.parse_assignment(kv.key)
            if parsed is None or parsed[0] != self.broker_id:
                continue
            value = kv.json()
            moving_to = _moving_to(value)
            if moving_to and self.mover is not None:
                marked = Ownership(str(parsed[1]), self.broker_id, kv.mod_revision, moving_to)
                if str(parsed[1]) in self._registry.topics:
                    self.mover.on_move(parsed[1], marked, traceparent=traceparent_of(value))
                else:  # marked while we were away (a restart): we hold nothing of it yet, so keep it
                    await self.mover.abandon_at_start(parsed[1], marked)
                continue
            assigned[str(parsed[1])] = (parsed[1], kv.mod_revision)
        self._registry.sync_assignments(assigned, revision)
        return revision

    async def follow_assignments(self, start_revision: int) -> NoReturn:
        """Apply assignment changes forever (re-listing after a compaction)."""
        prefix = self._keys.broker_assignments_prefix(self.broker_id)
        start = start_revision
        while True:
            try:
                async for ev in self._store.watch_prefix(prefix, start_revision=start):
                    start = ev.revision + 1
                    parsed = self._keys.parse_assignment(ev.key)
                    if parsed is None or parsed[0] != self.broker_id:
                        continue
                    if ev.kind == "put":
                        value = ev.json()
                        moving_to = _moving_to(value)
                        # The writer's trace (a load manager's decision, the old owner's hand-over).
                        tp = traceparent_of(value) if tracing.ENABLED else ""
                        if moving_to and self.mover is not None:
                            self.mover.on_move(
                                parsed[1],
                                Ownership(str(parsed[1]), self.broker_id, ev.revision, moving_to),
                                traceparent=tp,
                            )
                        else:
                            if self.events is not None and _moved_from(value):
                                self.events.moved("in", "handed_over")
                            self._registry.on_assigned(parsed[1], ev.revision, traceparent=tp)
                    else:
                        self._registry.on_unassigned(parsed[1], ev.revision)
            except WatchCompacted:
                log.warning(
                    "assignment watch compacted; re-reading the assignments of broker %s", self.broker_id
                )
                start = await self.load_assignments() + 1
                continue
            raise MetadataUnavailable(f"the assignment watch on {prefix} ended unexpectedly")

    async def release_all(self, held: list[Ownership], closes: dict[str, LogClose] | None = None) -> None:
        """Give up every topic we own, fenced by epoch (peers can take them over at once).

        ``held`` are the loaded topics; ``closes`` the reliable ones' log closes (recording where
        each log ends, in the release's transaction, so the next owner continues from there).
        Assignments made to us but never loaded (e.g. during shutdown) are found by listing our
        prefix.
        """
        ends = closes or {}
        released = 0
        seen: set[str] = set()
        for own in held:
            seen.add(own.topic)
            released += await self._release(own, ends.get(own.topic))
        kvs, _ = await self._store.get_prefix(self._keys.broker_assignments_prefix(self.broker_id))
        for kv in kvs:
            parsed = self._keys.parse_assignment(kv.key)
            if parsed is not None and str(parsed[1]) not in seen:
                released += await self._release(Ownership(str(parsed[1]), self.broker_id, kv.mod_revision))
        log.info("released ownership of %d topic(s)", released)

    async def _release(self, own: Ownership, close: LogClose | None = None) -> int:
        if await self._res.release(own, close=close):
            return 1
        log.warning("topic %s: not released (ownership changed since epoch %d)", own.topic, own.epoch)
        return 0
