"""The uploader against the in-memory etcd and the local-directory object store, with real
segment files written by the broker's TopicLog: uploads, Flush, crash recovery, refusals,
retries and the dead broker's tail."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from danube_common.errors import FailedPrecondition
from danube_common.keys import Keys
from danube_common.log_state import LogRecords, LogState, Start, decide_open
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore import LocalObjectStore, ObjectInfo, ObjectStoreUnavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.storage import SegmentDescriptor, object_key
from danube_common.topic_name import TopicName
from danube_common.wal import journal as jr
from danube_common.wal.segment import HEADER_BYTES, index_name
from danube_wal_uploader.config import WalUploaderConfig
from danube_wal_uploader.uploader import BrokerWatch, Uploader
from tests.support import wait_until
from tests.unit.wal_uploader.helpers import (
    INCARNATION,
    append,
    check_uploaded,
    checkpoint,
    decode_object,
    descriptors,
    open_log,
    payload,
    record_stint,
    write_topic,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

BROKER = "b1"
T = TopicName("default", "orders")


class FlakyObjects(LocalObjectStore):
    """The local store, failing the next ``fail_puts`` PUTs as an unreachable S3 would."""

    fail_puts = 0
    puts = 0

    async def put(self, key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
        self.puts += 1
        if self.fail_puts > 0:
            self.fail_puts -= 1
            raise ObjectStoreUnavailable("simulated: connection refused")
        return await super().put(key, data, if_absent=if_absent)


@dataclass
class Harness:
    uploader: Uploader
    store: MemoryStore
    objects: FlakyObjects
    keys: Keys
    data_dir: Path
    tasks: list[asyncio.Task[None]]
    #: The log record of T naming BROKER as its writer (written at set-up).
    stint: LogState

    def start(self) -> None:
        watch = BrokerWatch(self.store, self.keys.broker(BROKER), self.uploader.set_broker_alive)
        self.tasks.append(asyncio.create_task(self.uploader.run()))
        self.tasks.append(asyncio.create_task(watch.run()))

    async def checkpoint(self, topic: TopicName = T) -> int | None:
        return await checkpoint(self.store, self.keys, topic)

    async def wait_checkpoint(self, value: int, topic: TopicName = T, timeout_s: float = 15) -> None:
        async def reached() -> bool:
            return await self.checkpoint(topic) == value

        await wait_until(reached, timeout_s=timeout_s, what=f"checkpoint {value}")

    def progress(self, topic: TopicName = T) -> Any:
        return self.uploader.status(topic)[0]


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    store = MemoryStore()
    keys = Keys("t")
    objects = await FlakyObjects.open(tmp_path / "objects")
    cfg = WalUploaderConfig(
        broker_id=BROKER,
        data_dir=str(tmp_path / "data"),
        scan_interval_s=0.05,
        retry_initial_s=0.01,
        retry_max_s=0.05,
        final_state_poll_s=0.05,
        flush_timeout_s=5,
    )
    # The broker is registered (on a lease) unless a test says otherwise.
    lease = await store.grant_lease(60)
    await store.put(keys.broker(BROKER), {"broker_id": BROKER}, lease=lease)
    # The broker opened the topic: its log record names it as the writer.
    stint = await record_stint(store, keys, T, BROKER)
    harness = Harness(Uploader(cfg, store, objects, keys), store, objects, keys, tmp_path / "data", [], stint)
    yield harness
    for task in harness.tasks:
        task.cancel()
    for task in harness.tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await objects.aclose()
    await store.aclose()


def sealed_end(directory: Path) -> int:
    """Where the sealed segments end (the first offset of the last segment file)."""
    firsts = sorted(int(p.stem) for p in directory.glob("*.wal"))
    return firsts[-1]


async def test_uploads_every_sealed_segment_and_not_the_open_one(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 3000)
    try:
        end = sealed_end(log.directory)
        assert end > 1000, "several segments"
        h.start()
        await h.wait_checkpoint(end)
        descs = await check_uploaded(h.store, h.keys, h.objects, T, end=end)
        assert descs[-1].next_offset == end  # nothing of the open segment: the broker is alive
        assert all(d.sealed and d.broker_id == BROKER for d in descs)
        # One object per sealed segment, the open one's object is not there.
        assert len(descs) == len(list(log.directory.glob("*.idx")))
        p = h.progress()
        await wait_until(lambda: p.local_next_offset == 3000, what="local end seen")
        assert p.uploaded_next_offset == end and p.lag_bytes > 0 and p.last_error == ""
        assert h.uploader.totals.uploads == len(descs)
        assert h.uploader.totals.bytes_uploaded == sum(d.size_bytes for d in descs)

        # New sealed segments are picked up by the next scan.
        await append(log, 3000, 2000)
        await log.roll()
        await h.wait_checkpoint(5000)
        await check_uploaded(h.store, h.keys, h.objects, T, end=5000)
    finally:
        await log.aclose()


async def test_flush_uploads_the_open_segment_up_to_the_durable_offset(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 1200)
    try:
        end = sealed_end(log.directory)
        durable = log.durable_offset
        assert durable == 1200 and end < durable - 20
        p = await h.uploader.flush(
            T, durable - 20, timeout_s=5
        )  # everything sealed, then part of the open one
        assert p.uploaded_next_offset == durable - 20 == await h.checkpoint()
        descs = await check_uploaded(h.store, h.keys, h.objects, T, end=durable - 20)
        assert descs[-1].start_offset == end and not descs[-1].sealed
        # The rest of it; a flush already satisfied changes nothing.
        assert (await h.uploader.flush(T, durable, timeout_s=5)).uploaded_next_offset == durable
        assert (await h.uploader.flush(T, durable - 5, timeout_s=5)).uploaded_next_offset == durable
        await check_uploaded(h.store, h.keys, h.objects, T, end=durable)
        assert h.progress().lag_bytes == 0 and h.progress().local_next_offset == durable
        # Once sealed, that segment's remainder (nothing here) is not uploaded twice.
        await append(log, 1200, 10)
        await log.roll()
        assert (await h.uploader.flush(T, None, timeout_s=5)).uploaded_next_offset == 1210
        await check_uploaded(h.store, h.keys, h.objects, T, end=1210)
        # Asking past what the log holds is refused, with what it holds.
        with pytest.raises(FailedPrecondition, match="up to offset 5000"):
            await h.uploader.flush(T, 5000, timeout_s=5)
    finally:
        await log.aclose()


async def test_concurrent_flushes_share_one_upload(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 300)
    try:
        results = await asyncio.gather(*(h.uploader.flush(T, n, timeout_s=5) for n in (100, 200, 300)))
        assert all(r.uploaded_next_offset == 300 for r in results)
        descs = await descriptors(h.store, h.keys, T)
        assert len(descs) <= 2  # the waiting flushes were served by the highest offset asked
        await check_uploaded(h.store, h.keys, h.objects, T, end=300)
    finally:
        await log.aclose()


async def test_crash_after_put_uploads_the_same_key_again(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 800, roll=True)
    await log.aclose()
    end = sealed_end(log.directory)
    first_seg = sorted(log.directory.glob("*.wal"))[0]
    first_end = int(sorted(log.directory.glob("*.wal"))[1].stem)
    # A previous run PUT the first object (same deterministic key and bytes) and died.
    key = object_key(T, 0, first_end, incarnation=INCARNATION, revision=h.stint.revision)
    await h.objects.put(key, first_seg.read_bytes())
    before = await h.objects.head(key)
    h.start()
    await h.wait_checkpoint(end)
    descs = await check_uploaded(h.store, h.keys, h.objects, T, end=end)
    assert descs[0].object_key == key and descs[0].size_bytes == before.size
    assert await h.objects.get(key) == first_seg.read_bytes()


async def test_crash_after_descriptor_only_advances_the_checkpoint(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 800, roll=True)
    await log.aclose()
    end = sealed_end(log.directory)
    assert (await h.uploader.flush(T, None, timeout_s=5)).uploaded_next_offset == end
    uploads = h.uploader.totals.uploads
    descs = await descriptors(h.store, h.keys, T)
    # As if the descriptors were written and the process died before the checkpoint moved.
    await h.store.put(h.keys.upload_checkpoint(T), {"next_offset": descs[0].next_offset})
    fresh = Uploader(h.uploader.cfg, h.store, h.objects, h.keys)
    assert (await fresh.flush(T, None, timeout_s=5)).uploaded_next_offset == end
    assert fresh.totals.uploads == 0 and h.uploader.totals.uploads == uploads
    assert await descriptors(h.store, h.keys, T) == descs  # no duplicate, nothing rewritten
    await h.store.delete(h.keys.upload_checkpoint(T))  # ... or before the first checkpoint existed
    assert (await fresh.flush(T, None, timeout_s=5)).uploaded_next_offset == end
    assert fresh.totals.uploads == 0


async def test_a_shorter_tail_described_at_the_checkpoint_is_continued(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 600)
    try:
        end = sealed_end(log.directory)
        assert (await h.uploader.flush(T, None, timeout_s=5)).uploaded_next_offset == end
        # A previous run cut [end, end + 7) of the open segment, described it and died.
        fresh = Uploader(h.uploader.cfg, h.store, h.objects, h.keys)
        assert (await fresh.flush(T, end + 7, timeout_s=5)).uploaded_next_offset == end + 7
        await h.store.put(h.keys.upload_checkpoint(T), {"next_offset": end})
        # The re-run asks for more: it first moves the checkpoint to that descriptor's end.
        assert (await h.uploader.flush(T, 600, timeout_s=5)).uploaded_next_offset == 600
        descs = await check_uploaded(h.store, h.keys, h.objects, T, end=600)
        assert [(d.start_offset, d.next_offset) for d in descs[-2:]] == [(end, end + 7), (end + 7, 600)]
    finally:
        await log.aclose()


async def test_an_overlapping_descriptor_is_refused_not_written(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    log = await write_topic(h.data_dir, T, 800, roll=True)
    await log.aclose()
    firsts = sorted(int(p.stem) for p in log.directory.glob("*.wal"))
    # Someone described offsets inside the second segment (two histories of one topic).
    foreign = SegmentDescriptor(
        str(T), firsts[1] + 5, firsts[1] + 9, object_key(T, firsts[1] + 5, firsts[1] + 9), 1, 0
    )
    await h.store.put(h.keys.segment(T, foreign.start_offset), foreign.to_json())
    caplog.set_level(logging.ERROR, logger="danube_wal_uploader")
    h.start()
    await h.wait_checkpoint(firsts[1])  # the first segment is fine
    await wait_until(lambda: h.uploader.totals.overlaps_refused >= 2, what="refusals counted")
    assert "overlap" in h.progress().last_error
    assert any("overlap" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    descs = await descriptors(h.store, h.keys, T)
    assert [(d.start_offset, d.next_offset) for d in descs] == [
        (0, firsts[1]),
        (foreign.start_offset, foreign.next_offset),
    ]
    assert await h.checkpoint() == firsts[1]
    with pytest.raises(FailedPrecondition, match="overlap"):
        await h.uploader.flush(T, None, timeout_s=5)


async def test_a_gap_is_never_skipped(h: Harness) -> None:
    # Offsets 0..99 are neither described nor here (another broker's disk).
    await h.store.put(h.keys.upload_checkpoint(T), {"next_offset": 0})
    log = await open_log(h.data_dir / T.namespace / T.local, initial_offset=100)
    try:
        await log.append([payload(i) for i in range(100, 700)], [1_000 + i for i in range(100, 700)])
        await log.roll()
        h.start()
        await wait_until(lambda: h.uploader.status(T) and "neither" in h.progress().last_error, what="gap")
        with pytest.raises(FailedPrecondition, match="neither in object storage nor on this disk"):
            await h.uploader.flush(T, None, timeout_s=5)
        assert await descriptors(h.store, h.keys, T) == [] and await h.checkpoint() == 0
    finally:
        await log.aclose()


async def test_object_store_and_etcd_faults_are_retried_and_counted(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 1500, roll=True)
    await log.aclose()
    end = sealed_end(log.directory)
    h.objects.fail_puts = 5
    h.start()
    await wait_until(lambda: h.uploader.totals.upload_errors >= 5, what="errors counted")
    await h.wait_checkpoint(end)
    assert h.progress().last_error == "" and h.progress().upload_errors >= 5
    await check_uploaded(h.store, h.keys, h.objects, T, end=end)
    # etcd down for a while: flush waits (retrying) and then succeeds.
    log = await open_log(log.directory)
    try:
        await append(log, end, 600)
        await log.roll()
        h.store.unavailable = True
        flush = asyncio.create_task(h.uploader.flush(T, None, timeout_s=5))
        errors = h.uploader.totals.upload_errors
        await wait_until(lambda: h.uploader.totals.upload_errors > errors + 2, what="etcd errors counted")
        h.store.unavailable = False
        assert (await flush).uploaded_next_offset == end + 600
        await check_uploaded(h.store, h.keys, h.objects, T, end=end + 600)
    finally:
        await log.aclose()


async def test_a_damaged_sealed_segment_is_not_uploaded(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 800, roll=True)
    await log.aclose()
    segs = sorted(log.directory.glob("*.wal"))
    raw = bytearray(segs[1].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segs[1].write_bytes(bytes(raw))
    with pytest.raises(FailedPrecondition, match="damaged"):
        await h.uploader.flush(T, None, timeout_s=5)
    assert await h.checkpoint() == int(segs[1].stem)  # the first segment went, nothing after
    assert [d.start_offset for d in await descriptors(h.store, h.keys, T)] == [0]


async def test_broker_death_records_the_logs_end_at_once_then_uploads_up_to_it(h: Harness) -> None:
    """The broker's lease ends while its process still holds the log open (frozen, or cut off
    from etcd): the uploader records where the log ends right away (the new owner waits for
    exactly this), uploads up to there, and never uploads what the woken broker writes after."""
    log = await write_topic(h.data_dir, T, 1000)
    try:
        end = log.durable_offset
        h.start()
        await h.wait_checkpoint(sealed_end(log.directory))
        lease = (await h.store.get(h.keys.broker(BROKER))).lease  # type: ignore[union-attr]
        await h.store.revoke_lease(lease)
        await wait_until(lambda: not h.uploader.broker_alive, what="broker seen dead")

        async def closed() -> Any:
            state = await h.store.get_json(h.keys.storage_state(T))
            return state if not state.get("open", True) else None

        state = await wait_until(closed, what="the log's end recorded")
        assert state["next_offset"] == end and state["closed_by"] == "uploader" and state["writer"] == BROKER
        await h.wait_checkpoint(end)
        await check_uploaded(h.store, h.keys, h.objects, T, end=end)
        assert h.progress().final and h.uploader.totals.final_states == 1
        assert not (log.directory / index_name(sealed_end(log.directory))).exists()  # nothing written locally

        # The frozen broker wakes and writes on (it acknowledges nothing: its lease is gone).
        await append(log, end, 50)
        for _ in range(3):
            await h.uploader.flush(T, None, timeout_s=5)
        assert await h.checkpoint() == end, "frames past the recorded end are never history"
        assert (await h.store.get_json(h.keys.storage_state(T)))["next_offset"] == end
    finally:
        await log.aclose()


async def test_a_dead_brokers_commit_journal_is_replayed_before_its_logs_end_is_recorded(h: Harness) -> None:
    """A broker with ``wal.commit_sync: journal`` died with its machine: the tail of its open
    segment never reached the disk, but its journal holds it. The uploader puts it back before
    it reads the segment, so the end it records is the acknowledged one."""
    log = await write_topic(h.data_dir, T, 1000)
    end = log.durable_offset
    await log.aclose()
    seg = max(log.directory.glob("*.wal"))
    data = seg.read_bytes()
    cut = len(data) - 2500  # a few frames, and a torn one
    os.truncate(seg, cut)
    rel = str(seg.relative_to(h.data_dir)).encode()
    d = jr.journal_dir(h.data_dir)
    d.mkdir()
    (d / jr.journal_name(1)).write_bytes(
        jr.file_header() + jr.encode_record([jr.Entry(rel, data[:HEADER_BYTES], cut, data[cut:])])
    )
    lease = (await h.store.get(h.keys.broker(BROKER))).lease  # type: ignore[union-attr]
    await h.store.revoke_lease(lease)
    h.start()

    async def closed() -> Any:
        state = await h.store.get_json(h.keys.storage_state(T))
        return state if not state.get("open", True) else None

    state = await wait_until(closed, what="the log's end recorded")
    assert state["next_offset"] == end
    assert seg.read_bytes() == data and not list(d.glob("*" + jr.SUFFIX))
    await h.wait_checkpoint(end)
    await check_uploaded(h.store, h.keys, h.objects, T, end=end)


async def test_the_dead_brokers_end_carries_the_producers_sequence_ids(h: Harness) -> None:
    log = await open_log(h.data_dir / T.namespace / T.local)
    try:
        for i in range(0, 400, 50):
            recs = [
                pb.StreamMessage(
                    payload=payload(j), producer_name="p1", sequence_id=j + 1
                ).SerializeToString()
                for j in range(i, i + 50)
            ]
            await log.append(recs, [1_000] * 50, [("p1", j + 1) for j in range(i, i + 50)])
    finally:
        await log.aclose()
    await h.store.put(h.keys.storage_state(T), {**h.stint.to_json(), "producer_sequences": {"older": 7}})
    await h.store.delete(h.keys.broker(BROKER))
    h.start()

    async def closed() -> Any:
        state = await h.store.get_json(h.keys.storage_state(T))
        return state if not state.get("open", True) else None

    state = await wait_until(closed, what="the log's end recorded")
    assert state["next_offset"] == 400
    assert state["producer_sequences"] == {"older": 7, "p1": 400}


async def test_a_log_written_by_another_broker_is_never_closed_from_here(h: Harness) -> None:
    """This disk holds offsets 0..299 of the topic; broker b2 writes it now from 300: those are
    uploaded (they are the topic's history), but this dead broker records no end."""
    state = LogState(writer="b2", epoch=5, start_offset=300, incarnation=INCARNATION)
    await h.store.put(h.keys.storage_state(T), state.to_json())
    log = await write_topic(h.data_dir, T, 300)
    await log.aclose()
    await h.store.delete(h.keys.broker(BROKER))
    h.start()
    await h.wait_checkpoint(300)
    await wait_until(lambda: h.progress().uploaded_next_offset == 300, what="progress")
    await h.uploader.flush(T, None, timeout_s=5)
    assert await h.store.get_json(h.keys.storage_state(T)) == state.to_json()
    assert not h.progress().final


async def test_frames_past_another_writers_start_are_never_uploaded(h: Harness) -> None:
    """A woken former owner's disk holds offsets the new writer also assigned: never uploaded."""
    log = await write_topic(h.data_dir, T, 300)
    await log.aclose()
    state = LogState(writer="b2", epoch=5, start_offset=200, incarnation=INCARNATION)
    await h.store.put(h.keys.storage_state(T), state.to_json())
    assert (await h.uploader.flush(T, 200, timeout_s=5)).uploaded_next_offset == 200
    with pytest.raises(FailedPrecondition):
        await h.uploader.flush(T, 300, timeout_s=5)
    assert max(d.next_offset for d in await descriptors(h.store, h.keys, T)) == 200


async def test_a_directory_of_a_deleted_incarnation_is_never_uploaded(h: Harness) -> None:
    log = await open_log(h.data_dir / T.namespace / T.local, incarnation=INCARNATION + 1)
    await append(log, 0, 300)
    await log.roll()
    await log.aclose()
    h.start()
    await wait_until(lambda: T in h.uploader.topics, what="topic discovered")
    await h.uploader.flush(T, None, timeout_s=5)
    assert await h.checkpoint() is None and await descriptors(h.store, h.keys, T) == []


async def test_flush_of_a_topic_not_on_this_disk(h: Harness) -> None:
    other = TopicName("default", "elsewhere")
    await h.store.put(h.keys.upload_checkpoint(other), {"next_offset": 42})
    assert (await h.uploader.flush(other, None, timeout_s=5)).uploaded_next_offset == 42
    assert (await h.uploader.flush(other, 40, timeout_s=5)).uploaded_next_offset == 42
    with pytest.raises(FailedPrecondition, match="no data"):
        await h.uploader.flush(other, 50, timeout_s=5)


async def test_superseded_and_foreign_directories_are_ignored(h: Harness) -> None:
    log = await write_topic(h.data_dir, T, 300, roll=True)
    await log.aclose()
    log.directory.rename(log.directory.with_name("orders.superseded-300"))
    (h.data_dir / "default" / "bad name!").mkdir()
    (h.data_dir / "not a namespace!" / "t").mkdir(parents=True)
    (h.data_dir / "default" / "file.txt").write_text("x")
    await h.uploader.discover()
    assert h.uploader.topics == {}
    assert await h.uploader.flush_all(timeout_s=5) == []


async def test_objects_hold_exactly_their_frames(h: Harness, tmp_path: Path) -> None:
    """Byte-level check of one object: a fresh header for a range cut mid-segment."""
    log = await write_topic(h.data_dir, T, 100)
    try:
        await h.uploader.flush(T, 30, timeout_s=5)
        await h.uploader.flush(T, 100, timeout_s=5)
        d = (await descriptors(h.store, h.keys, T))[-1]
        assert (d.start_offset, d.next_offset) == (30, 100)
        frames = decode_object(await h.objects.get(d.object_key), 30, 100)
        assert [r for _, _, r in frames] == [payload(i) for i in range(30, 100)]
    finally:
        await log.aclose()


async def test_a_stale_directory_writes_no_final_state(h: Harness) -> None:
    """The topic lived here once (offsets 0..299, uploaded), moved away and went on elsewhere:
    when this broker dies, nothing of it is uploaded again and no end is recorded from here."""
    log = await write_topic(h.data_dir, T, 300)
    await log.aclose()
    assert (await h.uploader.flush(T, 300, timeout_s=5)).uploaded_next_offset == 300
    descs = await descriptors(h.store, h.keys, T)
    later = SegmentDescriptor(str(T), 300, 900, object_key(T, 300, 900), 1, 0)  # the next owner's upload
    await h.store.put(h.keys.segment(T, 300), later.to_json())
    await h.store.put(h.keys.upload_checkpoint(T), {"next_offset": 900})
    state = LogState(writer="b2", epoch=9, start_offset=300, incarnation=INCARNATION)
    await h.store.put(h.keys.storage_state(T), state.to_json())
    await h.store.delete(h.keys.broker(BROKER))
    h.start()
    await wait_until(lambda: h.uploader.topics[T].done_epoch == h.uploader.death_epoch == 1, what="pass done")
    assert await h.store.get_json(h.keys.storage_state(T)) == state.to_json()
    assert await descriptors(h.store, h.keys, T) == [*descs, later]
    assert await h.checkpoint() == 900 and not h.progress().final


async def test_a_takeover_during_the_dead_brokers_upload_does_not_strand_its_history(h: Harness) -> None:
    """The next owner opens its stint (at the recorded end) while the uploader's first upload of
    the dead broker's log is in flight: that commit fails on the changed log record, and the
    uploader must upload the same offsets again, not leave them to nobody."""
    log = await write_topic(h.data_dir, T, 300)
    try:
        end = log.durable_offset
        lease = (await h.store.get(h.keys.broker(BROKER))).lease  # type: ignore[union-attr]
        original_put = h.objects.put
        took_over = asyncio.Event()

        async def put_then_take_over(key: str, data: bytes, *, if_absent: bool = False) -> ObjectInfo:
            info = await original_put(key, data, if_absent=if_absent)
            state = await h.store.get_json(h.keys.storage_state(T))
            if not took_over.is_set() and state and not state.get("open", True):
                await record_stint(h.store, h.keys, T, "b2", start=end, epoch=2)
                took_over.set()
            return info

        h.objects.put = put_then_take_over  # type: ignore[method-assign]
        await h.store.revoke_lease(lease)  # the broker is dead before the uploader starts
        h.start()
        await wait_until(took_over.is_set, what="the next owner's stint opened mid-upload")
        await h.wait_checkpoint(end)
        await check_uploaded(h.store, h.keys, h.objects, T, end=end)
    finally:
        await log.aclose()


async def test_a_later_writers_sealed_segment_waits_for_the_first_writers_unshipped_log(
    tmp_path: Path,
) -> None:
    """b1 writes offsets 0..251 (its open segment: nothing shipped yet) and dies; its uploader's
    first attempts fail, and b2 takes over at 252 and seals a segment before b1's log is shipped.
    b2's uploader must wait for [0, 252) instead of describing its own range first: that moved
    the checkpoint past offsets nobody had uploaded, and b1's uploader then took its work as done
    (the fault scenario etcd_restart_during_takeover lost them from the history). The stints are
    opened as brokers open them (``LogRecords.open_stint``)."""
    store, keys = MemoryStore(), Keys("t")
    objects = await LocalObjectStore.open(tmp_path / "objects")
    records = LogRecords(store, keys)
    uploaders: list[Uploader] = []
    logs = []
    try:
        view = await records.read(T, incarnation=INCARNATION)
        opened = await records.open_stint(
            T,
            view,
            Start(0, {}, None, "a new log"),
            writer="b1",
            epoch=1,
            incarnation=INCARNATION,
            reserve=10,
        )
        assert opened is not None
        b1_log = await open_log(tmp_path / "b1" / T.namespace / T.local)
        logs.append(b1_log)
        await append(b1_log, 0, 252)
        assert await records.close(T, opened[0], next_offset=252, closed_by="uploader")
        decision = decide_open(
            await records.read(T, incarnation=INCARNATION), me="b2", incarnation=INCARNATION
        )
        assert isinstance(decision, Start) and decision.offset == 252
        view = await records.read(T, incarnation=INCARNATION)
        assert await records.open_stint(
            T, view, decision, writer="b2", epoch=2, incarnation=INCARNATION, reserve=10
        )
        b2_log = await open_log(tmp_path / "b2" / T.namespace / T.local, initial_offset=252)
        logs.append(b2_log)
        await append(b2_log, 252, 1800)
        await b2_log.roll()
        sealed = b2_log.durable_offset

        def uploader(broker: str) -> Uploader:
            cfg = WalUploaderConfig(
                broker_id=broker, data_dir=str(tmp_path / broker), retry_initial_s=0.01, retry_max_s=0.05
            )
            u = Uploader(cfg, store, objects, keys)
            uploaders.append(u)
            return u

        b1, b2 = uploader("b1"), uploader("b2")
        b1.set_broker_alive(False)
        b2.set_broker_alive(True)
        with pytest.raises(FailedPrecondition, match=r"offsets 0\.\.251 are neither in object storage"):
            await b2.flush(T, sealed, timeout_s=5)
        assert await descriptors(store, keys, T) == []
        assert await checkpoint(store, keys, T) == 0
        # b1's uploader ships its log; then b2's range follows it.
        assert (await b1.flush(T, 252, timeout_s=5)).uploaded_next_offset == 252
        assert (await b2.flush(T, sealed, timeout_s=5)).uploaded_next_offset == sealed
        await check_uploaded(store, keys, objects, T, end=sealed)
    finally:
        for lg in logs:
            await lg.aclose()
        await objects.aclose()
        await store.aclose()
