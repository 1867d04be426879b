"""The broker-wide cursor flush (shared fenced transactions, per-topic fallback) and the policy
watch's routing, against the in-memory metadata store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_broker.dispatch.reliable.cursor_batch import CursorWrite, batches, chunk_sizes, combined
from danube_broker.dispatch.reliable.maintenance import Maintenance
from danube_broker.dispatch.reliable.policy_watch import PolicyWatch
from danube_common.errors import DanubeError, MetadataUnavailable
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Compare, Op, TxnResult
from danube_common.topic_name import TopicName
from tests.support import wait_until

pytestmark = pytest.mark.unit

KEYS = Keys("unit")


# ---------------------------------------------------------------- chunking (pure)
@pytest.mark.parametrize(
    ("sizes", "groups"),
    [
        ([], []),
        ([1], [[0]]),
        ([1] * 5, [[0, 1, 2, 3, 4]]),
        ([60, 40, 1], [[0, 1], [2]]),
        ([60, 41], [[0], [1]]),
        ([150], [[0]]),  # too big for one transaction: alone (its store splits it)
        ([3, 150, 3], [[0], [1], [2]]),
        ([100, 100], [[0], [1]]),
    ],
)
def test_chunks_hold_at_most_max_ops(sizes: list[int], groups: list[list[int]]) -> None:
    assert chunk_sizes(sizes, 100) == groups


@given(
    st.lists(st.integers(min_value=1, max_value=250), max_size=80), st.integers(min_value=1, max_value=128)
)
def test_chunks_keep_order_and_bounds(sizes: list[int], max_ops: int) -> None:
    groups = chunk_sizes(sizes, max_ops)
    assert [i for g in groups for i in g] == list(range(len(sizes)))
    for g in groups:
        ops = sum(sizes[i] for i in g)
        assert len(g) == 1 or (ops <= max_ops and len(g) <= max_ops)


def test_a_batch_combines_every_fence_and_op() -> None:
    w = [
        CursorWrite(i, Compare.mod_revision_is(f"/o/{i}", i), [Op.put(f"/c/{i}/{j}", b"x") for j in range(i)])
        for i in (1, 2)
    ]
    compares, ops = combined(batches(w)[0])
    assert [c.key for c in compares] == ["/o/1", "/o/2"] and [o.key for o in ops] == [
        "/c/1/0",
        "/c/2/0",
        "/c/2/1",
    ]


# ---------------------------------------------------------------- the maintenance loop
class CountingStore(MemoryStore):
    """Records the size of every transaction; can fail the next ones."""

    def __init__(self) -> None:
        super().__init__()
        self.txns: list[tuple[int, int]] = []
        self.fail_next = 0

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        if self.fail_next:
            self.fail_next -= 1
            raise MetadataUnavailable("etcd is down (test)")
        assert len(success) <= 128 and len(compares) <= 128, "etcd's --max-txn-ops"
        self.txns.append((len(compares), len(success)))
        return await super().txn(compares, success, failure)


class FakeTopic:
    """Just enough of a reliable topic: cursors to write, fenced by its owner key's revision."""

    def __init__(self, store: MemoryStore, name: str, epoch: int, subs: int = 1) -> None:
        self.name = name
        self.store = store
        self.epoch = epoch
        self.cursors = {f"s{i}": -1 for i in range(subs)}
        self.persisted = dict(self.cursors)
        self.lock = asyncio.Lock()
        self.alone = 0
        self.fenced = False
        self.retention = 0
        #: What retention could cut (retention_due), and how much one apply_retention cuts.
        self.sealed_segments = 1
        self.cut_per_retention = 0
        self.due_checks = 0

    def key(self, sub: str) -> str:
        return f"/unit/cursors/{self.name}/{sub}"

    def owner(self) -> str:
        return f"/unit/owners/{self.name}"

    def changed(self) -> dict[str, int]:
        return {s: c for s, c in self.cursors.items() if c != self.persisted[s]}

    async def begin_cursor_flush(self) -> CursorWrite[Any] | None:
        changed = self.changed()
        if self.fenced or not changed or self.lock.locked():
            return None
        await self.lock.acquire()
        ops = [Op.put(self.key(s), {"cursor": c}) for s, c in changed.items()]
        return CursorWrite(self, Compare.mod_revision_is(self.owner(), self.epoch), ops, changed)

    async def end_cursor_flush(self, write: CursorWrite[Any], outcome: bool | DanubeError) -> bool:
        try:
            if outcome is True:
                self.persisted.update(write.changed)
                return True
            if outcome is False:
                self.alone += 1
                res = await self.store.txn([write.fence], write.ops)
                if res.succeeded:
                    self.persisted.update(write.changed)
                    return True
                self.fenced = True
            return False
        finally:
            self.lock.release()

    def abort_cursor_flush(self, write: CursorWrite[Any]) -> None:
        self.lock.release()

    def retention_due(self) -> bool:
        self.due_checks += 1
        return self.sealed_segments > 0

    async def apply_retention(self) -> None:
        self.retention += 1
        self.sealed_segments = max(0, self.sealed_segments - self.cut_per_retention)


