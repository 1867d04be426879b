"""What the admin API shows and does, on top of ``Resources``: no protobuf here.

Listing rule: a partitioned topic (a parent entry with ``partitions > 0``) is shown once, with
its partitions nested under it; partitions are never repeated at the top level. Partitions
that producers created by name without a parent entry are ordinary topics and are listed as
such.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from danube_common.errors import (
    BrokerNotFound,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TopicNotFound,
)
from danube_common.leadership import LeaderInfo, read_leaders
from danube_common.load import LoadReport
from danube_common.log_state import AcceptedGap, LogRecords, LogState
from danube_common.metadata.store import Compare, Op
from danube_common.namespace_policies import (
    COMPACTION_NAMES,
    FIELD_NAMES,
    RETENTION_NAMES,
    TOPIC_NAMES,
    NamespacePolicies,
)
from danube_common.observability import record_context
from danube_common.placement import Resolver
from danube_common.policies import SubscriptionPolicyRecord, topic_policies
from danube_common.records import BrokerRecord, Ownership, TopicRecord, check_dispatch, now_ms
from danube_common.resources import Resources
from danube_common.topic_name import TopicName, validate_namespace

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    dispatch_strategy: str
    #: > 0 on the parent entry of a partitioned topic.
    partitions: int = 0
    #: Owner broker id; "" when unassigned and for a partitioned parent.
    broker_id: str = ""
    partition_topics: tuple[TopicView, ...] = ()
    subscriptions: tuple[str, ...] = ()
    created_at_ms: int = 0
    #: Reliable topics: "fsync" | "none" | "cloud" ("" for non-reliable topics).
    durability: str = ""
    #: Reliable topics: the retention in force (the topic's own policies, else what it was
    #: created with, else its namespace's default; 0 = not set).
    retention_time_s: int = 0
    retention_size_bytes: int = 0
    #: Reliable topics: the compaction threshold in force (the topic's own, else its
    #: namespace's default; 0 = none set here, a broker's own default may apply).
    compaction_threshold_bytes: int = 0

    @classmethod
    def of(
        cls,
        rec: TopicRecord,
        *,
        partitions: int = 0,
        broker_id: str = "",
        partition_topics: tuple[TopicView, ...] = (),
        subscriptions: tuple[str, ...] = (),
        effective: NamespacePolicies | None = None,
    ) -> TopicView:
        """A view of ``rec``: name, dispatch strategy, creation time and policies (retention:
        ``effective``'s when given, see :meth:`Catalog.effective_policies`; so is the
        compaction threshold, which only ``effective`` has)."""
        pol = dict(rec.policies)
        if effective is not None and rec.dispatch_strategy == "reliable":
            for key in (*RETENTION_NAMES, *COMPACTION_NAMES):
                value = getattr(effective, key)
                if value is not None:
                    pol[key] = value
        return cls(
            rec.name,
            rec.dispatch_strategy,
            partitions,
            broker_id,
            partition_topics,
            subscriptions,
            rec.created_at_ms,
            durability=str(pol.get("durability", "")),
            retention_time_s=int(pol.get("retention_time_s", 0)),
            retention_size_bytes=int(pol.get("retention_size_bytes", 0)),
            compaction_threshold_bytes=int(pol.get("compaction_threshold_bytes", 0)),
        )


@dataclass(frozen=True, slots=True)
class BrokerView:
    record: BrokerRecord
    topic_count: int
    #: Admin state ("" = never set).
    admin_state: str = ""
    load: LoadReport | None = None

    @property
    def state(self) -> str:
        """Effective state: the broker's own (``draining`` at shutdown), then the admin's."""
        if self.record.state != "active":
            return self.record.state
        return self.admin_state or "active"


#: Admin states an operator may set (``drained`` is set by the load manager once empty).
SETTABLE_BROKER_STATES = ("draining", "active")


def _partition_index(name: str) -> int:
    return TopicName.parse(name).partition_index or 0


def group_topics(
    records: Iterable[TopicRecord],
    owners: Mapping[str, Ownership],
    effective: Callable[[TopicRecord], NamespacePolicies | None] = lambda _: None,
) -> list[TopicView]:
    """Topic records -> top-level views, partitions nested under their parent, sorted by name
    (``effective``: each record's policies in force, for its retention)."""
    recs = list(records)
    parents = {r.name for r in recs if r.partitions > 0}
    children: dict[str, list[TopicRecord]] = {}
    top: list[TopicRecord] = []
    for r in recs:
        if r.partition_of and r.partition_of in parents and r.partitions == 0:
            children.setdefault(r.partition_of, []).append(r)
        else:
            top.append(r)

    def leaf(r: TopicRecord) -> TopicView:
        own = owners.get(r.name)
        return TopicView.of(r, broker_id=own.broker_id if own else "", effective=effective(r))

    out: list[TopicView] = []
    for r in sorted(top, key=lambda r: r.name):
        if r.partitions > 0:
            parts = sorted(children.get(r.name, []), key=lambda c: _partition_index(c.name))
            out.append(
                TopicView.of(
                    r,
                    partitions=r.partitions,
                    partition_topics=tuple(leaf(c) for c in parts),
                    effective=effective(r),
                )
            )
        else:
            out.append(leaf(r))
    return out


#: How long an admin create waits for the load manager to place the new topic(s): well inside the
#: CLI's default deadline (10 s); a topic not placed by then is placed later, and says so.
PLACEMENT_WAIT_S = 5.0


class Catalog:
    def __init__(self, resources: Resources, placement: Resolver) -> None:
        self._res = resources
        self._placement = placement

    # ------------------------------------------------------------------ brokers
    async def list_brokers(self) -> list[BrokerView]:
        counts = await self._res.topic_counts()
        brokers = sorted(await self._res.list_brokers(), key=lambda b: b.broker_id)
        states = await self._admin_states()
        loads = await self._loads()
        return [
            BrokerView(b, counts.get(b.broker_id, 0), states.get(b.broker_id, ""), loads.get(b.broker_id))
            for b in brokers
        ]

    async def _admin_states(self) -> dict[str, str]:
        prefix = self._res.keys.broker_states_prefix()
        kvs, _ = await self._res.store.get_prefix(prefix)
        return {kv.key[len(prefix) :]: str((kv.json() or {}).get("state", "")) for kv in kvs}

    async def _loads(self) -> dict[str, LoadReport]:
        kvs, _ = await self._res.store.get_prefix(self._res.keys.load_prefix())
        out = {}
        for kv in kvs:
            try:
                report = LoadReport.from_json(kv.json())
            except (ValueError, KeyError, TypeError):
                continue
            out[report.broker_id] = report
        return out

    async def set_broker_state(self, broker_id: str, state: str) -> BrokerView:
        """Record an admin state; the load manager acts on ``draining``."""
        if state not in SETTABLE_BROKER_STATES:
            raise InvalidArgument(
                f"unknown broker state {state!r}: use draining (move every topic away) or active"
            )
        known = {b.broker_id for b in await self._res.list_brokers()} | set(await self._admin_states())
        if broker_id not in known:
            raise BrokerNotFound(f"broker {broker_id!r} is not registered; see `danube-admin brokers list`")
        # The drain's moves are traces of their own, linked to this call's (record_context).
        doc = {"state": state, "at_ms": now_ms(), **record_context.current()}
        await self._res.store.put(self._res.keys.broker_state(broker_id), doc)
        log.info("broker %s: admin state set to %s", broker_id, state)
        for view in await self.list_brokers():
            if view.record.broker_id == broker_id:
                return view
        return BrokerView(BrokerRecord(broker_id, "", "", "active"), 0, state)

    # ------------------------------------------------------------------ rebalancing (Spark planner)
    async def load_report(self) -> tuple[str, Any]:
        key = self._res.keys.load_report()
        doc = await self._res.store.get_json(key)
        if doc is None:
            raise NotFound(
                "no cluster load report yet: the Spark planner (danube-planner) writes one each cycle; "
                "is it running? `danube-admin leaders list` shows whether it holds the spark-planner role"
            )
        return key, doc

    async def request_rebalance(self, *, dry_run: bool) -> str:
        request_id = f"{now_ms():013d}-{secrets.token_hex(3)}"
        await self._res.store.put(
            self._res.keys.rebalance_request(request_id),
            {
                "requested_at_ms": now_ms(),
                "by": "danube-admin",
                "dry_run": dry_run,
                **record_context.current(),
            },
        )
        log.info("rebalance requested (%s), request %s", "dry run" if dry_run else "apply", request_id)
        return request_id

    async def list_plans(self, limit: int = 0) -> tuple[list[tuple[str, Any]], list[str]]:
        k = self._res.keys
        # Requests first: the planner deletes a request in the transaction that writes its plan, so
        # a request not pending any more is always answered by a plan in the read that follows.
        reqs, _ = await self._res.store.get_prefix(k.rebalance_requests_prefix())
        pending = [kv.key[len(k.rebalance_requests_prefix()) :] for kv in reqs]
        kvs, _ = await self._res.store.get_prefix(k.rebalance_plans_prefix())
        plans = sorted(((kv.key, kv.json()) for kv in kvs), key=lambda p: p[0], reverse=True)
        return (plans[:limit] if limit else plans), pending

    async def apply_plan(self, plan_id: str) -> tuple[str, Any]:
        """A proposed plan (a dry run) becomes pending: the load manager executes it."""
        key = self._res.keys.rebalance_plan(plan_id)
        kv = await self._res.store.get(key)
        if kv is None:
            raise NotFound(f"no plan {plan_id!r}; see `danube-admin cluster plans`")
        doc = kv.json()
        if doc.get("status") != "proposed":
            raise FailedPrecondition(
                f"plan {plan_id} is {doc.get('status')}: only a proposed plan (from `rebalance --dry-run`) "
                "can be applied"
            )
        if int(doc.get("expires_at_ms") or 0) <= now_ms():
            raise FailedPrecondition(
                f"plan {plan_id} has expired; request a new one with `danube-admin rebalance`"
            )
        doc = {**doc, "status": "pending", "applied_at_ms": now_ms()}
        res = await self._res.store.txn([Compare.mod_revision_is(key, kv.mod_revision)], [Op.put(key, doc)])
        if not res.succeeded:
            raise FailedPrecondition(f"plan {plan_id} changed meanwhile; look at it again")
        log.info("plan %s applied by an admin", plan_id)
        return key, doc

    async def set_pinned(self, name: str, pinned: bool) -> None:
        topic = TopicName.parse(name)
        if await self._res.get_topic(topic) is None:
            raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
        key = self._res.keys.pinned(topic)
        if pinned:
            await self._res.store.put(key, {"by": "danube-admin", "at_ms": now_ms()})
        else:
            await self._res.store.delete(key)

    # ------------------------------------------------------------------ control plane
    async def list_leaders(self) -> list[LeaderInfo]:
        leaders = await read_leaders(self._res.store, self._res.keys)
        return [leaders[role] for role in sorted(leaders)]

    async def _one_topic(self, name: str, for_partitioned: str) -> tuple[TopicName, TopicRecord]:
        """An existing plain topic or partition (a partitioned parent is refused: ``for_partitioned``
        says what to do instead)."""
        topic = TopicName.parse(name)
        rec = await self._res.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
        if rec.partitions:
            raise InvalidArgument(
                f"topic {topic} is partitioned: {for_partitioned} (e.g. {topic.partition(0)})"
            )
        return topic, rec

    async def move_topic(self, name: str, to_broker: str = "") -> tuple[str, str]:
        """Record a move request for the load manager; (current owner, requested target)."""
        topic, _ = await self._one_topic(name, "move its partitions one by one")
        own = await self._res.get_owner(topic)
        if own is None:
            raise FailedPrecondition(f"topic {topic} is not assigned to any broker yet; nothing to move")
        if to_broker:
            if await self._res.get_broker(to_broker) is None:
                raise BrokerNotFound(
                    f"broker {to_broker!r} is not registered; see `danube-admin brokers list`"
                )
            if to_broker == own.broker_id:
                raise FailedPrecondition(f"topic {topic} is already on broker {to_broker}")
        # The load manager's move span is a child of this call's (record_context).
        request = {"to": to_broker, "at_ms": now_ms(), **record_context.current()}
        await self._res.store.put(self._res.keys.move_request(topic), request)
        log.info(
            "move of topic %s from broker %s requested (to %s)", topic, own.broker_id, to_broker or "any"
        )
        return own.broker_id, to_broker

    async def force_takeover(
        self, name: str, *, accept_loss: bool, reason: str = ""
    ) -> tuple[LogState, AcceptedGap | None]:
        """End the wait for a dead writer's log end by a recorded decision (see the RPC's doc)."""
        topic, rec = await self._one_topic(name, "force one partition at a time")
        if rec.dispatch_strategy != "reliable":
            raise InvalidArgument(f"topic {topic} is non_reliable: it has no log to take over")
        if not accept_loss:
            raise FailedPrecondition(
                f"forcing the takeover of {topic} gives up whatever its previous owner did not upload: pass "
                "--accept-loss to confirm"
            )
        records = LogRecords(self._res.store, self._res.keys)
        state = await records.state(topic)
        if state is None or not state.open:
            raise FailedPrecondition(
                f"topic {topic} is not waiting for anyone: its log is "
                + (
                    "not opened yet"
                    if state is None
                    else f"ended and continues at offset {state.next_offset}"
                )
            )
        if await self._res.get_broker(state.writer) is not None:
            raise FailedPrecondition(
                f"broker {state.writer} still writes topic {topic} and is registered (alive): it may still "
                "acknowledge messages. Stop it (or wait for its lease to expire) first"
            )
        closed, gap = await records.force_close(
            topic,
            decided_by="an operator (danube-admin topics force-takeover)",
            reason=reason or f"broker {state.writer}'s disk declared lost",
            incarnation=rec.incarnation or None,
        )
        log.error(
            "UNCLEAN TAKEOVER of topic %s forced by an operator: broker %s's log ends at %d; %s",
            topic,
            state.writer,
            closed.next_offset,
            f"offsets {gap.start_offset}..{gap.next_offset - 1} given up" if gap else "nothing lost",
        )
        return closed, gap

    # ------------------------------------------------------------------ namespaces
    async def list_namespaces(self) -> list[str]:
        return sorted(await self._res.list_namespaces())

    async def create_namespace(self, name: str) -> str:
        await self._res.create_namespace(name)
        log.info("created namespace %s", name)
        return name

    async def delete_namespace(self, name: str) -> str:
        await self._res.delete_namespace(name)
        log.info("deleted namespace %s", name)
        return name

    async def get_namespace_policies(self, name: str) -> NamespacePolicies:
        return await self._res.get_namespace_policies(name)

    async def set_namespace_policies(
        self, name: str, changes: dict[str, Any], clear: list[str]
    ) -> NamespacePolicies:
        if not changes and not clear:
            raise InvalidArgument(
                "nothing to change: give at least one policy to set or one to clear "
                f"(policies: {', '.join(FIELD_NAMES)})"
            )
        policies = await self._res.update_namespace_policies(name, changes, clear)
        log.info(
            "namespace %s policies: set %s, cleared %s; now %s",
            name,
            changes,
            clear or "none",
            policies.to_json(),
        )
        return policies

    async def get_topic_policies(self, name: str) -> tuple[NamespacePolicies, NamespacePolicies]:
        """(what the topic sets itself, what its brokers apply)."""
        topic = TopicName.parse(name)
        own = await self._res.get_topic_policies(topic)
        return own, await self._effective(topic, own)

    async def _effective(self, topic: TopicName, own: NamespacePolicies) -> NamespacePolicies:
        """What the topic's brokers apply: its namespace's policies, over them what its record
        set at creation (retention), over those its own policies."""
        rec = await self._res.get_topic(topic)
        ns = await self._res.get_namespace_policies(topic.namespace)
        return ns.for_topic(rec.policies if rec is not None else None, own)

    async def set_topic_policies(
        self, name: str, changes: dict[str, Any], clear: list[str]
    ) -> tuple[NamespacePolicies, NamespacePolicies]:
        if not changes and not clear:
            raise InvalidArgument(
                "nothing to change: give at least one policy to set or one to clear "
                f"(a topic may set: {', '.join(TOPIC_NAMES)})"
            )
        topic = TopicName.parse(name)
        own = await self._res.update_topic_policies(topic, changes, clear)
        log.info(
            "topic %s policies: set %s, cleared %s; now %s", name, changes, clear or "none", own.to_json()
        )
        return own, await self._effective(topic, own)

    # ------------------------------------------------------------------ topics
    async def list_topics(self, namespace: str = "") -> list[TopicView]:
        if namespace:
            validate_namespace(namespace)
            await self._res.require_namespace(namespace)
        records = await self._res.list_topics(namespace or None)
        owners, _ = await self._res.list_owners()
        return group_topics(records, owners, await self.effective_policies({r.name for r in records}))

    async def effective_policies(self, names: Iterable[str]) -> Callable[[TopicRecord], NamespacePolicies]:
        """For topics ``names``: a record's policies in force (its namespace's, over them what
        it was created with, over those its own), one read per namespace and one per topic
        that has policies of its own (a prefix read)."""
        spaces = {TopicName.parse(n).namespace for n in names}
        ns = {s: await self._res.get_namespace_policies(s) for s in spaces}
        own: dict[str, NamespacePolicies] = {}
        for s in spaces:
            prefix = self._res.keys.topic_policies_prefix(s)
            kvs, _ = await self._res.store.get_prefix(prefix)
            own.update(
                {f"/{s}/{kv.key[len(prefix) :]}": NamespacePolicies.from_json(kv.json()) for kv in kvs}
            )

        def effective(rec: TopicRecord) -> NamespacePolicies:
            space = TopicName.parse(rec.name).namespace
            return ns[space].for_topic(rec.policies, own.get(rec.name))

        return effective

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 0,
        dispatch_strategy: str = "",
        durability: str = "",
        retention_time_s: int = 0,
        retention_size_bytes: int = 0,
        unclean_takeover_after_s: int = 0,
    ) -> TopicView:
        """Create a topic (N partitions if ``partitions``) and place it. Reliable topics keep
        ``durability`` (default fsync) and retention in every record's ``policies``."""
        topic = TopicName.parse(name)
        ns = await self._res.get_namespace_policies(topic.namespace)
        dispatch = check_dispatch(dispatch_strategy or ns.default_dispatch_strategy or "non_reliable")
        if partitions < 0:
            raise InvalidArgument(f"partitions must be 0 (a plain topic) or more, got {partitions}")
        policies = topic_policies(
            dispatch,
            durability=durability or (ns.default_durability if dispatch == "reliable" else "") or "",
            retention_time_s=retention_time_s,
            retention_size_bytes=retention_size_bytes,
            unclean_takeover_after_s=unclean_takeover_after_s,
        )
        # Retention left at 0 where the namespace sets a default: the topic inherits it (and
        # follows later changes of it) instead of recording its own 0.
        for key in ("retention_time_s", "retention_size_bytes"):
            if key in policies and not policies[key] and getattr(ns, key) is not None:
                del policies[key]
        if partitions == 0:
            await self._res.create_topic(topic, dispatch_strategy=dispatch, policies=policies)
            placed = [topic]
        else:
            await self._res.create_partitioned_topic(
                topic, partitions, dispatch_strategy=dispatch, policies=policies
            )
            placed = [topic.partition(i) for i in range(partitions)]
        log.info(
            "created topic %s (partitions=%d, dispatch=%s, policies=%s)",
            topic,
            partitions,
            dispatch,
            policies,
        )
        for t in await self._placement.place(placed, wait_s=PLACEMENT_WAIT_S):
            log.warning(
                "topic %s not placed yet (no active broker, or the load manager is busy); "
                "it is placed when a broker is available, at the latest by the first lookup",
                t,
            )
        return await self.describe_topic(name)

    async def delete_topic(self, name: str) -> list[str]:
        topic = TopicName.parse(name)
        rec = await self._res.get_topic(topic)
        parent = await self._res.get_topic(topic.base) if rec is not None and rec.partition_of else None
        if parent is not None and parent.partitions > 0:
            raise InvalidArgument(
                f"{topic} is a partition of {topic.base}; delete the partitioned topic {topic.base} instead"
            )
        deleted = await self._res.delete_topic(topic)
        log.info("deleted topic(s) %s", ", ".join(deleted))
        return deleted

    async def describe_topic(self, name: str) -> TopicView:
        topic = TopicName.parse(name)
        rec = await self._res.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
        effective = await self.effective_policies([str(topic)])
        if rec.partitions == 0:
            return await self._leaf(topic, rec, effective)
        parts: list[TopicView] = []
        for i in range(rec.partitions):
            part = topic.partition(i)
            part_rec = await self._res.get_topic(part)
            if part_rec is not None:
                parts.append(await self._leaf(part, part_rec, effective))
        subs = sorted({s for p in parts for s in p.subscriptions})
        return TopicView.of(
            rec,
            partitions=rec.partitions,
            partition_topics=tuple(parts),
            subscriptions=tuple(subs),
            effective=effective(rec),
        )

    async def _leaf(
        self, topic: TopicName, rec: TopicRecord, effective: Callable[[TopicRecord], NamespacePolicies]
    ) -> TopicView:
        own = await self._res.get_owner(topic)
        return TopicView.of(
            rec,
            broker_id=own.broker_id if own else "",
            subscriptions=tuple(await self.subscriptions(topic)),
            effective=effective(rec),
        )

    async def subscriptions(self, topic: TopicName) -> list[str]:
        prefix = self._res.keys.subscriptions_prefix(topic)
        kvs, _ = await self._res.store.get_prefix(prefix)
        return [kv.key[len(prefix) :] for kv in kvs if "/" not in kv.key[len(prefix) :]]

    # ------------------------------------------------------------------ subscription policies
    async def set_subscription_policy(
        self, topic_name: str, subscription: str, policy: SubscriptionPolicyRecord
    ) -> SubscriptionPolicyRecord:
        """Validate and store; a partitioned topic's partitions get the same policy."""
        topic = TopicName.parse(topic_name)
        written = await self._res.put_subscription_policy(topic, subscription, policy)
        log.info("subscription policy of %s on %s: %s", subscription, ", ".join(written), policy)
        return policy

    async def get_subscription_policy(
        self, topic_name: str, subscription: str
    ) -> SubscriptionPolicyRecord | None:
        """The stored policy; None when none was set (the owning broker's defaults apply)."""
        topic = TopicName.parse(topic_name)
        if await self._res.get_topic(topic) is None:
            raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
        return await self._res.get_subscription_policy(topic, subscription)
