"""In-memory MetadataStore with etcd's semantics, for unit tests.

Revisions, create/mod revisions and versions, transactions, leases (expired by
:meth:`MemoryStore.expire_lease` or by TTL on the running loop's clock) and watches with
history replay behave as in etcd; the contract tests run the same suite against both.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from danube_common.errors import InvalidArgument, Unavailable
from danube_common.metadata.store import (
    Compare,
    KeyValue,
    MetadataStore,
    Op,
    TxnResult,
    WatchCompacted,
    WatchEvent,
    encode_value,
)

#: etcd's default --max-txn-ops: operations allowed per transaction branch.
MAX_TXN_OPS = 128


@dataclass(slots=True)
class _Lease:
    ttl_s: int
    deadline: float
    keys: set[str]


class MemoryStore(MetadataStore):
    def __init__(self) -> None:
        self._data: dict[str, KeyValue] = {}
        self._revision = 1  # etcd starts at revision 1 on an empty store
        self._history: list[WatchEvent] = []
        self._compacted = 0
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(0x1000)
        self._changed = asyncio.Condition()
        self._closed = False
        #: Set to make every call fail with Unavailable (simulates an etcd outage).
        self.unavailable = False

    # ---- helpers
    def _check(self) -> None:
        if self._closed:
            raise Unavailable("metadata store is closed")
        if self.unavailable:
            raise Unavailable("metadata store unavailable (simulated outage)")
        self._expire_due_leases()

    def _expire_due_leases(self) -> None:
        try:
            now = asyncio.get_running_loop().time()
        except RuntimeError:
            return
        for lease_id, lease in list(self._leases.items()):
            if lease.deadline <= now:
                self._drop_lease(lease_id)

    def _drop_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is None or not lease.keys:
            return
        self._revision += 1
        for key in sorted(lease.keys):
            if key in self._data and self._data[key].lease == lease_id:
                del self._data[key]
                self._history.append(WatchEvent("delete", key, b"", self._revision))
        self._notify()

    def _notify(self) -> None:
        async def _wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        try:
            asyncio.get_running_loop().create_task(_wake())
        except RuntimeError:
            pass

    def _apply_put(self, key: str, value: bytes, lease: int, rev: int) -> None:
        if lease and lease not in self._leases:
            raise Unavailable(f"lease {lease:x} not found")
        old = self._data.get(key)
        if old is not None and old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        kv = KeyValue(
            key,
            value,
            create_revision=old.create_revision if old else rev,
            mod_revision=rev,
            version=(old.version + 1) if old else 1,
            lease=lease,
        )
        self._data[key] = kv
        if lease:
            self._leases[lease].keys.add(key)
        self._history.append(WatchEvent("put", key, value, rev, kv.create_revision))

    def _apply_delete(self, keys: list[str], rev: int) -> int:
        for key in keys:
            old = self._data.pop(key)
            if old.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(key)
            self._history.append(WatchEvent("delete", key, b"", rev))
        return len(keys)

    def _compare(self, c: Compare) -> bool:
        kv = self._data.get(c.key)
        actual: int | bytes
        if c.target == "version":
            actual = kv.version if kv else 0
        elif c.target == "create":
            actual = kv.create_revision if kv else 0
        elif c.target == "mod":
            actual = kv.mod_revision if kv else 0
        elif c.target == "lease":
            actual = kv.lease if kv else 0
        else:
            if kv is None:
                return False  # etcd: a value compare on a missing key is false
            actual = kv.value
        expected = c.value
        if isinstance(actual, bytes) != isinstance(expected, bytes):
            raise TypeError(f"compare {c.target} needs a {'bytes' if c.target == 'value' else 'int'} value")
        if c.op == "==":
            return actual == expected
        if c.op == "!=":
            return actual != expected
        if c.op == "<":
            return actual < expected  # type: ignore[operator]
        return actual > expected  # type: ignore[operator]

    # ---- MetadataStore
    async def get(self, key: str) -> KeyValue | None:
        self._check()
        return self._data.get(key)

    async def get_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        self._check()
        return [self._data[k] for k in sorted(self._data) if k.startswith(prefix)], self._revision

    async def put(self, key: str, value: bytes | str | dict[str, Any] | list[Any], *, lease: int = 0) -> int:
        res = await self.txn([], [Op.put(key, value, lease=lease)])
        return res.revision

    async def delete(self, key: str) -> bool:
        self._check()
        if key not in self._data:
            return False
        self._revision += 1
        self._apply_delete([key], self._revision)
        self._notify()
        return True

    async def delete_prefix(self, prefix: str) -> int:
        self._check()
        keys = sorted(k for k in self._data if k.startswith(prefix))
        if not keys:
            return 0
        self._revision += 1
        n = self._apply_delete(keys, self._revision)
        self._notify()
        return n

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        self._check()
        for branch in (compares, success, failure):
            if len(branch) > MAX_TXN_OPS:
                raise InvalidArgument(
                    f"too many operations in txn request ({len(branch)} > {MAX_TXN_OPS}, as etcd's --max-txn-ops)"
                )
        for branch_ops in (success, failure):
            put_keys = [op.key for op in branch_ops if op.kind in ("put", "delete")]
            if len(put_keys) != len(set(put_keys)):
                raise InvalidArgument("duplicate key given in txn request")
        ok = all(self._compare(c) for c in compares)
        ops = success if ok else failure
        for op in ops:
            if op.kind == "put" and op.lease and op.lease not in self._leases:
                raise Unavailable(f"lease {op.lease:x} not found")
        writes = any(
            op.kind == "put"
            or (op.kind == "delete" and op.key in self._data)
            or (op.kind == "delete_prefix" and any(k.startswith(op.key) for k in self._data))
            for op in ops
        )
        rev = self._revision + 1 if writes else self._revision
        gets: list[KeyValue | None] = []
        for op in ops:
            if op.kind == "put":
                self._apply_put(op.key, encode_value(op.value), op.lease, rev)
            elif op.kind == "delete":
                if op.key in self._data:
                    self._apply_delete([op.key], rev)
            elif op.kind == "delete_prefix":
                self._apply_delete(sorted(k for k in self._data if k.startswith(op.key)), rev)
            else:
                gets.append(self._data.get(op.key))
        if writes:
            self._revision = rev
            self._notify()
        return TxnResult(ok, self._revision, gets)

    async def grant_lease(self, ttl_s: int) -> int:
        self._check()
        lease_id = next(self._lease_ids)
        now = asyncio.get_running_loop().time()
        self._leases[lease_id] = _Lease(ttl_s, now + ttl_s, set())
        return lease_id

    async def keepalive(self, lease_id: int) -> int:
        self._check()
        lease = self._leases.get(lease_id)
        if lease is None:
            return 0
        lease.deadline = asyncio.get_running_loop().time() + lease.ttl_s
        return lease.ttl_s

    async def revoke_lease(self, lease_id: int) -> None:
        self._check()
        self._drop_lease(lease_id)

    def expire_lease(self, lease_id: int) -> None:
        """Test hook: expire a lease now, as if its keep-alives had stopped for a TTL."""
        self._drop_lease(lease_id)

    def compact(self, revision: int) -> None:
        """Test hook: forget history before ``revision``."""
        self._history = [e for e in self._history if e.revision >= revision]
        self._compacted = max(self._compacted, revision)

    async def watch_prefix(
        self, prefix: str, *, start_revision: int | None = None
    ) -> AsyncIterator[WatchEvent]:
        self.open_watches += 1
        try:
            async for ev in self._watch_prefix(prefix, start_revision):
                yield ev
        finally:
            self.open_watches -= 1

    async def _watch_prefix(self, prefix: str, start_revision: int | None) -> AsyncIterator[WatchEvent]:
        self._check()
        next_rev = start_revision if start_revision is not None else self._revision + 1
        while True:
            if next_rev < self._compacted:
                raise WatchCompacted(
                    f"watch from revision {next_rev} is compacted (oldest kept: {self._compacted})",
                    compact_revision=self._compacted,
                )
            seen_up_to = self._revision
            pending = [
                e for e in self._history if next_rev <= e.revision <= seen_up_to and e.key.startswith(prefix)
            ]
            for ev in pending:
                yield ev
            # Only what was read above counts as delivered: writes made while the consumer
            # handled these events are picked up on the next round.
            next_rev = max(next_rev, seen_up_to + 1)
            async with self._changed:
                while self._revision < next_rev and not self._closed:
                    await self._changed.wait()
            if self._closed:
                return

    async def aclose(self) -> None:
        self._closed = True
        async with self._changed:
            self._changed.notify_all()

    def snapshot(self) -> dict[str, KeyValue]:
        """Test hook: the current key-values."""
        return {k: replace(v) for k, v in self._data.items()}