async def own(store: MemoryStore, topic: FakeTopic) -> None:
    topic.epoch = await store.put(topic.owner(), {"broker_id": "1"})


@pytest.fixture
async def store() -> Any:
    s = CountingStore()
    yield s
    await s.aclose()


def maintenance(store: MemoryStore, **kw: Any) -> Maintenance:
    failures: list[BaseException] = []
    m = Maintenance(
        store,
        flush_interval_s=0.001,
        retention_interval_s=3600,
        on_failure=lambda _w, e: failures.append(e),
        **kw,
    )
    return m


async def test_many_topics_share_few_transactions(store: CountingStore) -> None:
    m = maintenance(store)
    topics = [FakeTopic(store, f"t{i}", 0, subs=3) for i in range(250)]
    for t in topics:
        await own(store, t)
        m.register(t)
    store.txns.clear()
    for i, t in enumerate(topics):
        t.cursors = {s: i for s in t.cursors}
        m.mark_dirty(t)
    await wait_until(lambda: all(t.persisted == t.cursors for t in topics), what="every cursor written")
    # 750 writes, 99 per shared transaction (33 topics x 3): 8 transactions, not 250
    assert len(store.txns) == 8 and all(ops <= 100 for _, ops in store.txns)
    assert m.shared_writes == 750 and m.refused_txns == 0
    for t in topics:
        for s, c in t.cursors.items():
            assert await store.get_json(t.key(s)) == {"cursor": c}
    await wait_until(lambda: all(t.retention >= 1 for t in topics), what="retention after the flush")
    await m.aclose()


async def test_a_fenced_topic_does_not_stop_the_others(store: CountingStore) -> None:
    m = maintenance(store)
    topics = [FakeTopic(store, f"t{i}", 0) for i in range(5)]
    for t in topics:
        await own(store, t)
        m.register(t)
    await store.put(topics[2].owner(), {"broker_id": "2"})  # t2 moved on: our epoch is stale
    for t in topics:
        t.cursors["s0"] = 7
        m.mark_dirty(t)
    await wait_until(lambda: topics[2].fenced, what="t2 refused")
    others = [t for i, t in enumerate(topics) if i != 2]
    assert all(t.persisted == {"s0": 7} for t in others)
    assert all(t.alone == 1 for t in topics) and m.refused_txns == 1
    assert await store.get_json(topics[2].key("s0")) is None
    for t in others:
        assert await store.get_json(t.key("s0")) == {"cursor": 7}
    await m.aclose()


