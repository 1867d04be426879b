"""History read back from object storage: the remote reader, the tiered log, the retention gate
and where a topic continues after a takeover. Object storage is the local-directory backend
(tmp_path), etcd the in-memory fake; the WAL is the real one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import danube_broker.dispatch.reliable.engine as engine_mod
from danube_broker.dispatch.base import SubType
from danube_broker.metrics import BrokerEvents
from danube_broker.registry import BrokerRegistry
from danube_broker.tiering import Tiering
from danube_broker.wal import Durability, TopicLog, WalConfig
from danube_broker.wal.errors import HistoryGap
from danube_broker.wal.remote import ChunkCache, RemoteHistory
from danube_broker.wal.tiered import TieredLog
from danube_common.errors import CorruptData
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import LocalObjectStore, ObjectNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.policies import topic_policies
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.support.segments import FakeUploader, put_history
from tests.unit.broker.helpers import BROKER_URL, Clock, config

pytestmark = pytest.mark.unit

TOPIC = "/default/history"
T = TopicName.parse(TOPIC)
KEYS = Keys("unit")


def rec(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 3


@pytest.fixture
async def objects(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    store = await LocalObjectStore.open(tmp_path / "objects")
    yield store
    await store.aclose()


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, KEYS)
    await res.create_namespace("default")
    return res


async def history(
    objects: LocalObjectStore, meta: MemoryStore, *, chunk_bytes: int = 64, cache_bytes: int = 1 << 20
) -> RemoteHistory:
    return await RemoteHistory.open(
        T, objects=objects, meta=meta, keys=KEYS, cache=ChunkCache(cache_bytes), chunk_bytes=chunk_bytes
    )


async def open_log(directory: Path, *, initial_offset: int = 0, segment_max_bytes: int = 4096) -> TopicLog:
    cfg = WalConfig(segment_max_bytes=segment_max_bytes, tail_cache_bytes=0)
    return await TopicLog.open(directory, cfg=cfg, durability=Durability.NONE, initial_offset=initial_offset)


async def read_all(log: Any, start: int, end: int, batch: int = 7) -> list[Any]:
    """Everything in ``[start, end)`` of a TieredLog or a RemoteHistory, ``batch`` at a time."""
    out: list[Any] = []
    at = start
    while at < end:
        if isinstance(log, RemoteHistory):
            got = await log.read(at, batch, 1 << 20)
        else:
            got = await log.read_async(at, batch)
        assert got, f"nothing read at {at}"
        out.extend(got)
        at = got[-1].offset + 1
    return out


# ---------------------------------------------------------------- reading
async def test_reads_cross_descriptors_and_hand_over_to_the_local_log(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    """A topic that moved here at offset 40: 0..39 only in object storage (two objects), 40.. local."""
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(20)])
    await put_history(objects, memory_store, KEYS, T, 20, [rec(i) for i in range(20, 40)])
    local = await open_log(tmp_path / "wal", initial_offset=40)
    await local.append([rec(i) for i in range(40, 60)], [1] * 20)
    h = await history(objects, memory_store, chunk_bytes=64)  # frames straddle chunks
    log = TieredLog(local, h)
    assert (log.first_offset, local.first_offset, log.next_offset) == (0, 40, 60)

    got = await read_all(log, 0, 60)

    assert [e.offset for e in got] == list(range(60)), "every offset once, in order"
    assert [e.record for e in got] == [rec(i) for i in range(60)]
    remote = h.stats()
    assert remote.entries == 40 and remote.gets > 0 and remote.descriptors == 2
    # A sequential replay continues where the last read stopped: no object is read twice.
    assert remote.bytes_fetched <= sum(d.size_bytes for d in h.descriptors)
    await local.aclose()


async def test_a_read_stays_within_one_object_and_stops_at_the_local_first_offset(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    # Object storage holds 0..29, the local log 20..: the overlap is served locally.
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(30)])
    local = await open_log(tmp_path / "wal", initial_offset=20)
    await local.append([rec(i) for i in range(20, 25)], [1] * 5)
    log = TieredLog(local, await history(objects, memory_store))
    assert [e.offset for e in await log.read_async(15, 100)] == [15, 16, 17, 18, 19]
    assert [e.offset for e in await log.read_async(20, 100)] == [20, 21, 22, 23, 24]
    assert [e.offset for e in await log.read_async(3, 2)] == [3, 4]
    await local.aclose()


async def test_trimmed_local_segments_are_read_back_from_object_storage(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    data_dir = tmp_path / "data"
    local = await open_log(data_dir / T.namespace / T.local, segment_max_bytes=600)
    for i in range(0, 120, 4):
        await local.append([rec(j) for j in range(i, i + 4)], [1] * 4)
    uploader = FakeUploader(data_dir, objects, memory_store, KEYS)
    assert await uploader.upload(T, local.durable_offset) == 120
    await local.truncate_before(100)
    assert 0 < local.first_offset <= 100 and local.stats().segments > 1
    log = TieredLog(local, await history(objects, memory_store, chunk_bytes=256))

    got = await read_all(log, 0, 120, batch=50)

    assert [e.offset for e in got] == list(range(120))
    assert [e.record for e in got] == [rec(i) for i in range(120)]
    await local.aclose()


async def test_new_descriptors_are_found_when_a_read_misses(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(10)])
    h = await history(objects, memory_store)
    await put_history(objects, memory_store, KEYS, T, 10, [rec(i) for i in range(10, 20)])
    assert h.end_offset == 10
    assert [e.offset for e in await h.read(12, 3, 1 << 20)] == [12, 13, 14]
    assert h.end_offset == 20


# ---------------------------------------------------------------- the chunk cache
async def test_the_chunk_cache_stays_within_its_bound_and_is_shared(
    objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    d = await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(200)])
    cache = ChunkCache(3 * 512)
    h = await RemoteHistory.open(
        T, objects=objects, meta=memory_store, keys=KEYS, cache=cache, chunk_bytes=512
    )

    got = await read_all(h, 0, 200, batch=9)

    assert [e.offset for e in got] == list(range(200))
    assert cache.bytes <= 3 * 512 and len(cache) <= 3
    assert cache.evictions >= d.size_bytes // 512 - 3
    gets = h.gets
    assert [e.offset for e in await h.read(199, 1, 1 << 20)] == [199]
    assert h.gets == gets, "the newest chunks are still cached"

    # Readers missing the same chunk at once share one GET.
    cold = ChunkCache(1 << 20)
    h2 = await RemoteHistory.open(
        T, objects=objects, meta=memory_store, keys=KEYS, cache=cold, chunk_bytes=1 << 16
    )
    h3 = await RemoteHistory.open(
        T, objects=objects, meta=memory_store, keys=KEYS, cache=cold, chunk_bytes=1 << 16
    )
    a, b = await asyncio.gather(h2.read(0, 200, 1 << 20), h3.read(0, 200, 1 << 20))
    assert [e.offset for e in a] == [e.offset for e in b] == list(range(200))
    assert h2.gets + h3.gets == -(-d.size_bytes // (1 << 16)), "one GET per chunk for both readers"


async def test_a_zero_byte_cache_keeps_nothing(objects: LocalObjectStore, memory_store: MemoryStore) -> None:
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(50)])
    cache = ChunkCache(0)
    h = await RemoteHistory.open(
        T, objects=objects, meta=memory_store, keys=KEYS, cache=cache, chunk_bytes=256
    )
    assert len(await read_all(h, 0, 50)) == 50
    assert cache.bytes == 0 and len(cache) == 0


# ---------------------------------------------------------------- damage and gaps
async def test_a_crc_mismatch_is_corrupt_data_never_skipped(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    d = await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(20)])
    path = tmp_path / "objects" / d.object_key
    data = bytearray(path.read_bytes())
    at = data.index(rec(12)) + 3  # inside record 12
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    h = await history(objects, memory_store, chunk_bytes=100)

    good = await h.read(0, 100, 1 << 20)
    assert [e.offset for e in good] == list(range(12)), "the good entries before the damage are handed out"
    with pytest.raises(CorruptData, match=r"damaged .*offset 12.*crc32c"):
        await h.read(12, 100, 1 << 20)
    with pytest.raises(CorruptData):
        await h.read(15, 1, 1 << 20)  # reached only through the damaged frame
    assert h.stats().errors == 2 and "damaged" in h.stats().last_error


async def test_an_object_that_is_not_what_its_descriptor_says_is_corrupt(
    objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    d = await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(10)])
    await objects.put(d.object_key, (await objects.get(d.object_key))[:-30])  # cut short
    h = await history(objects, memory_store)
    assert [e.offset for e in await h.read(0, 8, 1 << 20)] == list(range(8))
    with pytest.raises(CorruptData, match="holds offsets up to 9"):
        await h.read(9, 1, 1 << 20)


async def test_a_gap_raises_history_gap(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(10)])
    local = await open_log(tmp_path / "wal", initial_offset=20)
    await local.append([rec(20)], [1])
    log = TieredLog(local, await history(objects, memory_store))
    assert log.first_offset == 0
    assert [e.offset for e in await log.read_async(5, 100)] == [5, 6, 7, 8, 9]
    with pytest.raises(HistoryGap, match=r"offset 10 is in no segment descriptor .* local log starts at 20"):
        await log.read_async(10, 100)
    await local.aclose()


@pytest.mark.parametrize(("grace_s", "level"), [(20.0, logging.WARNING), (0.0, logging.ERROR)])
async def test_a_subscription_stalls_loudly_at_a_gap_and_resumes_once_it_is_filled(
    tmp_path: Path,
    objects: LocalObjectStore,
    memory_store: MemoryStore,
    resources: Resources,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    grace_s: float,
    level: int,
) -> None:
    """0..9 and 20.. exist; 10..19 are nowhere: the consumer gets 0..9, then nothing past the gap
    (the reason in stats; logged at WARNING during the grace after a takeover, at ERROR past it),
    and everything in order once the gap is uploaded."""
    monkeypatch.setattr(engine_mod, "HISTORY_GAP_GRACE_S", grace_s)

    def stored(first: int, end: int) -> list[bytes]:
        return [pb.StreamMessage(payload=f"m{i}".encode()).SerializeToString() for i in range(first, end)]

    await put_history(objects, memory_store, KEYS, T, 0, stored(0, 10))
    local = await open_log(tmp_path / "wal", initial_offset=20)
    await local.append(stored(20, 25), [1] * 5)

    async def opener(directory: Path, durability: Durability, initial_offset: int) -> TopicLog:
        return local

    cfg = config(cursor_flush_interval_ms=1)
    reg = BrokerRegistry(cfg, resources, broker_url=BROKER_URL, clock=Clock(), id_seed=1, open_log=opener)
    reg.set_tiering(Tiering(cfg, resources, objects=objects, uploader=None))
    await resources.create_topic(T, dispatch_strategy="reliable")
    with caplog.at_level(logging.WARNING):
        c = await reg.subscribe(
            TOPIC,
            subscription="s",
            consumer_name="c",
            sub_type=SubType.EXCLUSIVE,
            initial_position="earliest",
        )
        c.open_stream()
        got: list[Any] = []

        def offsets() -> list[int]:
            got.extend(c.queue.take(1000))
            return [m.msg_id.topic_offset for m in got]

        await wait_until(lambda: offsets() == list(range(10)), what="the history before the gap")
        stats = await wait_until(
            lambda: (s := reg.stats()[TOPIC].per_subscription["s"]).read_error and s, what="the gap in stats"
        )
        assert "HISTORY_GAP" in stats.read_error and "offset 10" in stats.read_error
        gap = [r for r in caplog.records if "offset 10 is in no segment descriptor" in r.getMessage()]
        assert gap and {r.levelno for r in gap} == {level}, [(r.levelname, r.getMessage()) for r in gap]
        assert ("an ERROR follows if it lasts 20s" in gap[0].getMessage()) == (level == logging.WARNING)
        assert reg.stats()[TOPIC].first_offset == 0
        assert offsets() == list(range(10)), "nothing past the gap is delivered"

    await put_history(objects, memory_store, KEYS, T, 10, stored(10, 20))
    await wait_until(
        lambda: offsets() == list(range(25)), timeout_s=10, what="the rest, in order, after the gap"
    )
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(25)]
    assert reg.stats()[TOPIC].per_subscription["s"].read_error == ""
    reg.close_all("test over")
    await reg.wait_closed()


# ---------------------------------------------------------------- retention
async def test_the_retention_gate_is_the_upload_checkpoint(
    objects: LocalObjectStore, memory_store: MemoryStore, resources: Resources
) -> None:
    tiering = Tiering(config(), resources, objects=objects, uploader=None)
    assert await tiering.retention_gate(TOPIC, 500) == 0, "nothing uploaded: nothing may go"
    await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(30)])
    assert await tiering.retention_gate(TOPIC, 500) == 30
    assert await tiering.retention_gate(TOPIC, 12) == 12


async def test_retention_keeps_local_segments_that_are_not_uploaded(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore, resources: Resources
) -> None:
    data_dir = tmp_path / "data"
    cfg = config(cursor_flush_interval_ms=1, data_dir=str(data_dir), wal={"segment_max_bytes": 400})
    reg = BrokerRegistry(cfg, resources, broker_url=BROKER_URL, clock=Clock(), id_seed=1)
    reg.set_tiering(Tiering(cfg, resources, objects=objects, uploader=None))
    p = await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    c = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    c.open_stream()
    for i in range(10):
        batch = [pb.StreamMessage(payload=f"m{i}-{j}".encode() * 4) for j in range(5)]
        await reg.publish(p, batch, reg.payload_bytes(batch))
    rt = reg.topics[TOPIC].reliable
    assert rt is not None
    topic = reg.topics[TOPIC]
    sub = topic.subscriptions["s"]
    assert sub.engine is not None
    await wait_until(lambda: sub.engine is not None and sub.engine.read_pos == 50, what="all read")
    sub.engine.ack_through(49)
    await rt.flush_cursors()
    await rt.apply_retention()
    assert rt.local.first_offset == 0, "acknowledged but not uploaded: kept"

    # An uploader that is behind: offsets 0..19 are in object storage, the rest only here.
    head = await rt.local.read_async(0, 20)
    await put_history(objects, memory_store, KEYS, T, 0, [e.record for e in head])
    assert rt.local.stats().segments == 10, "one segment per publish"
    await rt.apply_retention()
    assert rt.local.first_offset == 20, "cut below the upload checkpoint only"
    assert rt.log.first_offset == 0, "the history still starts at 0 (object storage)"
    assert reg.stats()[TOPIC].first_offset == 0

    uploader = FakeUploader(data_dir, objects, memory_store, KEYS)
    assert await uploader.upload(T) == 45, "sealed segments only"
    await rt.apply_retention()
    assert rt.local.first_offset == 45, "the open segment is never cut"
    reg.close_all("test over")
    await reg.wait_closed()


# ---------------------------------------------------------------- retention in object storage
async def test_a_cut_moves_the_first_offset_and_an_older_listing_does_not_bring_it_back(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    """0..9, 10..19, 20..39 in object storage, 40.. local, and a floor of 10 from the open (the
    uploader's checkpoint then): retention cuts below 20."""
    first = await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(10)])
    second = await put_history(objects, memory_store, KEYS, T, 10, [rec(i) for i in range(10, 20)])
    await put_history(objects, memory_store, KEYS, T, 20, [rec(i) for i in range(20, 40)])
    local = await open_log(tmp_path / "wal", initial_offset=40)
    await local.append([rec(40)], [1])
    h = await history(objects, memory_store)
    log = TieredLog(local, h, floor=10)
    assert log.first_offset == 0

    stale = await history(objects, memory_store)  # listed before the descriptors go
    for d in (first, second):
        await memory_store.delete(KEYS.segment(T, d.start_offset))
    h.cut_below(20, [first, second])
    assert (log.first_offset, h.stats().deleted_segments) == (20, 2), "the floor no longer holds it down"
    assert [e.offset for e in await log.read_async(0, 3)] == [20, 21, 22], "reads start past the cut"
    h.descriptors = stale.descriptors  # a listing that raced the deletion...
    await h.refresh()
    assert h.first_offset == 20
    h.descriptors = [first, *stale.descriptors[1:]]
    h._cut_below = 0
    await h.refresh()  # ...and one after it: etcd has no descriptor below 20 either
    assert h.first_offset == 20
    await local.aclose()


