"""One suite, two implementations: the in-memory fake must behave like a real etcd.

Every test runs against ``MemoryStore`` (marked unit) and ``EtcdStore`` on a real etcd 3.4
(marked integration; keys under a fresh ``/{cluster}/`` root per test). Revisions in etcd are
global to the server, so tests compare revisions relative to ones they observed themselves.

Where the fake legitimately differs, the test says so. Where it deviates from etcd in a way
callers can trip over, the test is marked ``xfail(strict=True)`` for the fake only, with the
deviation spelled out: fixing the fake turns that into a failure that asks for the mark to go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from danube_common.errors import DanubeError
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Compare, KeyValue, MetadataStore, Op, WatchCompacted, WatchEvent
from tests.support import wait_until


@dataclass
class Ctx:
    store: MetadataStore
    root: str
    kind: str  # "memory" | "etcd"

    def k(self, name: str) -> str:
        return self.root + name

    async def revision(self) -> int:
        _, rev = await self.store.get_prefix(self.root + "\x00none/")
        return rev


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.unit),
        pytest.param("etcd", marks=pytest.mark.integration),
    ]
)
def ctx(request: pytest.FixtureRequest, cluster_name: str) -> Iterator[Ctx]:
    store = request.getfixturevalue("memory_store" if request.param == "memory" else "etcd_store")
    yield Ctx(store, f"/{cluster_name}/", request.param)


def fake_deviates(request: pytest.FixtureRequest, ctx: Ctx, deviation: str) -> None:
    """Mark this test as an expected failure for the fake only (strict: a fix must remove it)."""
    if ctx.kind == "memory":
        request.node.add_marker(
            pytest.mark.xfail(reason=f"MemoryStore deviates from etcd: {deviation}", strict=True)
        )


class Collector:
    """Consumes a watch in a task; the test polls ``events``."""

    def __init__(self, store: MetadataStore, prefix: str, *, start_revision: int | None = None) -> None:
        self.events: list[WatchEvent] = []
        self._store = store
        self._prefix = prefix
        self._start = start_revision
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for ev in self._store.watch_prefix(self._prefix, start_revision=self._start):
            self.events.append(ev)

    def _check_alive(self) -> None:
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]

    async def wait_for(self, pred: object, *, what: str, timeout_s: float = 10.0) -> None:
        def check() -> bool:
            self._check_alive()
            return bool(pred(self.events))  # type: ignore[operator]

        await wait_until(check, timeout_s=timeout_s, what=what)

    async def wait_for_key(self, key: str, *, timeout_s: float = 10.0) -> None:
        await self.wait_for(lambda evs: any(e.key == key for e in evs), what=f"a watch event for {key}")

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@contextlib.asynccontextmanager
async def watching(
    store: MetadataStore, prefix: str, *, start_revision: int | None = None
) -> AsyncIterator[Collector]:
    c = Collector(store, prefix, start_revision=start_revision)
    try:
        yield c
    finally:
        await c.aclose()


def shape(events: list[WatchEvent]) -> list[tuple[str, str, bytes, int, int]]:
    return [(e.kind, e.key, e.value, e.revision, e.create_revision) for e in events]


# ---------------------------------------------------------------- get / put / delete


async def test_put_get_delete(ctx: Ctx) -> None:
    s = ctx.store
    assert await s.get(ctx.k("a")) is None
    rev = await s.put(ctx.k("a"), b"1")
    kv = await s.get(ctx.k("a"))
    assert kv == KeyValue(ctx.k("a"), b"1", create_revision=rev, mod_revision=rev, version=1, lease=0)
    assert await s.delete(ctx.k("a")) is True
    assert await s.get(ctx.k("a")) is None
    assert await s.delete(ctx.k("a")) is False


async def test_put_encodes_str_and_json(ctx: Ctx) -> None:
    s = ctx.store
    await s.put(ctx.k("s"), "text")
    await s.put(ctx.k("j"), {"b": 2, "a": [1, "x"]})
    assert (await s.get(ctx.k("s"))).value == b"text"  # type: ignore[union-attr]
    assert await s.get_json(ctx.k("j")) == {"a": [1, "x"], "b": 2}
    assert await s.get_json(ctx.k("missing")) is None


async def test_get_prefix_is_key_ordered_and_bounded(ctx: Ctx) -> None:
    s = ctx.store
    for name in ["p/b", "p/a/2", "p/c", "p/a/1", "pq", "p0", "o"]:
        await s.put(ctx.k(name), name)
    last = await s.put(ctx.k("p/aa"), b"")
    kvs, rev = await s.get_prefix(ctx.k("p/"))
    assert [kv.key for kv in kvs] == [ctx.k(n) for n in ["p/a/1", "p/a/2", "p/aa", "p/b", "p/c"]]
    assert rev == last, "a read reports the store revision it saw"
    assert await s.get_prefix(ctx.k("nothing/")) == ([], rev)


async def test_a_large_prefix_is_listed_whole_in_key_order_at_one_revision(ctx: Ctx) -> None:
    """More keys and bytes than one etcd answer may carry (gRPC's 4 MiB default, our 1000-key
    pages): the listing is complete, ordered, and one snapshot."""
    s = ctx.store
    value = b"v" * 2048
    names = [f"big/{i:05d}" for i in range(2600)]  # ~5.3 MB of values
    for lo in range(0, len(names), 100):
        await s.txn([], [Op.put(ctx.k(n), value) for n in names[lo : lo + 100]])
    last = await s.put(ctx.k("big/zz"), b"last")
    kvs, rev = await s.get_prefix(ctx.k("big/"))
    assert [kv.key for kv in kvs] == [ctx.k(n) for n in [*names, "big/zz"]]
    assert rev == last


async def test_every_write_is_one_revision(ctx: Ctx) -> None:
    s = ctx.store
    r1 = await s.put(ctx.k("a"), b"1")
    r2 = await s.put(ctx.k("a"), b"2")
    assert r2 == r1 + 1
    assert await s.delete(ctx.k("a"))
    assert await ctx.revision() == r2 + 1
    assert not await s.delete(ctx.k("a")), "deleting a missing key writes nothing"
    assert await ctx.revision() == r2 + 1
    r3 = await s.put(ctx.k("b"), b"")
    assert r3 == r2 + 2


async def test_create_mod_revision_and_version(ctx: Ctx) -> None:
    s = ctx.store
    r1 = await s.put(ctx.k("a"), b"1")
    r2 = await s.put(ctx.k("a"), b"2")
    r3 = await s.put(ctx.k("a"), b"3")
    kv = await s.get(ctx.k("a"))
    assert kv is not None
    assert (kv.create_revision, kv.mod_revision, kv.version) == (r1, r3, 3)
    assert r1 < r2 < r3
    await s.delete(ctx.k("a"))
    r5 = await s.put(ctx.k("a"), b"again")
    kv = await s.get(ctx.k("a"))
    assert kv is not None
    assert (kv.create_revision, kv.mod_revision, kv.version) == (r5, r5, 1), "re-creation starts over"


async def test_create_only_once(ctx: Ctx) -> None:
    s = ctx.store
    assert await s.create(ctx.k("c"), b"first") is True
    assert await s.create(ctx.k("c"), b"second") is False
    assert (await s.get(ctx.k("c"))).value == b"first"  # type: ignore[union-attr]


# ---------------------------------------------------------------- delete_prefix


async def test_delete_prefix(ctx: Ctx) -> None:
    s = ctx.store
    for name in ["d/a", "d/b/c", "d/z", "dx", "e"]:
        await s.put(ctx.k(name), b"")
    before = await ctx.revision()
    assert await s.delete_prefix(ctx.k("d/")) == 3
    kvs, rev = await s.get_prefix(ctx.root)
    assert [kv.key for kv in kvs] == [ctx.k("dx"), ctx.k("e")]
    assert rev == before + 1, "a prefix delete is one revision"
    assert await s.delete_prefix(ctx.k("d/")) == 0
    assert await ctx.revision() == rev


# ---------------------------------------------------------------- transactions


async def test_txn_absent_and_exists(ctx: Ctx) -> None:
    s, k = ctx.store, ctx.k("t")
    res = await s.txn([Compare.exists(k)], [Op.put(k, b"never")], [Op.get(k)])
    assert not res.succeeded and res.gets == [None]
    res = await s.txn([Compare.absent(k)], [Op.put(k, b"v1"), Op.get(k)], [Op.get(k)])
    assert res.succeeded
    assert [g.value if g else None for g in res.gets] == [b"v1"], "a get after a put in one txn sees the put"
    res = await s.txn([Compare.absent(k)], [Op.put(k, b"v2")], [Op.get(k)])
    assert not res.succeeded
    assert res.gets[0] is not None and res.gets[0].value == b"v1"
    res = await s.txn([Compare.exists(k)], [Op.put(k, b"v3")])
    assert res.succeeded and (await s.get(k)).value == b"v3"  # type: ignore[union-attr]


async def test_txn_is_one_revision_and_reads_leave_it_alone(ctx: Ctx) -> None:
    s = ctx.store
    await s.put(ctx.k("gone"), b"x")
    before = await ctx.revision()
    res = await s.txn([], [Op.put(ctx.k("x"), b"1"), Op.put(ctx.k("y"), b"2"), Op.delete(ctx.k("gone"))])
    assert res.succeeded and res.revision == before + 1
    for name in ("x", "y"):
        kv = await s.get(ctx.k(name))
        assert kv is not None and kv.mod_revision == res.revision == kv.create_revision
    read = await s.txn([Compare.exists(ctx.k("x"))], [Op.get(ctx.k("x")), Op.get(ctx.k("nope"))])
    assert read.succeeded and read.revision == res.revision, "a read-only txn does not bump the revision"
    assert [g.key if g else None for g in read.gets] == [ctx.k("x"), None]
    noop = await s.txn([], [Op.delete(ctx.k("nope")), Op.delete_prefix(ctx.k("nothing/"))])
    assert noop.succeeded and noop.revision == res.revision, "deleting nothing writes nothing"


async def test_txn_mod_revision_fencing(ctx: Ctx) -> None:
    s, k = ctx.store, ctx.k("owner")
    r1 = await s.put(k, b"a")
    assert (await s.txn([Compare.mod_revision_is(k, r1)], [Op.put(k, b"b")])).succeeded
    stale = await s.txn([Compare.mod_revision_is(k, r1)], [Op.put(k, b"c")], [Op.get(k)])
    assert not stale.succeeded, "a writer holding an old epoch is fenced off"
    current = stale.gets[0]
    assert current is not None and current.value == b"b" and current.mod_revision > r1
    assert (await s.txn([Compare(k, "mod", "<", current.mod_revision + 1)], [])).succeeded
    assert not (await s.txn([Compare(k, "mod", ">", current.mod_revision)], [])).succeeded
    assert (await s.txn([Compare(ctx.k("none"), "mod", "==", 0)], [])).succeeded, "absent: mod_revision 0"


async def test_txn_value_compares(ctx: Ctx) -> None:
    s, k = ctx.store, ctx.k("v")
    await s.put(k, b"bbb")
    assert (await s.txn([Compare.value_is(k, b"bbb")], [])).succeeded
    assert not (await s.txn([Compare.value_is(k, b"other")], [])).succeeded
    assert (await s.txn([Compare(k, "value", "!=", b"other")], [])).succeeded
    assert (await s.txn([Compare(k, "value", ">", b"aaa")], [])).succeeded, "bytes compare lexicographically"
    assert (await s.txn([Compare(k, "value", "<", b"c")], [])).succeeded
    missing = ctx.k("missing")
    # etcd: any value compare on a missing key is false, even "!=".
    assert not (await s.txn([Compare.value_is(missing, b"")], [])).succeeded
    assert not (await s.txn([Compare(missing, "value", "!=", b"x")], [])).succeeded


async def test_txn_version_compares(ctx: Ctx) -> None:
    s, k = ctx.store, ctx.k("ver")
    assert (await s.txn([Compare(k, "version", "==", 0)], [])).succeeded, "absent: version 0"
    await s.put(k, b"1")
    await s.put(k, b"2")
    assert (await s.txn([Compare(k, "version", "==", 2)], [])).succeeded
    assert not (await s.txn([Compare(k, "version", ">", 2)], [])).succeeded
    assert (await s.txn([Compare(k, "version", "!=", 1)], [])).succeeded


async def test_txn_all_compares_must_hold(ctx: Ctx) -> None:
    s = ctx.store
    await s.put(ctx.k("a"), b"1")
    res = await s.txn(
        [Compare.exists(ctx.k("a")), Compare.exists(ctx.k("b"))],
        [Op.put(ctx.k("won"), b"")],
        [Op.put(ctx.k("lost"), b""), Op.get(ctx.k("a"))],
    )
    assert not res.succeeded
    assert await s.get(ctx.k("won")) is None
    assert await s.get(ctx.k("lost")) is not None, "the failure branch's writes are applied"
    assert res.gets[0] is not None and res.gets[0].value == b"1"


async def test_txn_putting_one_key_twice_is_refused(ctx: Ctx, request: pytest.FixtureRequest) -> None:
    with pytest.raises(DanubeError):
        await ctx.store.txn([], [Op.put(ctx.k("dup"), b"1"), Op.put(ctx.k("dup"), b"2")])


async def test_txn_with_more_than_128_operations_is_refused(ctx: Ctx, request: pytest.FixtureRequest) -> None:
    ops = [Op.put(ctx.k(f"many/{i:03d}"), b"") for i in range(129)]
    with pytest.raises(DanubeError):
        await ctx.store.txn([], ops)
    assert (await ctx.store.txn([], ops[:128])).succeeded


# ---------------------------------------------------------------- leases


async def test_lease_keys_vanish_on_revoke(ctx: Ctx) -> None:
    s = ctx.store
    lease = await s.grant_lease(30)
    try:
        await s.put(ctx.k("l/a"), b"1", lease=lease)
        await s.put(ctx.k("l/b"), b"2", lease=lease)
        await s.put(ctx.k("l/c"), b"3", lease=lease)
        await s.put(ctx.k("l/c"), b"detached")  # a put without the lease detaches the key
        kv = await s.get(ctx.k("l/a"))
        assert kv is not None and kv.lease == lease
        before = await ctx.revision()
        async with watching(s, ctx.k("l/"), start_revision=before + 1) as w:
            await s.revoke_lease(lease)
            await w.wait_for(lambda evs: len(evs) >= 2, what="two delete events")
            assert [(e.kind, e.key, e.revision) for e in w.events] == [
                ("delete", ctx.k("l/a"), before + 1),
                ("delete", ctx.k("l/b"), before + 1),
            ], "a revoke deletes every key of the lease in one revision"
        kvs, _ = await s.get_prefix(ctx.k("l/"))
        assert [kv.key for kv in kvs] == [ctx.k("l/c")]
    finally:
        await s.revoke_lease(lease)


async def test_keepalive_returns_ttl_then_zero(ctx: Ctx) -> None:
    s = ctx.store
    lease = await s.grant_lease(20)
    assert await s.keepalive(lease) == 20
    await s.revoke_lease(lease)
    assert await s.keepalive(lease) == 0
    await s.revoke_lease(lease)  # revoking an unknown lease is not an error


async def test_put_with_unknown_lease_fails(ctx: Ctx) -> None:
    s = ctx.store
    lease = await s.grant_lease(20)
    await s.revoke_lease(lease)
    with pytest.raises(DanubeError):
        await s.put(ctx.k("orphan"), b"", lease=lease)
    assert await s.get(ctx.k("orphan")) is None


async def test_lease_expires_without_keepalive(ctx: Ctx) -> None:
    # Legitimate difference in timing: etcd expires a lease on its own timer (~TTL plus up to
    # half a second); the fake checks its deadlines (on the loop clock) whenever the store is
    # used. Both remove the key within a few seconds of polling.
    s = ctx.store
    lease = await s.grant_lease(1)
    try:
        await s.put(ctx.k("ttl"), b"", lease=lease)
        assert await s.get(ctx.k("ttl")) is not None
        await wait_until(lambda: _absent(s, ctx.k("ttl")), timeout_s=10, what="the leased key to expire")
        assert await s.keepalive(lease) == 0
    finally:
        await s.revoke_lease(lease)


async def _absent(s: MetadataStore, key: str) -> bool:
    return await s.get(key) is None


async def test_memory_expire_lease_hook(memory_store: MemoryStore) -> None:
    """Fake only: ``expire_lease`` acts like a TTL running out (what KeptLease tests rely on)."""
    lease = await memory_store.grant_lease(60)
    await memory_store.put("/m/x", b"", lease=lease)
    memory_store.expire_lease(lease)
    assert await memory_store.get("/m/x") is None
    assert await memory_store.keepalive(lease) == 0


# ---------------------------------------------------------------- watches


async def test_watch_from_now_sees_only_later_events(ctx: Ctx) -> None:
    s, p = ctx.store, ctx.k("w/")
    await s.put(p + "before", b"old")
    async with watching(s, p) as w:
        # "From now" begins when the watch starts, which the test cannot observe directly:
        # write ticks until one is seen. Everything after the first tick seen must arrive.
        ticks = 0

        async def tick() -> bool:
            nonlocal ticks
            ticks += 1
            await s.put(f"{p}tick/{ticks:04d}", b"")
            return bool(w.events)

        await wait_until(tick, what="the watch to start")
        r_a = await s.put(p + "a", b"1")
        r_b = await s.put(p + "b", b"2")
        await s.delete(p + "a")
        await s.put(ctx.k("elsewhere"), b"")  # outside the prefix
        await w.wait_for_key(p + "b")
        await w.wait_for(lambda evs: evs[-1].kind == "delete", what="the delete event")
        keys = [e.key for e in w.events]
        assert p + "before" not in keys
        seen_ticks = [k for k in keys if "/tick/" in k]
        first = int(seen_ticks[0].rsplit("/", 1)[1])
        assert seen_ticks == [f"{p}tick/{i:04d}" for i in range(first, ticks + 1)], (
            "no tick skipped or repeated"
        )
        rest = [e for e in w.events if "/tick/" not in e.key]
        assert shape(rest) == [
            ("put", p + "a", b"1", r_a, r_a),
            ("put", p + "b", b"2", r_b, r_b),
            ("delete", p + "a", b"", r_b + 1, 0),
        ]


async def test_watch_from_past_revision_replays_then_follows(ctx: Ctx) -> None:
    s, p = ctx.store, ctx.k("h/")
    r1 = await s.put(p + "a", b"1")
    r2 = await s.put(p + "b", b"2")
    r3 = await s.put(p + "a", b"3")
    await s.delete(p + "b")
    r4 = r3 + 1
    tx = await s.txn([], [Op.put(p + "c", b"4"), Op.put(p + "d", b"5")])
    r5 = tx.revision
    await s.put(ctx.k("other"), b"")  # outside the prefix: not seen
    history = [
        ("put", p + "a", b"1", r1, r1),
        ("put", p + "b", b"2", r2, r2),
        ("put", p + "a", b"3", r3, r1),
        ("delete", p + "b", b"", r4, 0),
        ("put", p + "c", b"4", r5, r5),
        ("put", p + "d", b"5", r5, r5),
    ]
    async with watching(s, p, start_revision=r1) as w:
        await w.wait_for(lambda evs: len(evs) >= len(history), what="the replayed history")
        r6 = await s.put(p + "e", b"6")
        await w.wait_for_key(p + "e")
        assert shape(w.events) == [*history, ("put", p + "e", b"6", r6, r6)]
    async with watching(s, p, start_revision=r3) as w:
        await w.wait_for_key(p + "e")
        assert shape(w.events) == [*history[2:], ("put", p + "e", b"6", r6, r6)], (
            "replay starts at start_revision"
        )


async def test_watch_misses_nothing_while_its_consumer_writes(
    ctx: Ctx, request: pytest.FixtureRequest
) -> None:
    s, p = ctx.store, ctx.k("chain/")
    seen: list[str] = []

    async def consume(start: int) -> None:
        # Each event makes the consumer write the next key before it asks for more events.
        async for ev in s.watch_prefix(p, start_revision=start):
            seen.append(ev.key)
            n = int(ev.key.rsplit("/", 1)[1])
            if n == 5:
                return
            await s.put(f"{p}{n + 1}", b"")

    r0 = await s.put(p + "0", b"")
    try:
        await asyncio.wait_for(consume(r0), timeout=5)
    except TimeoutError:
        pytest.fail(f"the watch stopped delivering: saw only {seen}")
    assert seen == [f"{p}{i}" for i in range(6)]


async def test_watches_are_independent(ctx: Ctx) -> None:
    s, p = ctx.store, ctx.k("two/")
    start = await ctx.revision() + 1
    async with watching(s, p, start_revision=start) as w1, watching(s, p + "x/", start_revision=start) as w2:
        await s.put(p + "a", b"")
        await s.put(p + "x/b", b"")
        await w1.wait_for(lambda evs: len(evs) == 2, what="both events on the outer prefix")
        await w2.wait_for_key(p + "x/b")
        assert [e.key for e in w1.events] == [p + "a", p + "x/b"]
        assert [e.key for e in w2.events] == [p + "x/b"]


async def _compact(ctx: Ctx, revision: int) -> None:
    if isinstance(ctx.store, MemoryStore):
        ctx.store.compact(revision)
        return
    from aetcd import rpc

    stub = ctx.store._kv_stub  # type: ignore[attr-defined]
    await stub.Compact(rpc.CompactionRequest(revision=revision, physical=True), timeout=5)


async def test_watch_from_compacted_revision_raises(ctx: Ctx) -> None:
    s, p = ctx.store, ctx.k("cmp/")
    r1 = await s.put(p + "a", b"1")
    r2 = await s.put(p + "a", b"2")
    await _compact(ctx, r2)
    with pytest.raises(WatchCompacted) as info:
        async for _ in s.watch_prefix(p, start_revision=r1):
            pytest.fail("no event may be delivered from a compacted revision")
    assert info.value.compact_revision >= r2
    async with watching(s, p, start_revision=r2) as w:  # the compaction revision itself is kept
        await w.wait_for_key(p + "a")
        assert shape(w.events) == [("put", p + "a", b"2", r2, r1)]