async def test_an_etcd_error_leaves_the_topics_dirty_until_the_next_flush(store: CountingStore) -> None:
    m = maintenance(store)
    topics = [FakeTopic(store, f"t{i}", 0) for i in range(3)]
    for t in topics:
        await own(store, t)
        m.register(t)
    store.fail_next = 1
    failed: list[bool | DanubeError] = []
    original = FakeTopic.end_cursor_flush

    async def end(self: FakeTopic, write: CursorWrite[Any], outcome: bool | DanubeError) -> bool:
        failed.append(outcome)
        if isinstance(outcome, DanubeError):
            m.mark_dirty(self)  # what a reliable topic does
        return await original(self, write, outcome)

    FakeTopic.end_cursor_flush = end  # type: ignore[method-assign]
    try:
        for t in topics:
            t.cursors["s0"] = 3
            m.mark_dirty(t)
        await wait_until(
            lambda: all(t.persisted == {"s0": 3} for t in topics), what="written after the error"
        )
    finally:
        FakeTopic.end_cursor_flush = original  # type: ignore[method-assign]
    assert sum(isinstance(o, DanubeError) for o in failed) == 3
    await m.aclose()


async def test_closed_topics_are_not_flushed_and_idle_brokers_do_not_write(store: CountingStore) -> None:
    m = maintenance(store)
    t = FakeTopic(store, "t", 0)
    await own(store, t)
    store.txns.clear()
    m.register(t)
    m.unregister(t)
    t.cursors["s0"] = 1
    m.mark_dirty(t)
    assert await m.flush_dirty() == []
    assert store.txns == [] and m.topics == 0
    await m.aclose()


# ---------------------------------------------------------------- the policy watch
class Listener:
    def __init__(self) -> None:
        self.changes: list[tuple[str, Any]] = []
        self.reloads: list[dict[str, Any]] = []

    def policy_changed(self, subscription: str, stored: dict[str, Any] | None) -> None:
        self.changes.append((subscription, stored))

    def policies_reloaded(self, stored: dict[str, dict[str, Any]]) -> None:
        self.reloads.append(stored)


A, B = TopicName("default", "a"), TopicName("default", "b")


async def test_events_go_to_their_topic_only_and_above_its_read() -> None:
    store = MemoryStore()
    w = PolicyWatch(store, KEYS, on_failure=lambda _w, e: None)
    la, lb = Listener(), Listener()
    old = await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 1})
    assert w.follow(A, la, old) and w.follow(B, lb, old)
    await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 2})
    await store.put(KEYS.subscription_policy(TopicName("default", "other"), "s"), {"max_redeliveries": 9})
    await store.put(KEYS.subscription_cursor(A, "s"), {"cursor": 5})  # not a policy: never seen
    await store.delete(KEYS.subscription_policy(A, "s"))
    await wait_until(lambda: len(la.changes) == 2, what="a's two changes")
    assert la.changes == [("s", {"max_redeliveries": 2}), ("s", None)] and lb.changes == []
    assert store.open_watches == 1
    await w.aclose()
    assert store.open_watches == 0
    await store.aclose()


async def test_a_topic_that_read_before_the_watch_passed_it_must_read_again() -> None:
    store = MemoryStore()
    w = PolicyWatch(store, KEYS, on_failure=lambda _w, e: None)
    first = await store.put("/unit/x", b"1")
    assert w.follow(A, Listener(), first)
    rev = await store.put(KEYS.subscription_policy(B, "s"), {"max_redeliveries": 3})
    await wait_until(lambda: w.seen_revision >= rev, what="the watch passed the write")
    lb = Listener()
    assert not w.follow(B, lb, rev - 1)  # read before that write: missed it
    assert w.follow(B, lb, rev)
    w.unfollow(B, lb)
    assert w.following == 1
    await w.aclose()
    await store.aclose()


async def test_compaction_hands_each_topic_all_its_policies() -> None:
    store = MemoryStore()
    w = PolicyWatch(store, KEYS, on_failure=lambda _w, e: None)
    la = Listener()
    rev = await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 1})
    await store.put(KEYS.subscription_policy(B, "s"), {"max_redeliveries": 2})
    assert w.follow(A, la, rev)
    revision = await w.reload()
    assert la.reloads == [{"s": {"max_redeliveries": 1}}] and w.seen_revision == revision
    await w.aclose()
    await store.aclose()