async def test_a_read_of_an_object_deleted_elsewhere_lists_again_and_the_next_read_starts_past_it(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore
) -> None:
    gone = await put_history(objects, memory_store, KEYS, T, 0, [rec(i) for i in range(10)])
    await put_history(objects, memory_store, KEYS, T, 10, [rec(i) for i in range(10, 20)])
    local = await open_log(tmp_path / "wal", initial_offset=20)
    log = TieredLog(local, await history(objects, memory_store))
    # Another broker's retention (the previous owner's) deleted the first segment meanwhile.
    await memory_store.delete(KEYS.segment(T, 0))
    await objects.delete(gone.object_key)
    with pytest.raises(ObjectNotFound):
        await log.read_async(0, 5)
    assert [e.offset for e in await log.read_async(0, 5)] == [10, 11, 12, 13, 14]
    await local.aclose()


async def _retention_topic(
    tmp_path: Path,
    objects: LocalObjectStore,
    resources: Resources,
    metrics: CollectorRegistry | None = None,
    **retention: int,
) -> tuple[BrokerRegistry, Any, Path]:
    """A reliable topic with ``retention``, ten one-segment publishes of five messages, all read."""
    data_dir = tmp_path / "data"
    cfg = config(cursor_flush_interval_ms=1, data_dir=str(data_dir), wal={"segment_max_bytes": 400})
    reg = BrokerRegistry(
        cfg,
        resources,
        broker_url=BROKER_URL,
        clock=Clock(),
        id_seed=1,
        events=BrokerEvents(metrics or CollectorRegistry()),
    )
    reg.set_tiering(Tiering(cfg, resources, objects=objects, uploader=None))
    await resources.create_topic(
        T, dispatch_strategy="reliable", policies=topic_policies("reliable", **retention)
    )
    p = await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    c = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    c.open_stream()
    for i in range(10):
        batch = [pb.StreamMessage(payload=f"m{i}-{j}".encode() * 4) for j in range(5)]
        await reg.publish(p, batch, reg.payload_bytes(batch))
    sub = reg.topics[TOPIC].subscriptions["s"]
    await wait_until(lambda: sub.engine is not None and sub.engine.read_pos == 50, what="all read")
    return reg, sub, data_dir


