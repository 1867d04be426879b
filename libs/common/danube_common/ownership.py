"""Topic ownership and the topic move protocol: every transaction that changes who owns a topic.

``/{cluster}/owners/{ns}/{topic}`` = ``{"broker_id"}`` is the single truth of who owns a topic,
and its etcd ``mod_revision`` is the ownership **epoch** (a fencing token that only grows). The
per-broker key ``/{cluster}/assignments/{broker}/{ns}/{topic}`` (value ``{"assigned_at_ms"}``) is
written in the same transaction so each broker can watch just its own prefix.

A move takes three steps, each a transaction fenced on the epoch the previous one left:

1. :meth:`OwnershipTxns.mark_moving` (the load manager): the owner key gets ``moving_to``;
2. the owner seals the topic, then :meth:`OwnershipTxns.hand_over` makes the target the owner
   (and, for a reliable topic, records where its log ends in the same transaction);
3. or, when sealing fails, :meth:`OwnershipTxns.abort_move` keeps the topic where it was.

docs/ownership.md has the whole protocol: who calls these, and what each fault does to them.

Tracing: the records written by :meth:`OwnershipTxns.assign_if_unowned`, :meth:`~OwnershipTxns.mark_moving`
and :meth:`~OwnershipTxns.hand_over` carry the ``traceparent`` of the caller's current span when it
is sampled (:mod:`danube_common.observability.record_context`), so the broker that acts on them
(loads the topic, hands it over) continues the same trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from danube_common.keys import Keys
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.observability import record_context
from danube_common.records import Ownership, now_ms
from danube_common.topic_name import TopicName

#: Extra compares and operations that close a reliable topic's log record in the same
#: transaction as a release or a hand-over (``danube_common.log_state.LogRecords.close_txn``).
LogClose = tuple[Sequence[Compare], Sequence[Op]]


class OwnershipTxns:
    """Reads and fenced writes of topic ownership (mixed into :class:`resources.Resources`)."""

    store: MetadataStore
    keys: Keys

    async def get_owner(self, topic: TopicName) -> Ownership | None:
        kv = await self.store.get(self.keys.owner(topic))
        return self._ownership(topic, kv) if kv else None

    @staticmethod
    def _ownership(topic: TopicName, kv: KeyValue) -> Ownership:
        return Ownership.of(str(topic), kv.json(), kv.mod_revision)

    async def list_owners(self) -> tuple[dict[str, Ownership], int]:
        """topic name -> ownership, and the revision of the read (to start a watch from)."""
        kvs, rev = await self.store.get_prefix(self.keys.owners_prefix())
        out: dict[str, Ownership] = {}
        for kv in kvs:
            t = self.keys.parse_owner(kv.key)
            if t is not None:
                out[str(t)] = self._ownership(t, kv)
        return out, rev

    async def topic_counts(self) -> dict[str, int]:
        """broker_id -> number of topics assigned to it."""
        kvs, _ = await self.store.get_prefix(self.keys.assignments_prefix())
        counts: dict[str, int] = {}
        for kv in kvs:
            parsed = self.keys.parse_assignment(kv.key)
            if parsed:
                counts[parsed[0]] = counts.get(parsed[0], 0) + 1
        return counts

    async def assign_if_unowned(self, topic: TopicName, broker_id: str) -> Ownership:
        """Make ``broker_id`` the owner unless someone already is; return the actual owner."""
        okey = self.keys.owner(topic)
        ctx = record_context.current()  # the lookup's (or the claiming call's) trace, if sampled
        res = await self.store.txn(
            [Compare.absent(okey)],
            [
                Op.put(okey, {"broker_id": broker_id, "assigned_at_ms": now_ms(), **ctx}),
                Op.put(self.keys.assignment(broker_id, topic), {"assigned_at_ms": now_ms(), **ctx}),
                Op.delete(self.keys.unassigned(topic)),
            ],
            [Op.get(okey)],
        )
        if res.succeeded:
            return Ownership(str(topic), broker_id, res.revision)
        kv = res.gets[0]
        if kv is None:  # released in between: try again
            return await self.assign_if_unowned(topic, broker_id)
        return self._ownership(topic, kv)

    async def release(self, own: Ownership, *, close: LogClose | None = None) -> bool:
        """Give up ownership, only if still at the same epoch (fenced). ``close``: for a reliable
        topic, the compare and put that record where its log ended (``LogRecords.close_txn``),
        so the next owner continues from there."""
        t = TopicName.parse(own.topic)
        compares, extra = close if close is not None else ([], [])
        ops = [Op.delete(self.keys.owner(t)), Op.delete(self.keys.assignment(own.broker_id, t)), *extra]
        res = await self.store.txn([Compare.mod_revision_is(self.keys.owner(t), own.epoch), *compares], ops)
        return res.succeeded

    # ------------------------------------------------------------------ topic moves
    async def mark_moving(
        self,
        own: Ownership,
        to_broker: str,
        *,
        fence: Sequence[Compare] = (),
        by: dict[str, Any] | None = None,
    ) -> Ownership | None:
        """Step 1 of a move (the load manager): tell the owner to hand ``own.topic`` to ``to_broker``.

        Applied only if the owner key is still at ``own.epoch``, ``to_broker`` is registered and
        every ``fence`` compare holds (the load manager's term). Returns the ownership at the new
        epoch (the owner's hand-over is fenced on it), or None if a condition failed.
        """
        t = TopicName.parse(own.topic)
        ts = now_ms()
        mark = {
            "moving_to": to_broker,
            "assigned_at_ms": ts,
            **({"by": by} if by else {}),
            **record_context.current(),  # the owner's hand-over span is a child of the caller's
        }
        res = await self.store.txn(
            [
                *fence,
                Compare.mod_revision_is(self.keys.owner(t), own.epoch),
                Compare.exists(self.keys.broker(to_broker)),
            ],
            [
                Op.put(self.keys.owner(t), {"broker_id": own.broker_id, **mark}),
                Op.put(self.keys.assignment(own.broker_id, t), mark),
            ],
        )
        if not res.succeeded:
            return None
        return Ownership(own.topic, own.broker_id, res.revision, to_broker)

    async def hand_over(self, own: Ownership, *, close: LogClose | None = None) -> bool:
        """Step 2 of a move (the old owner, once sealed): make ``own.moving_to`` the owner.

        Fenced on ``own.epoch`` (the epoch step 1 set). One transaction moves the owner key and
        both assignment keys and, for a reliable topic, records where its log ends (``close``:
        ``LogRecords.close_txn``'s compare and put)."""
        t = TopicName.parse(own.topic)
        ts = now_ms()
        ctx = record_context.current()  # the new owner's load span is a child of the hand-over's
        ops = [
            Op.put(
                self.keys.owner(t),
                {"broker_id": own.moving_to, "assigned_at_ms": ts, "moved_from": own.broker_id, **ctx},
            ),
            Op.delete(self.keys.assignment(own.broker_id, t)),
            Op.put(
                self.keys.assignment(own.moving_to, t),
                {"assigned_at_ms": ts, "moved_from": own.broker_id, **ctx},
            ),
        ]
        compares, extra = close if close is not None else ([], [])
        ops += extra
        res = await self.store.txn([Compare.mod_revision_is(self.keys.owner(t), own.epoch), *compares], ops)
        return res.succeeded

    async def abort_move(self, own: Ownership) -> Ownership | None:
        """The old owner could not seal in time: keep the topic (fenced on ``own.epoch``)."""
        t = TopicName.parse(own.topic)
        ts = now_ms()
        res = await self.store.txn(
            [Compare.mod_revision_is(self.keys.owner(t), own.epoch)],
            [
                Op.put(self.keys.owner(t), {"broker_id": own.broker_id, "assigned_at_ms": ts}),
                Op.put(self.keys.assignment(own.broker_id, t), {"assigned_at_ms": ts}),
            ],
        )
        return Ownership(own.topic, own.broker_id, res.revision) if res.succeeded else None
