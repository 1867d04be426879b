"""Load history on the local-directory object store: keys, batches, windows, failures, pruning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from danube_common.load import LoadReport, TopicLoad
from danube_common.load_history import (
    HOUR_MS,
    LoadHistoryReader,
    LoadHistoryWriter,
    hours_between,
    object_key,
    parse_key,
)
from danube_common.objstore import ObjectStoreUnavailable
from danube_common.objstore.base import ObjectInfo
from danube_common.objstore.local import LocalObjectStore
from tests.support import wait_until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

# 2025-01-31 07:59:50 UTC
T0 = int(datetime(2025, 1, 31, 7, 59, 50, tzinfo=UTC).timestamp() * 1000)


def rep(broker: str, at_ms: int, rate: float = 1.0) -> LoadReport:
    return LoadReport.build(
        broker,
        at_ms,
        [TopicLoad("/default/t", msg_rate_in=rate)],
        interval_s=5,
        cpu_usage=0.1,
        cpu_cores=2,
        mem_rss_bytes=1,
        mem_total_bytes=2,
        max_topics=10,
    )


class FlakyStore(LocalObjectStore):
    """The local store, with puts that fail while ``failing`` is set."""

    failing = False

    async def put(self, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        if self.failing:
            raise ObjectStoreUnavailable("injected: the store is down")
        return await super().put(key, data, if_absent=if_absent)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FlakyStore]:
    s = await FlakyStore.open(tmp_path / "objects")
    yield s
    await s.aclose()


def test_keys_are_partitioned_by_utc_hour() -> None:
    key = object_key("b1", T0)
    assert key == f"load-history/date=2025-01-31/hour=07/b1-{T0}.jsonl"
    parsed = parse_key(key)
    assert parsed is not None
    assert (parsed.broker_id, parsed.at_ms) == ("b1", T0)
    assert parsed.hour_ms == T0 - T0 % HOUR_MS
    assert parse_key("load-history/date=2025-01-31/hour=07/not-a-batch.txt") is None
    assert parse_key("segments/x") is None
    assert parse_key(object_key("broker-with-dashes", 5)) is not None
    with pytest.raises(ValueError, match="broker id"):
        object_key("a/b", T0)
    assert hours_between(T0, T0 + 20_000) == [T0 - T0 % HOUR_MS, T0 - T0 % HOUR_MS + HOUR_MS]
    assert hours_between(T0, T0) == []


async def test_flush_writes_batches_split_by_broker_and_hour(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=2)
    for i in range(3):  # 07:59:50, 07:59:55, 08:00:00 -> two hours
        w.add(rep("b1", T0 + 5000 * i, rate=i))
    w.add(rep("b2", T0, rate=9))
    assert await w.flush() == 3
    keys = [i.key for i in await store.list("load-history/")]
    assert keys == [
        f"load-history/date=2025-01-31/hour=07/b1-{T0}.jsonl",
        f"load-history/date=2025-01-31/hour=07/b2-{T0}.jsonl",
        f"load-history/date=2025-01-31/hour=08/b1-{T0 + 10_000}.jsonl",
    ]
    reader = LoadHistoryReader(store)
    first = await reader.read(keys[0])
    assert [r.at_ms for r in first] == [T0, T0 + 5000]
    assert first[1] == rep("b1", T0 + 5000, rate=1)  # round-trips through JSON lines
    assert w.pending == 0 and await w.flush() == 0


async def test_batches_are_cut_at_max_batch(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=4)
    for i in range(10):
        w.add(rep("b1", T0 - 60_000 + 1000 * i))
    assert await w.flush() == 3  # 4 + 4 + 2
    reader = LoadHistoryReader(store)
    keys = await reader.list_window(T0 - 3_600_000, T0 + 1)
    assert [len(await reader.read(k)) for k in keys] == [4, 4, 2]


async def test_window_lists_overlapping_objects_and_reads_reports_inside(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=3)
    ats = [T0 - 20_000, T0 - 10_000, T0, T0 + 10_000, T0 + 20_000, T0 + 30_000]
    for at in ats:
        w.add(rep("b1", at))
    await w.flush()
    reader = LoadHistoryReader(store)
    # [T0 - 5 s, T0 + 15 s): the first object (from T0 - 20 s) may hold later reports: listed.
    keys = await reader.list_window(T0 - 5000, T0 + 15_000)
    assert [parse_key(k).at_ms for k in keys] == [T0 - 20_000, T0 + 10_000]  # type: ignore[union-attr]
    inside = await reader.read_window(T0 - 5000, T0 + 15_000)
    assert [r.at_ms for r in inside] == [T0, T0 + 10_000]
    assert await reader.list_window(T0 + 40_000, T0 + 40_000) == []


async def test_a_failed_flush_keeps_the_reports_for_the_next_one(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=2)
    for i in range(3):
        w.add(rep("b1", T0 - 30_000 + 1000 * i))
    store.failing = True
    with pytest.raises(ObjectStoreUnavailable):
        await w.flush()
    assert w.pending == 3
    w.add(rep("b1", T0 - 20_000))
    store.failing = False
    assert await w.flush() == 2
    reports = await LoadHistoryReader(store).read_window(T0 - 60_000, T0)
    assert [r.at_ms for r in reports] == [T0 - 30_000, T0 - 29_000, T0 - 28_000, T0 - 20_000]


async def test_a_full_buffer_drops_the_oldest(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=2, max_pending=4)
    for i in range(6):
        w.add(rep("b1", T0 - 10_000 + 1000 * i))
    assert w.pending == 4 and w.dropped == 2
    await w.flush()
    reports = await LoadHistoryReader(store).read_window(T0 - 60_000, T0)
    assert [r.at_ms for r in reports] == [T0 - 8000, T0 - 7000, T0 - 6000, T0 - 5000]


async def test_the_flusher_writes_a_full_batch_without_waiting_for_the_interval(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=3600, max_batch=3).start()
    try:
        for i in range(3):
            w.add(rep("b1", T0 + i))
        await wait_until(lambda: w.objects_written == 1, timeout_s=5, what="a full batch flushed")
        w.add(rep("b1", T0 + 100))  # a partial batch waits for the interval ...
        assert w.pending == 1
    finally:
        await w.aclose()  # ... or the close
    assert w.pending == 0 and w.objects_written == 2
    with pytest.raises(RuntimeError, match="closed"):
        w.add(rep("b1", T0))


async def test_the_flusher_writes_partial_batches_every_interval(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=0.05, max_batch=100).start()
    try:
        w.add(rep("b1", T0))
        await wait_until(lambda: w.objects_written == 1, timeout_s=5, what="the periodic flush")
    finally:
        await w.aclose()


async def test_prune_deletes_whole_old_partitions_only(store: FlakyStore) -> None:
    w = LoadHistoryWriter(store, flush_interval_s=60, max_batch=1)
    hour = T0 - T0 % HOUR_MS
    for h in range(-3, 1):  # four hours, two brokers each
        for b in ("b1", "b2"):
            w.add(rep(b, hour + h * HOUR_MS + 1000))
    await w.flush()
    await store.put("load-history/README", b"not a batch")  # not ours: left alone
    reader = LoadHistoryReader(store)
    # Cut in the middle of hour -2: hours -3 (ended) go, hour -2 (not over) stays.
    assert await reader.prune(hour - 2 * HOUR_MS + 10, page=3) == 2
    left = [parse_key(i.key) for i in await store.list("load-history/date=")]
    assert sorted({p.hour_ms for p in left if p}) == [hour - 2 * HOUR_MS, hour - HOUR_MS, hour]
    assert await reader.prune(hour + HOUR_MS) == 6
    assert [i.key for i in await store.list("load-history/")] == ["load-history/README"]


def test_writer_arguments_are_checked(tmp_path: Path) -> None:
    s = LocalObjectStore(tmp_path)
    with pytest.raises(ValueError, match="flush_interval_s"):
        LoadHistoryWriter(s, flush_interval_s=0)
    with pytest.raises(ValueError, match="max_pending"):
        LoadHistoryWriter(s, max_batch=10, max_pending=5)