async def _object_keys(objects: LocalObjectStore) -> list[str]:
    return [o.key for o in await objects.list(f"{T.namespace}/{T.local}/")]


async def test_retention_deletes_acknowledged_uploaded_segments_beyond_the_size_limit(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore, resources: Resources
) -> None:
    metrics = CollectorRegistry()
    reg, sub, data_dir = await _retention_topic(
        tmp_path, objects, resources, metrics, retention_size_bytes=1000
    )
    rt = reg.topics[TOPIC].reliable
    assert rt is not None
    uploader = FakeUploader(data_dir, objects, memory_store, KEYS)
    assert await uploader.upload(T) == 45, "nine sealed segments uploaded"
    await rt.history.refresh()
    sizes = [d.size_bytes for d in rt.history.descriptors]
    assert len(sizes) == 9 and rt.retention_due()

    await rt.apply_retention()
    assert len(rt.history.descriptors) == 9, "nothing acknowledged: everything kept"

    sub.engine.ack_through(34)  # offsets 0..34: the first seven segments
    await rt.flush_cursors()
    # An object no descriptor names (a crash between an earlier pass' two steps, or a former
    # owner's upload of the same range under its own revision).
    orphan = rt.history.descriptors[0].object_key.rpartition("/")[0] + f"/{0:020d}-{3:020d}.r77.wal"
    await objects.put(orphan, b"orphaned")
    await rt.apply_retention()

    kept = rt.history.descriptors
    assert kept[0].start_offset == 35, "acknowledged segments go, nothing unacknowledged"
    assert sum(d.size_bytes for d in kept) > 1000, "the acknowledgements held it, not the size"

    sub.engine.ack_through(49)
    await rt.flush_cursors()
    await rt.apply_retention()
    kept = rt.history.descriptors
    assert sum(d.size_bytes for d in kept) <= 1000 < sum(d.size_bytes for d in kept) + sizes[0], (
        "the newest segments that fit in the size limit are kept"
    )
    listed = await _object_keys(objects)
    assert listed == [d.object_key for d in kept], "the deleted segments' objects and the orphan are gone"
    assert orphan not in listed
    described = await memory_store.get_prefix(KEYS.segments_prefix(T))
    assert len(described[0]) == len(kept)
    stats = reg.stats()[TOPIC]
    assert stats.first_offset == kept[0].start_offset
    assert stats.tiered is not None and stats.tiered.retention_deleted_segments == 9 - len(kept)
    deleted_bytes = sum(sizes) - sum(d.size_bytes for d in kept)
    assert stats.tiered.retention_deleted_bytes == deleted_bytes
    assert metrics.get_sample_value("danube_retention_deleted_segments_total") == 9 - len(kept)
    assert metrics.get_sample_value("danube_retention_deleted_bytes_total") == deleted_bytes

    # A new subscription from the earliest offset starts at the new first offset.
    c2 = await reg.subscribe(
        TOPIC,
        subscription="late",
        consumer_name="c2",
        sub_type=SubType.EXCLUSIVE,
        initial_position="earliest",
    )
    c2.open_stream()
    got: list[int] = []

    def offsets() -> list[int]:
        got.extend(m.msg_id.topic_offset for m in c2.queue.take(1000))
        return got

    await wait_until(lambda: offsets() == list(range(kept[0].start_offset, 50)), what="the kept history")
    reg.close_all("test over")
    await reg.wait_closed()


