"""Where topics go: the broker choice, and the fenced take-over of a dead owner's topics.

The choice (:func:`pick_broker`) is a pure function of the registered brokers and their topic
counts. Applying it is always an etcd transaction, never get-then-put:

- a new topic is placed by ``Resources.place_new_topic`` (``create_revision == 0`` on the
  owner key, so two lookups placing the same topic agree on one owner);
- a topic whose owner is no longer registered (its lease expired: the broker died) is moved
  by :func:`take_over_dead_owner`, fenced on the owner key's ``mod_revision`` (the epoch we
  read) **and** on the dead broker still being unregistered. Two lookups racing on the same
  topic, or a broker that comes back in between, make the transaction fail harmlessly; the
  loser reads the winner's ownership.

Until the load manager exists, Discovery (served by the lookup service and by every broker) is
what notices dead owners, lazily, at the next TopicLookup.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from danube_common.cluster_view import ClusterView
from danube_common.errors import NoBrokerAvailable, TopicNotFound
from danube_common.metadata.store import Compare, Op
from danube_common.resources import Ownership, Resources, now_ms, pick_broker
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


async def take_over_dead_owner(res: Resources, topic: TopicName, dead: Ownership) -> Ownership:
    """Move ``topic`` off its unregistered owner ``dead`` onto the least-loaded active broker.

    One transaction, applied only if the owner key still has ``mod_revision == dead.epoch``
    and ``dead.broker_id`` is still unregistered: it writes the new owner key and the new
    broker's assignment key and deletes the dead broker's assignment key. The new epoch is
    the transaction's revision, so it always grows. Returns the ownership in force afterwards:
    ours, or whatever a concurrent writer left (the caller re-checks that it is alive).
    """
    keys = res.keys
    target = pick_broker(await res.list_brokers(), await res.topic_counts(), exclude={dead.broker_id})
    if target is None:
        raise NoBrokerAvailable(
            f"topic {topic} was owned by broker {dead.broker_id}, which is gone, and no active "
            "broker is registered to take it over; start a broker and retry"
        )
    owner_key = keys.owner(topic)
    ts = now_ms()
    result = await res.store.txn(
        [Compare.mod_revision_is(owner_key, dead.epoch), Compare.absent(keys.broker(dead.broker_id))],
        [
            Op.put(owner_key, {"broker_id": target.broker_id, "assigned_at_ms": ts}),
            Op.put(keys.assignment(target.broker_id, topic), {"assigned_at_ms": ts}),
            Op.delete(keys.assignment(dead.broker_id, topic)),
            Op.delete(keys.unassigned(topic)),
        ],
        [Op.get(owner_key)],
    )
    if result.succeeded:
        log.warning(
            "topic %s: owner broker %s is gone; re-placed on broker %s (epoch %d -> %d)",
            topic,
            dead.broker_id,
            target.broker_id,
            dead.epoch,
            result.revision,
        )
        return Ownership(str(topic), target.broker_id, result.revision)
    current = result.gets[0]
    if current is None:  # released or deleted meanwhile: place it like a new topic
        return await res.place_new_topic(topic)
    return Ownership.of(str(topic), current.json(), current.mod_revision)


#: The role whose holder places topics (see services/load_manager).
LOAD_MANAGER_ROLE = "load-manager"


class Resolver:
    """Answers "which live broker owns this topic?", placing or taking the topic over as needed.

    Reads go to the watch-fed :class:`ClusterView` first; any doubt (not cached, owner not
    registered in the cache) is settled against etcd, and every change is a transaction.

    When a load manager campaigns for its role, placement is its job: a new topic gets a
    placement request (``/unassigned/{topic}``) and the answer waits until the load manager has
    assigned it; a dead owner's topics are left for it to re-place. Without one (a single
    broker, tests), placement happens here. Either way, a topic being handed over between
    brokers (``moving_to``) is answered once the move is over, so clients go straight to the
    new owner. Waits are bounded by ``wait_s``.
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

    async def resolve(self, topic: TopicName) -> tuple[str, str]:
        """(broker_id, advertised_url) of the topic's live owner."""
        name = str(topic)
        cached = self._view.owners.get(name)
        if cached is not None and not cached.moving_to:
            broker = self._view.brokers.get(cached.broker_id)
            if broker is not None:
                return cached.broker_id, broker.advertised_url
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
                own = await take_over_dead_owner(self._res, topic, own)
                broker = await self._res.get_broker(own.broker_id)
            if broker is not None:
                return own.broker_id, broker.advertised_url
            attempts += 1
            if attempts >= self._max_attempts:
                raise NoBrokerAvailable(
                    f"no live owner found for topic {topic} (brokers are changing); retry shortly"
                )

    def _settled(self, name: str, epoch: int) -> bool:
        """The topic's ownership changed since ``epoch`` and is not mid-move."""
        own = self._view.owners.get(name)
        return own is not None and own.epoch > epoch and not own.moving_to

    async def _wait(self, deadline: float, predicate: Callable[[], bool]) -> bool:
        remaining = deadline - asyncio.get_running_loop().time()
        return remaining > 0 and await self._view.wait_for(predicate, remaining)

    async def _request_placement(self, topic: TopicName) -> None:
        await self._check_creatable(topic)
        if await self._res.store.create(self._res.keys.unassigned(topic), {"requested_at_ms": now_ms()}):
            log.info("asked the load manager to place topic %s", topic)

    async def _check_creatable(self, topic: TopicName) -> None:
        if not self._auto_create and await self._res.get_topic(topic) is None:
            raise TopicNotFound(
                f"topic {topic} does not exist and auto-creation is off; "
                f"create it with `danube-admin topics create {topic}`"
            )
        await self._res.require_namespace(topic.namespace)

    async def _place(self, topic: TopicName) -> Ownership:
        await self._check_creatable(topic)
        own = await self._res.place_new_topic(topic)
        log.info("placed topic %s on broker %s (epoch %d)", topic, own.broker_id, own.epoch)
        return own