async def test_a_compacted_watch_reads_every_policy_again_and_goes_on() -> None:
    store = MemoryStore()
    w = PolicyWatch(store, KEYS, on_failure=lambda _w, e: None)
    la = Listener()
    old = await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 1})
    await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 4})
    store.compact(old + 2)
    assert w.follow(A, la, old)
    await wait_until(lambda: la.reloads == [{"s": {"max_redeliveries": 4}}], what="the re-read")
    await store.put(KEYS.subscription_policy(A, "s"), {"max_redeliveries": 5})
    await wait_until(lambda: la.changes == [("s", {"max_redeliveries": 5})], what="the watch goes on")
    await w.aclose()
    await store.aclose()


async def test_the_periodic_sweep_walks_only_topics_with_something_sealed(store: CountingStore) -> None:
    m = maintenance(store)
    idle = [FakeTopic(store, f"idle{i}", 0) for i in range(2000)]
    for t in idle:
        t.sealed_segments = 0  # only the active segment: nothing retention could cut
        m.register(t)
    busy = [FakeTopic(store, f"busy{i}", 0) for i in range(3)]
    for t in busy:
        t.sealed_segments = 2
        t.cut_per_retention = 1
        m.register(t)
    assert (m.topics, m.retainable) == (2003, 3)
    await m.sweep()
    assert [t.retention for t in busy] == [1, 1, 1]
    assert all(t.retention == 0 and t.due_checks == 1 for t in idle)  # asked once, at register
    # An idle topic seals a segment: it is in the next sweeps until retention leaves it none.
    idle[7].sealed_segments = 1
    idle[7].cut_per_retention = 1
    m.sealed(idle[7])
    assert m.retainable == 4
    await m.sweep()
    assert idle[7].retention == 1 and [t.retention for t in busy] == [2, 2, 2]
    assert m.retainable == 0  # everything sealed was cut
    await m.sweep()
    assert idle[7].retention == 1 and [t.retention for t in busy] == [2, 2, 2]
    assert sum(t.due_checks for t in idle) == 2000 + 2  # idle[7]: checked before and after its cut
    # Closed topics leave the sweep; a sealed() for a topic no longer registered is ignored.
    m.unregister(busy[0])
    m.sealed(busy[0])
    assert m.retainable == 0 and m.topics == 2002
    await m.aclose()


async def test_a_cancellation_escaping_a_topic_stops_the_broker_loudly(store: CountingStore) -> None:
    """A CancelledError out of a topic's retention (an awaited task of the topic cancelled by
    its closing) would end the loop as "cancelled", which aclose alone may do: cursor flushes
    and retention would stop without a word. It is reported as a failure (the broker stops)."""
    failures: list[tuple[str, BaseException]] = []
    m = Maintenance(
        store,
        flush_interval_s=0.001,
        retention_interval_s=0.01,
        on_failure=lambda what, e: failures.append((what, e)),
    )
    topic = FakeTopic(store, "t", 0)
    topic.sealed_segments = 1

    async def cancelled_inside() -> None:
        raise asyncio.CancelledError  # what awaiting a cancelled task raises

    topic.apply_retention = cancelled_inside  # type: ignore[method-assign]
    m.register(topic)
    await wait_until(lambda: failures, what="the failure reported")
    assert "maintenance loop" in failures[0][0] and "cancelled unexpectedly" in str(failures[0][1])
    await m.aclose()

    closing = Maintenance(
        store,
        flush_interval_s=0.001,
        retention_interval_s=3600,
        on_failure=lambda w, e: failures.append((w, e)),
    )
    closing.register(FakeTopic(store, "u", 0))
    await closing.aclose()
    assert len(failures) == 1, "closing it is not a failure"
