"""The metadata store interface: etcd's data model, narrowed to what Danube uses.

Semantics follow etcd v3 exactly (the fake in ``memory.py`` is tested against a real etcd
by the contract suite):

- every successful write increments the store revision; a transaction is one revision;
- ``KeyValue.create_revision`` is the revision that created the key (0 = absent in compares),
  ``version`` counts writes since creation;
- keys attached to a lease vanish when it expires or is revoked;
- a watch from ``start_revision`` first replays history from that revision, then follows;
  a watch never skips or repeats an event, across reconnects included.
"""

from __future__ import annotations

import abc
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from danube_common.errors import Unavailable


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    def json(self) -> Any:
        return json.loads(self.value) if self.value else None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes
    #: The revision of the write that caused the event.
    revision: int
    #: For puts: the key's create_revision (distinguishes create from update).
    create_revision: int = 0

    def json(self) -> Any:
        return json.loads(self.value) if self.value else None


class WatchCompacted(Unavailable):
    """The requested start revision was compacted away: re-read the state and watch again."""

    code = "WATCH_COMPACTED"

    def __init__(self, message: str, *, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


CompareTarget = Literal["version", "create", "mod", "value", "lease"]
CompareOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction: ``target(key) op value``."""

    key: str
    target: CompareTarget
    op: CompareOp
    value: int | bytes

    @staticmethod
    def absent(key: str) -> Compare:
        return Compare(key, "create", "==", 0)

    @staticmethod
    def exists(key: str) -> Compare:
        return Compare(key, "create", ">", 0)

    @staticmethod
    def mod_revision_is(key: str, revision: int) -> Compare:
        return Compare(key, "mod", "==", revision)

    @staticmethod
    def value_is(key: str, value: bytes) -> Compare:
        return Compare(key, "value", "==", value)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction."""

    kind: Literal["put", "delete", "delete_prefix", "get"]
    key: str
    value: bytes = b""
    lease: int = 0

    @staticmethod
    def put(key: str, value: bytes | str | dict[str, Any] | list[Any], *, lease: int = 0) -> Op:
        return Op("put", key, encode_value(value), lease)

    @staticmethod
    def delete(key: str) -> Op:
        return Op("delete", key)

    @staticmethod
    def delete_prefix(prefix: str) -> Op:
        return Op("delete_prefix", prefix)

    @staticmethod
    def get(key: str) -> Op:
        return Op("get", key)


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    #: Store revision after the transaction (unchanged if it wrote nothing).
    revision: int
    #: For each ``get`` op of the branch taken, the key's value (None if absent), in order.
    gets: list[KeyValue | None] = field(default_factory=list)


def encode_value(value: bytes | str | dict[str, Any] | list[Any]) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class MetadataStore(abc.ABC):
    """Async key-value store with revisions, transactions, leases and watches."""

    #: Watches currently open through this store (``watch_prefix`` iterators not yet finished).
    open_watches: int = 0

    @abc.abstractmethod
    async def get(self, key: str) -> KeyValue | None: ...

    @abc.abstractmethod
    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        """All keys under ``prefix`` in key order, and the store revision of the read."""

    @abc.abstractmethod
    async def put(self, key: str, value: bytes | str | dict[str, Any] | list[Any], *, lease: int = 0) -> int:
        """Write ``key``; return the new store revision."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Delete ``key``; True if it existed."""

    @abc.abstractmethod
    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; return how many were deleted."""

    @abc.abstractmethod
    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult: ...

    @abc.abstractmethod
    async def grant_lease(self, ttl_s: int) -> int:
        """Create a lease; return its id."""

    @abc.abstractmethod
    async def keepalive(self, lease_id: int) -> int:
        """Refresh a lease; return its remaining TTL in seconds, 0 if it no longer exists."""

    @abc.abstractmethod
    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease (its keys are deleted). Revoking an unknown lease is not an error."""

    @abc.abstractmethod
    def watch_prefix(self, prefix: str, *, start_revision: int | None = None) -> AsyncIterator[WatchEvent]:
        """Events under ``prefix`` from ``start_revision`` (default: from now), forever.

        Reconnects transparently and resumes after the last delivered revision. Raises
        :class:`WatchCompacted` if history from the needed revision is gone.
        """

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    # ---- conveniences shared by every implementation
    async def get_json(self, key: str) -> Any:
        kv = await self.get(key)
        return kv.json() if kv else None

    async def create(
        self, key: str, value: bytes | str | dict[str, Any] | list[Any], *, lease: int = 0
    ) -> bool:
        """Put ``key`` only if absent; True if this call created it."""
        res = await self.txn([Compare.absent(key)], [Op.put(key, value, lease=lease)])
        return res.succeeded
