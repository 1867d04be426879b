"""Where topics go: the one path every new or orphaned topic takes (producer and consumer
lookups, partitions, the admin API's create).

While a load manager leads (services/load_manager), placement is its job: a new topic gets a
placement request (``/unassigned/{topic}``) and the caller waits until the load manager has
assigned it (it scores brokers by load, :mod:`danube_common.load_score`); a dead owner's topics
are left for it to re-place. Without one, :mod:`danube_common.fallback_placement` places the
topic here (least topics, race-free transactions). Either way a topic being handed over
between brokers (``moving_to``) is answered once the move is over, so clients go straight to
the new owner. The move protocol itself lives in :mod:`ownership` (``mark_moving``, ``hand_over``,
``abort_move``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence

from danube_common.cluster_view import ClusterView
from danube_common.errors import NoBrokerAvailable, TopicNotFound
from danube_common.fallback_placement import place_new_topic, take_over_dead_owner
from danube_common.observability import record_context
from danube_common.records import BrokerRecord, Ownership, now_ms
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


#: The role whose holder places topics (see services/load_manager).
LOAD_MANAGER_ROLE = "load-manager"


class Resolver:
    """Answers "which live broker owns this topic?", placing or taking the topic over as needed
    (see the module docstring), and places the topics the admin API creates.

    Reads go to the watch-fed :class:`ClusterView` first; any doubt (not cached, owner not
    registered in the cache) is settled against etcd, and every change is a transaction.
    Waits are bounded by ``wait_s``. Placing without a load manager balances on the view's
    topic counts plus the placements this resolver made that the view has not applied yet
    (:func:`effective_counts`), instead of a read of every assignment per placement (O(topics)
    each: creating ~6,000 topics hit the etcd deadline). Another lookup's placement reaches the
    counts with the watch's delay (milliseconds), as it would miss a read made at the same time.
    """

    def __init__(
        self,
        resources: Resources,
        view: ClusterView,
        *,
        auto_create_topics: bool = True,
        max_attempts: int = 3,
        wait_s: float = 15.0,
    ) -> None:
        self._res = resources
        self._view = view
        self._auto_create = auto_create_topics
        self._max_attempts = max_attempts
        self._wait_s = wait_s
        #: Owners found (``cached``: in the view; ``resolved``: settled against etcd) and
        #: topics placed (``requested`` of the load manager; ``placed`` here), for metrics.
        self.counts: dict[str, int] = {"cached": 0, "resolved": 0, "requested": 0, "placed": 0}
        #: Ownerships this resolver wrote or read back from a placement (topic -> (broker,
        #: revision)), kept until the view has applied that revision.
        self._pending: dict[str, tuple[str, int]] = {}

    async def resolve(self, topic: TopicName) -> tuple[str, str]:
        """(broker_id, advertised_url) of the topic's live owner."""
        broker = await self.resolve_broker(topic)
        return broker.broker_id, broker.advertised_url

    async def resolve_broker(self, topic: TopicName) -> BrokerRecord:
        """The registration of the topic's live owner (for services that call it:
        :attr:`BrokerRecord.service_addr`)."""
        name = str(topic)
        cached = self._view.owners.get(name)
        if cached is not None and not cached.moving_to:
            broker = self._view.brokers.get(cached.broker_id)
            if broker is not None:
                self.counts["cached"] += 1
                return broker
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        attempts = 0
        while True:
            own = await self._res.get_owner(topic)
            managed = self._view.has_leader(LOAD_MANAGER_ROLE)
            if own is None:
                if managed:
                    await self._request_placement(topic)
                    await self._wait(deadline, lambda: name in self._view.owners)
                    if loop.time() < deadline:
                        continue
                    raise NoBrokerAvailable(
                        f"topic {topic} was not placed within {self._wait_s:g}s: the load manager is "
                        "busy or changing leader, or no broker is active; retry shortly"
                    )
                own = await self._place(topic)
            epoch = own.epoch
            if own.moving_to:
                if await self._wait(deadline, functools.partial(self._settled, name, epoch)):
                    continue
                raise NoBrokerAvailable(
                    f"topic {topic} is still moving from broker {own.broker_id} to {own.moving_to}; retry shortly"
                )
            broker = await self._res.get_broker(own.broker_id)
            if broker is None and managed:
                if await self._wait(deadline, functools.partial(self._settled, name, epoch)):
                    continue
                raise NoBrokerAvailable(
                    f"topic {topic} is owned by broker {own.broker_id}, which is gone; the load manager "
                    "has not re-placed it yet; retry shortly"
                )
            if broker is None:
                own = await take_over_dead_owner(self._res, topic, own, counts=self._topic_counts)
                self._note(own)
                broker = await self._res.get_broker(own.broker_id)
            if broker is not None:
                self.counts["resolved"] += 1
                return broker
            attempts += 1
            if attempts >= self._max_attempts:
                raise NoBrokerAvailable(
                    f"no live owner found for topic {topic} (brokers are changing); retry shortly"
                )

    async def place(self, topics: Sequence[TopicName], *, wait_s: float | None = None) -> list[TopicName]:
        """Place topics just created (all partitions of a topic at once). Returns those still
        unplaced: no active broker, or the load manager did not place them within ``wait_s``
        (default: the resolver's; their requests stay: it places them when it can, and a lookup
        waits for that)."""
        if self._view.has_leader(LOAD_MANAGER_ROLE):
            for t in topics:
                await self._request(t)
            names = {str(t) for t in topics}
            await self._wait(
                asyncio.get_running_loop().time() + (self._wait_s if wait_s is None else wait_s),
                lambda: all(n in self._view.owners for n in names),
            )
            return [t for t in topics if str(t) not in self._view.owners]
        unplaced = []
        for t in topics:  # one at a time: each placement sees the previous one's count
            try:
                await self._place(t)
            except NoBrokerAvailable:
                unplaced.append(t)
        return unplaced

    def _settled(self, name: str, epoch: int) -> bool:
        """The topic's ownership changed since ``epoch`` and is not mid-move."""
        own = self._view.owners.get(name)
        return own is not None and own.epoch > epoch and not own.moving_to

    async def _wait(self, deadline: float, predicate: Callable[[], bool]) -> bool:
        remaining = deadline - asyncio.get_running_loop().time()
        return remaining > 0 and await self._view.wait_for(predicate, remaining)

    async def _request_placement(self, topic: TopicName) -> None:
        await self._check_creatable(topic)
        await self._request(topic)

    async def _request(self, topic: TopicName) -> None:
        request = {
            "requested_at_ms": now_ms(),
            **record_context.current(),
        }  # the load manager's span is its child
        if await self._res.store.create(self._res.keys.unassigned(topic), request):
            self.counts["requested"] += 1
            log.info("asked the load manager to place topic %s", topic)

    async def _check_creatable(self, topic: TopicName) -> None:
        if not self._auto_create and await self._res.get_topic(topic) is None:
            raise TopicNotFound(
                f"topic {topic} does not exist and auto-creation is off; "
                f"create it with `danube-admin topics create {topic}`"
            )
        # The namespace exists and, if the topic is new, its max_topics policy has room: nothing
        # is placed (no ownership written) for a topic that could not be created.
        await self._res.check_topic_quota(topic, unless_exists=True)

    def _topic_counts(self) -> dict[str, int]:
        self._pending = {t: p for t, p in self._pending.items() if p[1] > self._view.revision}
        return effective_counts(self._view.topic_counts, self._view.owners, self._pending)

    def _note(self, own: Ownership) -> None:
        if own.epoch > self._view.revision:
            self._pending[own.topic] = (own.broker_id, own.epoch)

    async def _place(self, topic: TopicName) -> Ownership:
        await self._check_creatable(topic)
        own = await place_new_topic(self._res, topic, counts=self._topic_counts)
        self._note(own)
        self.counts["placed"] += 1
        log.info("placed topic %s on broker %s (epoch %d)", topic, own.broker_id, own.epoch)
        return own


def effective_counts(
    counted: Mapping[str, int], owners: Mapping[str, Ownership], pending: Mapping[str, tuple[str, int]]
) -> dict[str, int]:
    """Topics per broker: the view's ``counted`` (from its ``owners``), plus each ``pending``
    placement (topic -> (broker, revision)) the view does not hold yet, moved from the broker
    the view still has for it (a take-over) to the pending one."""
    out = dict(counted)
    for topic, (broker_id, _) in pending.items():
        seen = owners.get(topic)
        if seen is not None and seen.broker_id == broker_id:
            continue
        if seen is not None and out.get(seen.broker_id, 0) > 0:
            out[seen.broker_id] -= 1
        out[broker_id] = out.get(broker_id, 0) + 1
    return out
