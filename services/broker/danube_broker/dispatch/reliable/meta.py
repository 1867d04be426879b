"""A reliable topic's subscriptions in etcd: metadata, cursors, failure policies.

Keys (all from :class:`danube_common.keys.Keys`):

- ``subscription(topic, sub)``: ``{"type", "created_at_ms", "initial_position", "start_offset"}``
  (and ``"read_compacted": true`` for one reading the compacted view), written when the
  subscription is created (before Subscribe answers);
- ``subscription_cursor(topic, sub)``: ``{"cursor": N}``, every offset <= N acknowledged
  (-1: none), and ``"acked": [[lo, hi], ...]`` when offsets above N are acknowledged too (the
  lowest ranges: ``acks.MAX_PERSISTED_RANGES``). Absent: nothing acknowledged since creation,
  i.e. ``start_offset - 1``;
- ``subscription_policy(topic, sub)``: the failure policy, written by admins, under its own
  prefix (``subscription_policies_prefix``): the broker follows every policy with one watch
  (:class:`~danube_broker.dispatch.reliable.policy_watch.PolicyWatch`), and never sees its own
  cursor writes echoed back.

Every write of the owner (create, cursors, delete) is one transaction that compares the owner
key's ``mod_revision`` with the epoch this broker holds the topic at: a broker that lost the
topic (paused, partitioned, moved) cannot move a cursor. A refused write raises
:class:`FencedOut`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from danube_broker.dispatch.reliable.acks import Ranges
from danube_common.errors import TopicNotOwned
from danube_common.metadata.store import Compare, Op
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: Operations per transaction (etcd allows 128 per branch, one is the compare).
_TXN_OPS = 100


class FencedOut(TopicNotOwned):
    """A fenced write was refused: the topic's ownership moved on since our epoch."""


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    name: str
    type: str
    created_at_ms: int
    initial_position: str
    start_offset: int
    #: Reads the topic's compacted view below its horizon (stored only when set).
    read_compacted: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "name"}
        if not self.read_compacted:
            del out["read_compacted"]
        return out


@dataclass(frozen=True, slots=True)
class StoredSubscription:
    record: SubscriptionRecord
    #: The persisted cursor; ``start_offset - 1`` when none was written yet.
    cursor: int
    policy: dict[str, Any] | None
    #: Acked ranges above the cursor persisted with it.
    acked: Ranges = ()


#: A subscription's acknowledgements as persisted: (cursor, acked ranges above it).
CursorState = tuple[int, Ranges]


def cursor_value(cursor: int, acked: Ranges) -> dict[str, Any]:
    """The stored cursor record."""
    if not acked:
        return {"cursor": cursor}
    return {"cursor": cursor, "acked": [[lo, hi] for lo, hi in acked]}


