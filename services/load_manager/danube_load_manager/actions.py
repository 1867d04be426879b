"""Carrying out the plan: one etcd transaction per action, every one fenced by the term.

Each transaction compares the election key's create_revision with our term (the leadership
fence) **and** re-checks what the decision relied on (the owner key's epoch, the target broker
still registered, the dead broker still gone), so a stale view or a deposed load manager makes
it fail harmlessly. Owner keys written here say who wrote them (``by: {lm, term}``): the
history of etcd then shows that no two load managers ever assigned at once. The owner and
assignment keys also carry the ``traceparent`` of the decision's span when it is sampled
(:mod:`danube_load_manager.spans`), so the broker that loads or hands over the topic continues
its trace.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from danube_common.keys import Keys
from danube_common.metadata.store import Compare, MetadataStore, Op
from danube_common.observability import record_context
from danube_common.records import Ownership, now_ms
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_load_manager.decide import Action, DropMoveRequest, MarkDrained, Move, Place, Replace

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    applied: bool
    revision: int = 0


class Executor:
    def __init__(self, resources: Resources, *, candidate_id: str) -> None:
        self._res = resources
        self._store: MetadataStore = resources.store
        self._keys: Keys = resources.keys
        self._candidate_id = candidate_id

    async def apply(self, action: Action, *, fence: Compare, term: int) -> Outcome:
        by = {"lm": self._candidate_id, "term": term}
        if isinstance(action, Place):
            return await self._place(action, fence, by)
        if isinstance(action, Replace):
            return await self._replace(action, fence, by)
        if isinstance(action, Move):
            return await self._move(action, fence, by)
        if isinstance(action, DropMoveRequest):
            return await self._drop_request(action, fence)
        return await self._mark_drained(action, fence)

    async def _place(self, a: Place, fence: Compare, by: dict[str, Any]) -> Outcome:
        k, t = self._keys, TopicName.parse(a.topic)
        ts = now_ms()
        ctx = record_context.current()
        res = await self._store.txn(
            [fence, Compare.absent(k.owner(t)), Compare.exists(k.broker(a.to))],
            [
                Op.put(k.owner(t), {"broker_id": a.to, "assigned_at_ms": ts, "by": by, **ctx}),
                Op.put(k.assignment(a.to, t), {"assigned_at_ms": ts, **ctx}),
                Op.delete(k.unassigned(t)),
            ],
        )
        if res.succeeded:
            log.info("placed topic %s on broker %s", a.topic, a.to)
        return Outcome(a, res.succeeded, res.revision)

    async def _replace(self, a: Replace, fence: Compare, by: dict[str, Any]) -> Outcome:
        k, t = self._keys, TopicName.parse(a.topic)
        ts = now_ms()
        ctx = record_context.current()
        res = await self._store.txn(
            [
                fence,
                Compare.mod_revision_is(k.owner(t), a.epoch),
                Compare.absent(k.broker(a.dead)),
                Compare.exists(k.broker(a.to)),
            ],
            [
                Op.put(
                    k.owner(t), {"broker_id": a.to, "assigned_at_ms": ts, "by": by, "replaced": a.dead, **ctx}
                ),
                Op.put(k.assignment(a.to, t), {"assigned_at_ms": ts, **ctx}),
                Op.delete(k.assignment(a.dead, t)),
                Op.delete(k.unassigned(t)),
            ],
        )
        if res.succeeded:
            log.warning("topic %s: its broker %s is gone; re-placed on broker %s", a.topic, a.dead, a.to)
        return Outcome(a, res.succeeded, res.revision)

    async def _move(self, a: Move, fence: Compare, by: dict[str, Any]) -> Outcome:
        own = Ownership(a.topic, a.owner, a.epoch)
        marked = await self._res.mark_moving(own, a.to, fence=[fence], by=by)
        if marked is None:
            return Outcome(a, False)
        log.info("topic %s: moving from broker %s to %s (%s)", a.topic, a.owner, a.to, a.reason)
        t = TopicName.parse(a.topic)
        await self._store.txn([fence], [Op.delete(self._keys.move_request(t))])
        return Outcome(a, True, marked.epoch)

    async def update_plan(self, plan_id: str, revision: int, doc: dict[str, Any], *, fence: Compare) -> int:
        """Write a plan's progress, fenced by the term and the plan's mod_revision (0: refused)."""
        key = self._keys.rebalance_plan(plan_id)
        res = await self._store.txn([fence, Compare.mod_revision_is(key, revision)], [Op.put(key, doc)])
        return res.revision if res.succeeded else 0

    async def _drop_request(self, a: DropMoveRequest, fence: Compare) -> Outcome:
        res = await self._store.txn([fence], [Op.delete(self._keys.move_request(TopicName.parse(a.topic)))])
        if res.succeeded:
            log.warning("move request for topic %s dropped: %s", a.topic, a.why)
        return Outcome(a, res.succeeded, res.revision)

    async def _mark_drained(self, a: MarkDrained, fence: Compare) -> Outcome:
        key = self._keys.broker_state(a.broker_id)
        res = await self._store.txn(
            [fence, Compare.mod_revision_is(key, a.revision)],
            [Op.put(key, {"state": "drained", "at_ms": now_ms()})],
        )
        if res.succeeded:
            log.info("broker %s drained: it owns no topic", a.broker_id)
        return Outcome(a, res.succeeded, res.revision)
