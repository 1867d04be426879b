"""Placement when **no load manager leads**: a cluster run without one (a single broker, tests),
or the moments before the first load manager is elected. While one leads, placement is its job
(:mod:`danube_common.placement` asks it and waits); this module is used only otherwise.

The rule is deliberately simple: the active broker with the fewest topics (ties: smallest id),
no load reports. By default the counts are read from etcd (one range read of every assignment:
O(topics) per placement); a caller with a watch-fed cache passes its counts instead
(:class:`danube_common.placement.Resolver` does, so placing a topic costs the same with 10 or
10,000 topics). Counts only balance the spread, and a read of etcd is already stale when two
lookups place at once; correctness is the transactions'. Applying the choice is always an etcd
transaction, never get-then-put:

- a new topic is placed with ``create_revision == 0`` on the owner key
  (``Resources.assign_if_unowned``), so two lookups placing the same topic agree on one owner;
- a topic whose owner is no longer registered (its lease expired: the broker died) is moved by
  :func:`take_over_dead_owner`, fenced on the owner key's ``mod_revision`` (the epoch read)
  **and** on the dead broker still being unregistered. Two lookups racing on the same topic,
  or a broker that comes back in between, make the transaction fail harmlessly; the loser
  reads the winner's ownership.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from danube_common.errors import NoBrokerAvailable
from danube_common.metadata.store import Compare, Op
from danube_common.records import BrokerRecord, Ownership, now_ms
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


def pick_broker(
    brokers: Iterable[BrokerRecord], topic_counts: Mapping[str, int], *, exclude: Collection[str] = ()
) -> BrokerRecord | None:
    """The active broker with the fewest topics (ties: smallest id); None if there is none."""
    candidates = [b for b in brokers if b.state == "active" and b.broker_id not in exclude]
    if not candidates:
        return None
    return min(candidates, key=lambda b: (topic_counts.get(b.broker_id, 0), b.broker_id))


#: Topics per broker, from a cache (called when the choice is made).
CountSource = Callable[[], Mapping[str, int]]


async def _candidates(
    res: Resources, counts: CountSource | None
) -> tuple[list[BrokerRecord], Mapping[str, int]]:
    brokers = await res.list_brokers()
    return brokers, (counts() if counts is not None else await res.topic_counts())


async def place_new_topic(
    res: Resources, topic: TopicName, *, counts: CountSource | None = None
) -> Ownership:
    """Place an unowned topic on the active broker with the fewest topics; return the owner in
    force afterwards (someone else's, if a concurrent placement won). ``counts``: topics per
    broker from a cache (None: read them from etcd)."""
    own = await res.get_owner(topic)
    if own is not None:
        return own
    target = pick_broker(*await _candidates(res, counts))
    if target is None:
        raise NoBrokerAvailable("no active broker is registered; start a broker and retry")
    return await res.assign_if_unowned(topic, target.broker_id)


async def take_over_dead_owner(
    res: Resources, topic: TopicName, dead: Ownership, *, counts: CountSource | None = None
) -> Ownership:
    """Move ``topic`` off its unregistered owner ``dead`` onto the active broker with the fewest topics.

    One transaction, applied only if the owner key still has ``mod_revision == dead.epoch``
    and ``dead.broker_id`` is still unregistered: it writes the new owner key and the new
    broker's assignment key and deletes the dead broker's assignment key. The new epoch is
    the transaction's revision, so it always grows. Returns the ownership in force afterwards:
    ours, or whatever a concurrent writer left (the caller re-checks that it is alive).
    ``counts`` as for :func:`place_new_topic`.
    """
    keys = res.keys
    target = pick_broker(*await _candidates(res, counts), exclude={dead.broker_id})
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
        return await place_new_topic(res, topic, counts=counts)
    return Ownership.of(str(topic), current.json(), current.mod_revision)