async def test_without_a_retention_limit_object_storage_keeps_everything(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore, resources: Resources
) -> None:
    reg, sub, data_dir = await _retention_topic(tmp_path, objects, resources)
    rt = reg.topics[TOPIC].reliable
    assert rt is not None
    assert await FakeUploader(data_dir, objects, memory_store, KEYS).upload(T) == 45
    sub.engine.ack_through(49)
    await rt.flush_cursors()
    await rt.apply_retention()
    assert rt.local.first_offset == 45, "the local log is cut below the checkpoint"
    assert len(await _object_keys(objects)) == 9, "the archive keeps all of it"
    assert rt.log.first_offset == 0
    reg.close_all("test over")
    await reg.wait_closed()


async def test_a_broker_that_no_longer_owns_the_topic_deletes_nothing_from_object_storage(
    tmp_path: Path, objects: LocalObjectStore, memory_store: MemoryStore, resources: Resources
) -> None:
    reg, sub, data_dir = await _retention_topic(tmp_path, objects, resources, retention_size_bytes=1)
    rt = reg.topics[TOPIC].reliable
    assert rt is not None
    assert await FakeUploader(data_dir, objects, memory_store, KEYS).upload(T) == 45
    sub.engine.ack_through(49)
    await rt.flush_cursors()
    await rt.history.refresh()
    await memory_store.put(KEYS.owner(T), b'{"broker_id": "someone-else"}')  # the epoch moved on
    await rt.apply_retention()
    assert len(await _object_keys(objects)) == 9
    assert len((await memory_store.get_prefix(KEYS.segments_prefix(T)))[0]) == 9
    reg.close_all("test over")
    await reg.wait_closed()