class SubscriptionStore:
    def __init__(self, resources: Resources, topic: TopicName, epoch: Callable[[], int]) -> None:
        self._store = resources.store
        self._keys = resources.keys
        self._topic = topic
        self._epoch = epoch

    @property
    def prefix(self) -> str:
        return self._keys.subscriptions_prefix(self._topic)

    def _fence(self) -> Compare:
        return Compare.mod_revision_is(self._keys.owner(self._topic), self._epoch())

    async def _fenced(self, ops: list[Op], what: str) -> None:
        for lo in range(0, len(ops), _TXN_OPS):
            res = await self._store.txn([self._fence()], ops[lo : lo + _TXN_OPS])
            if not res.succeeded:
                raise FencedOut(
                    f"topic {self._topic}: {what} refused, this broker no longer owns the topic "
                    f"(epoch {self._epoch()}); look it up again"
                )

    # ---- reads
    async def load(self) -> tuple[list[StoredSubscription], int]:
        """Every subscription of the topic, and the revision its policies were read at (the
        policy watch delivers what changes after it)."""
        kvs, _ = await self._store.get_prefix(self.prefix)
        policies, revision = await self.read_policies()
        records: dict[str, SubscriptionRecord] = {}
        cursors: dict[str, int] = {}
        acked: dict[str, Ranges] = {}
        for kv in kvs:
            name, kind = self.parse(kv.key)
            if not name:
                continue
            try:
                value = kv.json()
                if kind == "":
                    records[name] = SubscriptionRecord(
                        name=name,
                        type=str(value["type"]),
                        created_at_ms=int(value.get("created_at_ms", 0)),
                        initial_position=str(value.get("initial_position", "latest")),
                        start_offset=int(value.get("start_offset", 0)),
                        read_compacted=bool(value.get("read_compacted", False)),
                    )
                elif kind == "cursor":
                    cursors[name] = int(value["cursor"])
                    acked[name] = tuple((int(lo), int(hi)) for lo, hi in value.get("acked", ()))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("topic %s: ignoring malformed subscription key %s (%s)", self._topic, kv.key, exc)
        out = [
            StoredSubscription(
                rec, cursors.get(name, rec.start_offset - 1), policies.get(name), acked.get(name, ())
            )
            for name, rec in records.items()
        ]
        return out, revision

    async def read_policies(self) -> tuple[dict[str, dict[str, Any]], int]:
        """The topic's stored failure policies by subscription, and the revision of the read."""
        prefix = self._keys.subscription_policies_prefix(self._topic)
        kvs, revision = await self._store.get_prefix(prefix)
        policies: dict[str, dict[str, Any]] = {}
        for kv in kvs:
            try:
                policies[kv.key[len(prefix) :]] = kv.json()
            except ValueError as exc:
                log.error("topic %s: ignoring malformed policy key %s (%s)", self._topic, kv.key, exc)
        return policies, revision

    async def read_policy(self, name: str) -> dict[str, Any] | None:
        kv = await self._store.get(self._keys.subscription_policy(self._topic, name))
        return kv.json() if kv else None

    def parse(self, key: str) -> tuple[str, str]:
        """A key under the prefix -> (subscription, "" | "cursor" | other)."""
        if not key.startswith(self.prefix):
            return "", ""
        name, _, kind = key[len(self.prefix) :].partition("/")
        return name, kind

    # ---- fenced writes
    async def create(self, record: SubscriptionRecord) -> None:
        key = self._keys.subscription(self._topic, record.name)
        await self._fenced([Op.put(key, record.to_json())], f"creating subscription {record.name!r}")

    def fence(self) -> Compare:
        """The compare every write of the owner carries (the owner key at our epoch)."""
        return self._fence()

    def cursor_ops(self, cursors: Mapping[str, CursorState]) -> list[Op]:
        return [
            Op.put(self._keys.subscription_cursor(self._topic, name), cursor_value(cursor, acked))
            for name, (cursor, acked) in cursors.items()
        ]

    async def write_cursors(self, cursors: Mapping[str, CursorState]) -> None:
        """This topic's cursors alone, fenced (the broker-wide flusher batches several topics'
        writes in one transaction and falls back to this when the batch is refused)."""
        ops = self.cursor_ops(cursors)
        if ops:
            await self._fenced(ops, "writing cursors")

    async def put_fenced(self, key: str, value: Any, what: str) -> None:
        """Write one key of the topic (e.g. its compaction record), fenced: FencedOut if this
        broker no longer owns the topic."""
        await self._fenced([Op.put(key, value)], what)

    async def delete_keys(self, keys: list[str], what: str) -> None:
        """Delete ``keys`` (e.g. segment descriptors retention let go), fenced: FencedOut if
        this broker no longer owns the topic."""
        await self._fenced([Op.delete(k) for k in keys], what)

    async def delete(self, name: str) -> None:
        """Unsubscribe: metadata and cursor go; an admin-set policy stays."""
        await self._fenced(
            [
                Op.delete(self._keys.subscription(self._topic, name)),
                Op.delete(self._keys.subscription_cursor(self._topic, name)),
            ],
            f"deleting subscription {name!r}",
        )
