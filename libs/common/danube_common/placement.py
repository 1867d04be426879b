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

import logging

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
    return Ownership(str(topic), current.json()["broker_id"], current.mod_revision)


class Resolver:
    """Answers "which live broker owns this topic?", placing or taking the topic over as needed.

    Reads go to the watch-fed :class:`ClusterView` first; any doubt (not cached, owner not
    registered in the cache) is settled against etcd, and every change is a transaction.
    """

    def __init__(
        self,
        resources: Resources,
        view: ClusterView,
        *,
        auto_create_topics: bool = True,
        max_attempts: int = 3,
    ) -> None:
        self._res = resources
        self._view = view
        self._auto_create = auto_create_topics
        self._max_attempts = max_attempts

    async def resolve(self, topic: TopicName) -> tuple[str, str]:
        """(broker_id, advertised_url) of the topic's live owner."""
        cached = self._view.owners.get(str(topic))
        if cached is not None:
            broker = self._view.brokers.get(cached.broker_id)
            if broker is not None:
                return cached.broker_id, broker.advertised_url
        for _ in range(self._max_attempts):
            own = await self._res.get_owner(topic)
            if own is None:
                own = await self._place(topic)
            broker = await self._res.get_broker(own.broker_id)
            if broker is None:
                own = await take_over_dead_owner(self._res, topic, own)
                broker = await self._res.get_broker(own.broker_id)
            if broker is not None:
                return own.broker_id, broker.advertised_url
        raise NoBrokerAvailable(
            f"no live owner found for topic {topic} (brokers are changing); retry shortly"
        )

    async def _place(self, topic: TopicName) -> Ownership:
        if not self._auto_create and await self._res.get_topic(topic) is None:
            raise TopicNotFound(
                f"topic {topic} does not exist and auto-creation is off; "
                f"create it with `danube-admin topics create {topic}`"
            )
        await self._res.require_namespace(topic.namespace)
        own = await self._res.place_new_topic(topic)
        log.info("placed topic %s on broker %s (epoch %d)", topic, own.broker_id, own.epoch)
        return own