async def test_the_time_rule_deletes_a_segment_once_it_is_old_and_idle_passes_cost_nothing_before(
    tmp_path: Path,
    objects: LocalObjectStore,
    memory_store: MemoryStore,
    resources: Resources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """History uploaded by an earlier owner, published 120 s, 30 s and 0 s before now; the topic
    keeps 60 s and has no subscription."""
    import danube_broker.reliable_topic as reliable_topic

    now_s = 2_000_000_000.0
    monkeypatch.setattr(reliable_topic.time, "time", lambda: now_s)
    for start, age_s in ((0, 120), (10, 30), (20, 0)):
        ms = int((now_s - age_s) * 1000)
        await put_history(
            objects,
            memory_store,
            KEYS,
            T,
            start,
            [rec(i) for i in range(start, start + 10)],
            publish_times_ms=[ms] * 10,
        )
    cfg = config(data_dir=str(tmp_path / "data"))
    reg = BrokerRegistry(cfg, resources, broker_url=BROKER_URL, clock=Clock(), id_seed=1)
    reg.set_tiering(Tiering(cfg, resources, objects=objects, uploader=None))
    await resources.create_topic(
        T, dispatch_strategy="reliable", policies=topic_policies("reliable", retention_time_s=60)
    )
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    rt = reg.topics[TOPIC].reliable
    assert rt is not None and rt.history is not None and rt.retention_due()
    cuts = 0
    real_cut = reliable_topic.archive_cut

    def counted(*args: Any, **kw: Any) -> Any:
        nonlocal cuts
        cuts += 1
        return real_cut(*args, **kw)

    monkeypatch.setattr(reliable_topic, "archive_cut", counted)

    await rt.apply_retention()
    assert [d.start_offset for d in rt.history.descriptors] == [10, 20], "the 120 s old segment went"
    await rt.apply_retention()  # nothing old enough: remembered until the next segment is 60 s old
    await rt.apply_retention()
    assert cuts == 2 and rt.retention_due()
    now_s += 29
    await rt.apply_retention()
    assert cuts == 2, "still 1 s to go: the idle pass did not compute"
    now_s += 2
    await rt.apply_retention()
    assert [d.start_offset for d in rt.history.descriptors] == [20], "old now: deleted"
    assert len(await _object_keys(objects)) == 1
    reg.close_all("test over")
    await reg.wait_closed()
