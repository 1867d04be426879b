"""Typed operations on cluster metadata (namespaces, topics, brokers, ownership).

Used by the lookup service and the broker alike; every key comes from :mod:`keys`.

Ownership: ``/{cluster}/owners/{ns}/{topic}`` = ``{"broker_id"}`` is the single truth of who
owns a topic, and its etcd ``mod_revision`` is the ownership **epoch** (a fencing token that
only grows). The per-broker key ``/{cluster}/assignments/{broker}/{ns}/{topic}``
(value ``{"assigned_at_ms"}``) is written in the same transaction so each broker can watch
just its own prefix.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from danube_common.errors import (
    InvalidArgument,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TopicAlreadyExists,
    TopicNotFound,
)
from danube_common.keys import Keys
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op
from danube_common.topic_name import TopicName, validate_namespace

#: Operations per transaction when a write must be split (etcd allows 128 per branch).
_TXN_CHUNK = 100

DispatchName = Literal["non_reliable", "reliable"]
#: Extra compares and operations that close a reliable topic's log record in the same
#: transaction as a release or a hand-over (``danube_common.log_state.LogRecords.close_txn``).
LogClose = tuple[Sequence[Compare], Sequence[Op]]
DISPATCH_NAMES: tuple[str, ...] = ("non_reliable", "reliable")
BrokerState = Literal["active", "draining", "drained"]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    broker_id: str
    #: host:port clients connect to.
    broker_addr: str
    #: URL handed to clients in lookups (``http://host:port``).
    advertised_url: str
    state: str = "active"
    registered_at_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BrokerRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    dispatch_strategy: str = "non_reliable"
    #: > 0 only on the parent entry of a partitioned topic.
    partitions: int = 0
    #: For a partition: the partitioned topic it belongs to.
    partition_of: str = ""
    created_at_ms: int = 0
    policies: dict[str, Any] = field(default_factory=dict)
    #: The ``create_revision`` of the topic's metadata key (not stored in it): a topic deleted and
    #: created again under the same name is a new incarnation and never sees the old one's data.
    #: 0: not known (a record built without reading etcd).
    incarnation: int = 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["incarnation"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], *, incarnation: int = 0) -> TopicRecord:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "incarnation"}
        return cls(**fields, incarnation=incarnation)

    @classmethod
    def from_kv(cls, kv: KeyValue) -> TopicRecord:
        return cls.from_json(kv.json(), incarnation=kv.create_revision)


@dataclass(frozen=True, slots=True)
class Ownership:
    topic: str
    broker_id: str
    epoch: int
    #: Set while the owner hands the topic over to this broker (a topic move in progress).
    moving_to: str = ""

    @staticmethod
    def of(topic: str, value: dict[str, Any], epoch: int) -> Ownership:
        return Ownership(topic, value["broker_id"], epoch, str(value.get("moving_to") or ""))


def check_dispatch(name: str) -> str:
    if name not in DISPATCH_NAMES:
        raise InvalidArgument(f"unknown dispatch strategy {name!r}: use one of {', '.join(DISPATCH_NAMES)}")
    return name


class Resources:
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
                Op.delete(self.keys.unassigned(t)),
                Op.delete_prefix(self.keys.storage_topic_prefix(t)),
            ]
            own = await self.get_owner(t)
            if own is not None:
                ops += [Op.delete(self.keys.owner(t)), Op.delete(self.keys.assignment(own.broker_id, t))]
            await self.store.txn([], ops)
        return [str(t) for t in names]

    # ------------------------------------------------------------------ brokers
    async def list_brokers(self) -> list[BrokerRecord]:
        prefix = self.keys.brokers_prefix()
        kvs, _ = await self.store.get_prefix(prefix)
        return [BrokerRecord.from_json(kv.json()) for kv in kvs if "/" not in kv.key[len(prefix) :]]

    async def get_broker(self, broker_id: str) -> BrokerRecord | None:
        kv = await self.store.get(self.keys.broker(broker_id))
        return BrokerRecord.from_json(kv.json()) if kv else None

    # ------------------------------------------------------------------ ownership
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
        res = await self.store.txn(
            [Compare.absent(okey)],
            [
                Op.put(okey, {"broker_id": broker_id, "assigned_at_ms": now_ms()}),
                Op.put(self.keys.assignment(broker_id, topic), {"assigned_at_ms": now_ms()}),
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
        mark = {"moving_to": to_broker, "assigned_at_ms": ts, **({"by": by} if by else {})}
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
        ops = [
            Op.put(
                self.keys.owner(t),
                {"broker_id": own.moving_to, "assigned_at_ms": ts, "moved_from": own.broker_id},
            ),
            Op.delete(self.keys.assignment(own.broker_id, t)),
            Op.put(
                self.keys.assignment(own.moving_to, t), {"assigned_at_ms": ts, "moved_from": own.broker_id}
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


# ---------------------------------------------------------------------- topic policies

#: Reliable topics: when the producer is acknowledged (after fsync; at once; after upload).
DURABILITY_NAMES: tuple[str, ...] = ("fsync", "none", "cloud")
DEFAULT_DURABILITY = "fsync"
#: What happens to a message delivered ``max_redeliveries`` times.
POISON_POLICIES: tuple[str, ...] = ("dead_letter", "drop", "block")
_MAX_SUBSCRIPTION_LEN = 200
_MAX_REDELIVERIES = 1_000_000
_MAX_ACK_TIMEOUT_MS = 7 * 24 * 3600 * 1000
_MAX_BACKOFF_MS = 24 * 3600 * 1000


def topic_policies(
    dispatch_strategy: str,
    *,
    durability: str = "",
    retention_time_s: int = 0,
    retention_size_bytes: int = 0,
    unclean_takeover_after_s: int = 0,
) -> dict[str, Any]:
    """The validated ``policies`` of a new topic record.

    Reliable topics get ``{"durability", "retention_time_s", "retention_size_bytes"}``
    (durability defaults to ``fsync``; retention 0 = delete once every subscription has
    acknowledged). Non-reliable topics keep nothing, so any of these is refused.
    """
    if dispatch_strategy != "reliable":
        asked = {"durability": durability, "retention_time_s": retention_time_s}
        asked["retention_size_bytes"] = retention_size_bytes
        asked["unclean_takeover_after_s"] = unclean_takeover_after_s
        given = [f"{name}={value!r}" for name, value in asked.items() if value]
        if given:
            raise InvalidArgument(
                f"{', '.join(given)}: durability and retention apply to reliable topics only; "
                "create the topic with dispatch strategy reliable, or leave them out"
            )
        return {}
    durability = durability or DEFAULT_DURABILITY
    if durability not in DURABILITY_NAMES:
        raise InvalidArgument(f"unknown durability {durability!r}: use one of {', '.join(DURABILITY_NAMES)}")
    for name, value in (
        ("retention_time_s", retention_time_s),
        ("retention_size_bytes", retention_size_bytes),
        ("unclean_takeover_after_s", unclean_takeover_after_s),
    ):
        if value < 0:
            raise InvalidArgument(
                f"{name} must be 0 (no retention after acknowledgement) or more, got {value}"
            )
    policies: dict[str, Any] = {
        "durability": durability,
        "retention_time_s": int(retention_time_s),
        "retention_size_bytes": int(retention_size_bytes),
    }
    if unclean_takeover_after_s:
        policies["unclean_takeover_after_s"] = int(unclean_takeover_after_s)
    return policies


def validate_subscription_name(sub: str) -> str:
    bad = "/" in sub or sub in (".", "..") or not sub.isprintable() or any(c.isspace() for c in sub)
    if bad or not 0 < len(sub) <= _MAX_SUBSCRIPTION_LEN:
        raise InvalidArgument(
            f"invalid subscription name {sub!r}: use 1-{_MAX_SUBSCRIPTION_LEN} printable characters "
            "without '/' or spaces"
        )
    return sub


@dataclass(frozen=True, slots=True)
class SubscriptionPolicyRecord:
    """A subscription's failure policy as stored at ``Keys.subscription_policy`` (JSON keys are
    the field names of ``danube.admin.v1.SubscriptionPolicy``). Every field is optional: None
    means not set, and the owning broker's configured default applies. The JSON holds only the
    fields that are set; setting a policy replaces the stored one as a whole (fields not given
    are not kept from an earlier policy, they fall back to the broker's defaults)."""

    #: Redeliveries of one message (after its first delivery) before the poison policy
    #: applies: N allows 1 + N deliveries (0: unlimited, the poison policy never applies).
    max_redeliveries: int | None = None
    #: Unacked this long after delivery -> redelivered (0: never).
    ack_timeout_ms: int | None = None
    #: Redelivery delay: base * 2^(attempt-1), capped at max (0/0: redeliver at once).
    redelivery_backoff_base_ms: int | None = None
    redelivery_backoff_max_ms: int | None = None
    #: "dead_letter" | "drop" | "block"
    poison_policy: str | None = None
    #: With dead_letter: the reliable topic poison messages are published to.
    dead_letter_topic: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that are set (an unset field is absent, not null)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionPolicyRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def validate(self, topic: TopicName) -> SubscriptionPolicyRecord:
        """Raise InvalidArgument (saying what is allowed) unless this policy makes sense for
        a subscription of ``topic``; return self. Only the fields that are set are checked."""
        if not self.to_json():
            raise InvalidArgument(
                "the policy sets nothing: pass at least one option "
                f"({', '.join(self.__dataclass_fields__)}); options not given use the broker's defaults"
            )

        def bounded(name: str, value: int | None, high: int) -> None:
            if value is not None and not 0 <= value <= high:
                raise InvalidArgument(f"{name} must be between 0 and {high}, got {value}")

        bounded("max_redeliveries", self.max_redeliveries, _MAX_REDELIVERIES)
        bounded("ack_timeout_ms", self.ack_timeout_ms, _MAX_ACK_TIMEOUT_MS)
        bounded("redelivery_backoff_base_ms", self.redelivery_backoff_base_ms, _MAX_BACKOFF_MS)
        bounded("redelivery_backoff_max_ms", self.redelivery_backoff_max_ms, _MAX_BACKOFF_MS)
        base, cap = self.redelivery_backoff_base_ms, self.redelivery_backoff_max_ms
        if base is not None and cap is not None and cap < base:
            raise InvalidArgument(
                f"redelivery_backoff_max_ms ({cap}) must be at least redelivery_backoff_base_ms ({base})"
            )
        if self.poison_policy is not None and self.poison_policy not in POISON_POLICIES:
            raise InvalidArgument(
                f"poison_policy must be one of {', '.join(POISON_POLICIES)} (or left out for the "
                f"broker's default), got {self.poison_policy!r}"
            )
        if self.poison_policy == "dead_letter" and not self.dead_letter_topic:
            raise InvalidArgument("poison_policy dead_letter needs a dead_letter_topic (/namespace/topic)")
        if self.dead_letter_topic is None:
            return self
        if self.poison_policy is not None and self.poison_policy != "dead_letter":
            raise InvalidArgument(
                f"dead_letter_topic is only used with poison_policy dead_letter (not {self.poison_policy})"
            )
        dlq = TopicName.parse(self.dead_letter_topic)
        if dlq.base == topic.base:
            raise InvalidArgument(
                f"dead_letter_topic {dlq} is the topic itself (or one of its partitions); choose another topic"
            )
        return self
