"""Typed operations on cluster metadata: namespaces, topics, brokers, subscription policies.

Used by the lookup service and the broker alike; every key comes from :mod:`keys`. The records
are in :mod:`records`, the policies' validation in :mod:`policies`, and ownership with the topic
move protocol in :mod:`ownership` (whose operations :class:`Resources` also offers).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from danube_common.errors import (
    InvalidArgument,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TooManyTopics,
    TopicAlreadyExists,
    TopicNotFound,
    Unavailable,
)
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, MetadataStore, Op
from danube_common.namespace_policies import (
    COMPACTION_NAMES,
    FIELD_NAMES,
    RETENTION_NAMES,
    TOPIC_NAMES,
    NamespacePolicies,
)
from danube_common.ownership import OwnershipTxns
from danube_common.policies import SubscriptionPolicyRecord, validate_subscription_name
from danube_common.records import BrokerRecord, TopicRecord, check_dispatch, now_ms
from danube_common.topic_name import TopicName, validate_namespace

#: Operations per transaction when a write must be split (etcd allows 128 per branch).
_TXN_CHUNK = 100
#: Read-modify-write attempts of a namespace's policies before giving up.
_CAS_ATTEMPTS = 10


class Resources(OwnershipTxns):
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys

    # ------------------------------------------------------------------ namespaces
    async def create_namespace(
        self, ns: str, *, policies: dict[str, Any] | None = None, exist_ok: bool = False
    ) -> bool:
        validate_namespace(ns)
        created = await self.store.create(
            self.keys.namespace(ns), {"policies": policies or {}, "created_at_ms": now_ms()}
        )
        if not created and not exist_ok:
            raise NamespaceAlreadyExists(f"namespace {ns!r} already exists")
        return created

    async def namespace_policies(self, ns: str) -> dict[str, Any]:
        """The namespace's policies ({} when it has none, or does not exist)."""
        value = await self.store.get_json(self.keys.namespace(ns))
        policies = value.get("policies") if isinstance(value, dict) else None
        return dict(policies) if isinstance(policies, dict) else {}

    async def get_namespace_policies(self, ns: str) -> NamespacePolicies:
        """The namespace's policies (NamespaceNotFound if it does not exist)."""
        validate_namespace(ns)
        value = await self.store.get_json(self.keys.namespace(ns))
        if not isinstance(value, dict):
            raise NamespaceNotFound(
                f"namespace {ns!r} does not exist; create it with `danube-admin namespaces create {ns}`"
            )
        stored = value.get("policies")
        return NamespacePolicies.from_json(stored if isinstance(stored, dict) else None)

    async def update_namespace_policies(
        self, ns: str, changes: dict[str, Any], clear: list[str] | tuple[str, ...] = ()
    ) -> NamespacePolicies:
        """Set ``changes`` and unset ``clear`` in the namespace's policies (validated), keeping
        the others; a compare-and-swap on the record, retried when a concurrent write won."""
        validate_namespace(ns)
        key = self.keys.namespace(ns)
        for _ in range(_CAS_ATTEMPTS):
            kv = await self.store.get(key)
            value = kv.json() if kv is not None else None
            if not isinstance(value, dict) or kv is None:
                raise NamespaceNotFound(
                    f"namespace {ns!r} does not exist; create it with `danube-admin namespaces create {ns}`"
                )
            stored = value.get("policies")
            current = NamespacePolicies.from_json(stored if isinstance(stored, dict) else None)
            new = current.updated(changes, clear)
            # Keys this version does not know (a newer writer's) are kept as they are.
            kept = {k: v for k, v in (stored or {}).items() if k not in FIELD_NAMES}
            record = {**value, "policies": {**kept, **new.to_json()}}
            res = await self.store.txn([Compare.mod_revision_is(key, kv.mod_revision)], [Op.put(key, record)])
            if res.succeeded:
                return new
        raise Unavailable(f"namespace {ns!r} kept changing while its policies were updated; retry")

    async def check_topic_quota(
        self, topic: TopicName, adding: int = 1, *, unless_exists: bool = False
    ) -> None:
        """NamespaceNotFound, or TooManyTopics if ``adding`` more topics would take the namespace
        over its ``max_topics`` (each partition counts; a partitioned topic's parent does not).
        Placement calls it before a new topic is placed, the creates before they write.
        ``unless_exists``: no check when ``topic`` exists already (nothing is added). Checked
        before the create, not in its transaction: creates racing each other may pass it together."""
        cap = (await self.get_namespace_policies(topic.namespace)).max_topics
        if cap is None or (unless_exists and await self.get_topic(topic) is not None):
            return
        existing = sum(1 for r in await self.list_topics(topic.namespace) if r.partitions == 0)
        if existing + adding > cap:
            raise TooManyTopics(
                f"namespace {topic.namespace} has {existing} topic(s) and allows {cap} (max_topics); "
                f"creating {topic}{f' with {adding} partitions' if adding > 1 else ''} would exceed it: "
                "delete topics, or ask an administrator to raise the limit"
            )

    async def namespace_exists(self, ns: str) -> bool:
        return await self.store.get(self.keys.namespace(ns)) is not None

    async def list_namespaces(self) -> list[str]:
        kvs, _ = await self.store.get_prefix(self.keys.namespaces_prefix())
        prefix = self.keys.namespaces_prefix()
        return [kv.key[len(prefix) :] for kv in kvs if "/" not in kv.key[len(prefix) :]]

    async def delete_namespace(self, ns: str) -> None:
        validate_namespace(ns)
        if not await self.namespace_exists(ns):
            raise NamespaceNotFound(f"namespace {ns!r} does not exist")
        topics = await self.list_topics(ns)
        if topics:
            raise NamespaceNotEmpty(
                f"namespace {ns!r} still has {len(topics)} topic(s) (e.g. {topics[0].name}); delete them first"
            )
        await self.store.delete(self.keys.namespace(ns))

    async def require_namespace(self, ns: str) -> None:
        if not await self.namespace_exists(ns):
            raise NamespaceNotFound(
                f"namespace {ns!r} does not exist; create it with `danube-admin namespaces create {ns}`"
            )

    # ------------------------------------------------------------------ topics
    async def get_topic(self, topic: TopicName) -> TopicRecord | None:
        kv = await self.store.get(self.keys.topic(topic))
        return TopicRecord.from_kv(kv) if kv else None

    async def create_topic(
        self,
        topic: TopicName,
        *,
        dispatch_strategy: str = "non_reliable",
        exist_ok: bool = False,
        policies: dict[str, Any] | None = None,
    ) -> tuple[TopicRecord, bool]:
        """Create a plain topic (or one partition). Returns (record, created).

        ``policies`` (e.g. from :func:`topic_policies`) is stored as given in the record.
        """
        check_dispatch(dispatch_strategy)
        await self.require_namespace(topic.namespace)
        await self.check_topic_quota(topic, 1, unless_exists=exist_ok)
        base = topic.base
        rec = TopicRecord(
            name=str(topic),
            dispatch_strategy=dispatch_strategy,
            partition_of=str(base) if base != topic else "",
            created_at_ms=now_ms(),
            policies=dict(policies or {}),
        )
        res = await self.store.txn(
            [Compare.absent(self.keys.topic(topic))],
            [Op.put(self.keys.topic(topic), rec.to_json())],
            [Op.get(self.keys.topic(topic))],
        )
        if res.succeeded:
            return replace(rec, incarnation=res.revision), True
        existing = res.gets[0]
        if existing is None:  # deleted in between; the caller may simply retry
            raise TopicNotFound(f"topic {topic} was deleted while being created; retry")
        if not exist_ok:
            raise TopicAlreadyExists(f"topic {topic} already exists")
        return TopicRecord.from_kv(existing), False

    async def create_partitioned_topic(
        self,
        topic: TopicName,
        partitions: int,
        *,
        dispatch_strategy: str = "non_reliable",
        policies: dict[str, Any] | None = None,
    ) -> TopicRecord:
        """Create the parent entry and every partition, all with the same ``policies``."""
        check_dispatch(dispatch_strategy)
        if partitions < 1 or partitions > 1024:
            raise InvalidArgument(f"partitions must be between 1 and 1024, got {partitions}")
        if topic.partition_index is not None:
            raise InvalidArgument(f"{topic} looks like a partition name; choose a name without '-part-N'")
        await self.require_namespace(topic.namespace)
        await self.check_topic_quota(topic, partitions)
        ts = now_ms()
        pol = dict(policies or {})
        parent = TopicRecord(str(topic), dispatch_strategy, partitions, "", ts, dict(pol))
        parent_key = self.keys.topic(topic)
        part_keys = [self.keys.topic(topic.partition(i)) for i in range(partitions)]
        records = [
            TopicRecord(str(topic.partition(i)), dispatch_strategy, 0, str(topic), ts, dict(pol)).to_json()
            for i in range(partitions)
        ]
        # etcd allows 128 operations per transaction branch: write the partitions in chunks and
        # the parent entry last, so a topic is only visible as partitioned once complete. A
        # conflicting chunk rolls back what this call wrote (fenced on the revisions it wrote).
        written: list[tuple[str, int]] = []
        for lo in range(0, partitions, _TXN_CHUNK):
            chunk = list(zip(part_keys[lo : lo + _TXN_CHUNK], records[lo : lo + _TXN_CHUNK], strict=True))
            res = await self.store.txn(
                [Compare.absent(parent_key)] + [Compare.absent(k) for k, _ in chunk],
                [Op.put(k, v) for k, v in chunk],
            )
            if not res.succeeded:
                await self._undo(written)
                raise TopicAlreadyExists(f"topic {topic} (or one of its partitions) already exists")
            written += [(k, res.revision) for k, _ in chunk]
        res = await self.store.txn([Compare.absent(parent_key)], [Op.put(parent_key, parent.to_json())])
        if not res.succeeded:
            await self._undo(written)
            raise TopicAlreadyExists(f"topic {topic} already exists")
        return replace(parent, incarnation=res.revision)

    async def _undo(self, written: list[tuple[str, int]]) -> None:
        for lo in range(0, len(written), _TXN_CHUNK):
            for key, rev in written[lo : lo + _TXN_CHUNK]:
                await self.store.txn([Compare.mod_revision_is(key, rev)], [Op.delete(key)])

    async def list_topics(self, ns: str | None = None) -> list[TopicRecord]:
        kvs, _ = await self.store.get_prefix(self.keys.topics_prefix(ns))
        out = []
        for kv in kvs:
            if self.keys.parse_topic(kv.key) is not None:
                out.append(TopicRecord.from_kv(kv))
        return out

    async def topic_partitions(self, topic: TopicName) -> list[str]:
        """Names a consumer subscribes to: ``[t]``, the partitions of ``t``, or [] if unknown."""
        rec = await self.get_topic(topic)
        if rec is None:
            # Danube clients create `t-part-N` topics directly (producer.with_partitions), with
            # no parent entry: answer with the partitions that exist, in index order.
            parts = [
                TopicName.parse(r.name)
                for r in await self.list_topics(topic.namespace)
                if r.partition_of == str(topic)
            ]
            return [str(p) for p in sorted(parts, key=lambda p: p.partition_index or 0)]
        if rec.partitions > 0:
            return [str(topic.partition(i)) for i in range(rec.partitions)]
        return [str(topic)]

    async def delete_topic(self, topic: TopicName) -> list[str]:
        """Delete a topic (every partition, for a partitioned one). Returns the deleted names."""
        rec = await self.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        names = [topic.partition(i) for i in range(rec.partitions)] if rec.partitions else []
        names.append(topic)
        for t in names:
            # The log's records, descriptors, checkpoint and accepted gaps go with the topic: a
            # topic created again under this name is a new incarnation and starts empty.
            ops = [
                Op.delete(self.keys.topic(t)),
                Op.delete_prefix(self.keys.topic(t) + "/"),
                Op.delete_prefix(self.keys.subscription_policies_prefix(t)),
                Op.delete(self.keys.unassigned(t)),
                Op.delete_prefix(self.keys.storage_topic_prefix(t)),
                Op.delete(self.keys.topic_schema(t)),
                Op.delete(self.keys.topic_policies(t)),
            ]
            own = await self.get_owner(t)
            if own is not None:
                ops += [Op.delete(self.keys.owner(t)), Op.delete(self.keys.assignment(own.broker_id, t))]
            await self.store.txn([], ops)
        return [str(t) for t in names]

    # ------------------------------------------------------------------ topic policies
    async def get_topic_policies(self, topic: TopicName) -> NamespacePolicies:
        """The limits ``topic`` sets over its namespace's (empty: it inherits them all)."""
        if await self.get_topic(topic) is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        kv = await self.store.get(self.keys.topic_policies(topic))
        return NamespacePolicies.from_json(kv.json() if kv is not None else None)

    async def update_topic_policies(
        self, topic: TopicName, changes: dict[str, Any], clear: list[str] | tuple[str, ...] = ()
    ) -> NamespacePolicies:
        """Set ``changes`` and unset ``clear`` among the topic's own policies (the per-topic
        limits, retention and compaction threshold, ``TOPIC_NAMES``), at the topic's key and, for a partitioned topic,
        at each partition's (the brokers own partitions). A compare-and-swap on the topic's key,
        retried when a concurrent write won; all unset = the key is deleted (everything
        inherited). Retention and the compaction threshold are for reliable topics only."""
        rec = await self.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        not_limits = [n for n in (*changes, *clear) if n in FIELD_NAMES and n not in TOPIC_NAMES]
        if not_limits:
            raise InvalidArgument(
                f"{', '.join(not_limits)}: only a namespace sets {'these' if len(not_limits) > 1 else 'this'}; "
                f"a topic may override {', '.join(TOPIC_NAMES)}"
            )
        retention = [n for n in changes if n in RETENTION_NAMES]
        if retention and rec.dispatch_strategy != "reliable":
            raise InvalidArgument(
                f"{', '.join(retention)}: {topic} is a non_reliable topic, which keeps nothing; retention "
                "applies to reliable topics only"
            )
        compaction = [n for n in changes if n in COMPACTION_NAMES]
        if compaction and rec.dispatch_strategy != "reliable":
            raise InvalidArgument(
                f"{', '.join(compaction)}: {topic} is a non_reliable topic, which keeps nothing to compact; "
                "compaction applies to reliable topics only"
            )
        names = [topic, *(topic.partition(i) for i in range(rec.partitions))]
        keys = [self.keys.topic_policies(t) for t in names]
        for _ in range(_CAS_ATTEMPTS):
            kv = await self.store.get(keys[0])
            current = NamespacePolicies.from_json(kv.json() if kv is not None else None)
            new = current.updated(changes, clear).only_limits()
            value = new.to_json()
            ops = [Op.put(k, value) if value else Op.delete(k) for k in keys]
            guard = Compare.mod_revision_is(keys[0], kv.mod_revision) if kv else Compare.absent(keys[0])
            res = await self.store.txn([guard], ops[:_TXN_CHUNK])
            if not res.succeeded:
                continue
            for lo in range(_TXN_CHUNK, len(ops), _TXN_CHUNK):
                await self.store.txn([], ops[lo : lo + _TXN_CHUNK])
            return new
        raise Unavailable(f"the policies of {topic} kept changing while they were updated; retry")

    # ------------------------------------------------------------------ brokers
    async def list_brokers(self) -> list[BrokerRecord]:
        prefix = self.keys.brokers_prefix()
        kvs, _ = await self.store.get_prefix(prefix)
        return [BrokerRecord.from_json(kv.json()) for kv in kvs if "/" not in kv.key[len(prefix) :]]

    async def get_broker(self, broker_id: str) -> BrokerRecord | None:
        kv = await self.store.get(self.keys.broker(broker_id))
        return BrokerRecord.from_json(kv.json()) if kv else None

    # ------------------------------------------------------------------ subscription policies
    async def put_subscription_policy(
        self, topic: TopicName, sub: str, policy: SubscriptionPolicyRecord
    ) -> list[str]:
        """Store ``policy`` (validated) for ``sub`` of an existing reliable topic: at the topic's
        key and, for a partitioned topic, at each partition's (the brokers own partitions).
        Returns the topic names written."""
        validate_subscription_name(sub)
        rec = await self.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        if rec.dispatch_strategy != "reliable":
            raise InvalidArgument(
                f"{topic} is a non_reliable topic: subscription policies (redelivery, dead letters) "
                "apply to reliable topics only"
            )
        policy.validate(topic)
        names = [topic, *(topic.partition(i) for i in range(rec.partitions))]
        value = policy.to_json()
        keys = [self.keys.subscription_policy(t, sub) for t in names]
        for lo in range(0, len(keys), _TXN_CHUNK):
            await self.store.txn([], [Op.put(k, value) for k in keys[lo : lo + _TXN_CHUNK]])
        return [str(t) for t in names]

    async def get_subscription_policy(self, topic: TopicName, sub: str) -> SubscriptionPolicyRecord | None:
        """The stored policy of ``sub`` on ``topic``; None when none was set (broker defaults)."""
        validate_subscription_name(sub)
        kv = await self.store.get(self.keys.subscription_policy(topic, sub))
        return SubscriptionPolicyRecord.from_json(kv.json()) if kv else None
