"""TopicLog: offsets, reads, group commit, reopen, index rebuild, time lookup, retention,
idempotence bookkeeping, durability policies. Real files in a temporary directory."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from danube_broker.wal import DiskFull, Durability, LogClosed, LogEntry, TopicLog, WalConfig
from danube_common.wal.segment import decode_index, scan_segment_file
from tests.unit.wal.helpers import (
    Ops,
    append_all,
    cfg,
    files_bytes,
    message,
    read_all,
    records,
    segment_files,
)

pytestmark = pytest.mark.unit

SMALL = cfg(segment_max_bytes=600, index_every_frames=3)


async def open_log(d: Path, c: WalConfig = SMALL, *, ops: Ops | None = None, **kw: object) -> TopicLog:
    durability = kw.pop("durability", Durability.FSYNC)
    assert isinstance(durability, Durability)
    return await TopicLog.open(
        d,
        cfg=c,
        durability=durability,
        ops=ops.disk_ops() if ops else None,
        **kw,  # type: ignore[arg-type]
    )


async def test_offsets_and_reads_across_rolls(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    assert (log.first_offset, log.next_offset, log.durable_offset) == (0, 0, 0)
    expected = await append_all(log, records(40), batch=3)
    assert [e.offset for e in expected] == list(range(40))
    assert (log.next_offset, log.durable_offset) == (40, 40)
    assert len(segment_files(tmp_path)) >= 3
    assert len(segment_files(tmp_path, "idx")) == len(segment_files(tmp_path)) - 1
    assert await read_all(log) == expected
    for start in (0, 5, 17, 39):
        got = await log.read_async(start, 7)
        assert got == expected[start : start + 7]
    assert log.read(0, 1000) == expected  # all still in the tail cache
    assert log.read(40, 10) == []
    assert await log.read_async(40, 10) == []
    # max_bytes: records here are 11 bytes; at least one entry even when smaller.
    assert await log.read_async(0, 100, max_bytes=25) == expected[:2]
    assert await log.read_async(0, 100, max_bytes=1) == expected[:1]
    await log.aclose()


async def test_on_sealed_is_called_once_per_sealed_segment_after_the_roll_is_accounted(
    tmp_path: Path,
) -> None:
    log = await open_log(tmp_path)
    seen: list[int] = []
    log.on_sealed(lambda: seen.append(log.segment_count))
    await append_all(log, records(40), batch=3)
    # Each call saw the new segment already counted: 2, 3, ... up to the final count.
    assert seen == list(range(2, log.segment_count + 1)) and len(seen) >= 2
    calls = len(seen)
    log.on_sealed(None)
    await append_all(log, records(40), batch=3)
    assert len(seen) == calls and log.segment_count > seen[-1]  # rolled again, not called
    await log.aclose()


async def test_read_below_the_cache_goes_to_disk(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg(segment_max_bytes=600, index_every_frames=3, tail_cache_bytes=500))
    expected = await append_all(log, records(60), batch=4)
    cached = log.read(59, 10)
    assert cached == expected[59:]
    assert log.read(0, 10) is None
    assert await log.read_async(0, 10) == expected[:10]
    assert await read_all(log, 3) == expected[3:]
    assert log.stats().cache_entries < 60
    await log.aclose()


async def test_concurrent_appenders_share_fsyncs(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(), ops=ops)
    ops.fsyncs = ops.writes = 0
    appenders, each = 40, 25

    async def producer(p: int) -> list[int]:
        got = []
        for i in range(each):
            got.append(await log.append([f"{p}/{i}".encode()], [i]))
        return got

    results = await asyncio.gather(*(producer(p) for p in range(appenders)))
    appends = appenders * each
    assert sorted(o for r in results for o in r) == list(range(appends))
    assert all(r == sorted(r) for r in results)
    stats = log.stats()
    assert stats.appends == appends and stats.commits == ops.fsyncs == ops.writes
    assert ops.fsyncs <= appends / 4, f"{ops.fsyncs} fsyncs for {appends} appends"
    by_offset = {e.offset: e.record for e in await read_all(log)}
    for p, offsets in enumerate(results):
        assert [by_offset[o] for o in offsets] == [f"{p}/{i}".encode() for i in range(each)]
    await log.aclose()


async def test_one_commit_is_capped_by_bytes(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(max_batch_bytes_per_commit=200), ops=ops)
    ops.writes = 0
    await asyncio.gather(*(log.append([b"x" * 50], [0]) for _ in range(12)))  # 74-byte frames
    assert ops.writes >= 12 / 2
    assert log.stats().commits == ops.writes
    await log.aclose()


async def test_reopen_after_clean_close_is_identical(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    expected = await append_all(log, records(33), batch=2)
    before = log.stats()
    await log.aclose()
    await log.aclose()  # idempotent
    log = await open_log(tmp_path)
    assert await read_all(log) == expected
    after = log.stats()
    assert (after.first_offset, after.next_offset, after.durable_offset) == (0, 33, 33)
    assert (after.segments, after.bytes_on_disk) == (before.segments, before.bytes_on_disk)
    assert log.read(30, 10) == expected[30:]  # the tail segment warms the cache
    assert await log.append([b"more"], [1]) == 33
    await log.aclose()


async def test_index_rebuilt_when_missing_or_damaged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await open_log(tmp_path)
    expected = await append_all(log, records(50), batch=2)
    await log.aclose()
    idx = segment_files(tmp_path, "idx")
    assert len(idx) >= 3
    idx[0].unlink()
    raw = bytearray(idx[1].read_bytes())
    raw[len(raw) // 2] ^= 0x40
    idx[1].write_bytes(bytes(raw))
    idx[2].write_bytes(idx[2].read_bytes()[:-3])
    caplog.set_level(logging.WARNING)
    log = await open_log(tmp_path)
    assert await read_all(log) == expected
    assert log.next_offset == 50
    assert sum("rebuilt the index" in r.getMessage() for r in caplog.records) == 3
    for path in idx:
        decode_index(path.read_bytes())
    await log.aclose()


async def test_crash_between_seal_and_next_segment(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg())
    expected = await append_all(log, records(5))
    assert await log.roll() is True
    assert await log.roll() is False  # nothing new to seal
    await log.aclose()
    segs = segment_files(tmp_path)
    assert len(segs) == 2 and scan_segment_file(segs[1]).result.frames == []
    segs[1].unlink()  # the crash came before the next segment existed: .idx but no successor
    log = await open_log(tmp_path, cfg())
    assert segment_files(tmp_path, "idx") == []  # the sealed-looking last segment is the tail again
    assert log.next_offset == 5
    expected += await append_all(log, records(3, start=5))
    assert await read_all(log) == expected
    await log.aclose()


async def test_offset_for_time(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg(segment_max_bytes=500, index_every_frames=4))
    pts = [10, 30, 20, 20, 50, 40, 40, 45, 60, 60, 55, 70, 80, 75, 90, 100, 95, 110, 120, 115] * 2
    pts = [p + (200 if i >= 20 else 0) for i, p in enumerate(pts)]
    for i in range(0, len(pts), 3):
        await log.append([b"r" * 20] * len(pts[i : i + 3]), pts[i : i + 3])
    assert log.stats().segments > 2
    for t in range(0, 340, 5):
        want = next((i for i, p in enumerate(pts) if p >= t), log.durable_offset)
        assert await log.offset_for_time(t) == want, t
    await log.aclose()


async def test_truncate_before_deletes_whole_sealed_segments(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg(segment_max_bytes=600, index_every_frames=3, tail_cache_bytes=0))
    expected = await append_all(log, records(60), batch=3)
    segs = segment_files(tmp_path)
    firsts = [int(p.name[:20]) for p in segs]
    assert await log.truncate_before(firsts[1] - 1) == 0  # the first segment still holds firsts[1]-1
    assert log.first_offset == 0
    sizes = files_bytes(tmp_path, below=firsts[2])
    freed = await log.truncate_before(firsts[2] + 1)
    assert freed == sizes
    assert log.first_offset == firsts[2]
    assert segment_files(tmp_path)[0].name == segs[2].name
    assert await log.read_async(0, 5) == expected[firsts[2] : firsts[2] + 5]
    assert await read_all(log) == expected[firsts[2] :]
    assert await log.offset_for_time(0) == firsts[2]
    await log.truncate_before(10**9)  # never the active segment
    assert log.first_offset == firsts[-1]
    assert await read_all(log) == expected[firsts[-1] :]
    await log.aclose()
    log = await open_log(tmp_path)
    assert (log.first_offset, log.next_offset) == (firsts[-1], 60)
    await log.aclose()


async def test_retention_follows_the_tail_cache(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    expected = await append_all(log, records(30), batch=3)
    assert log.read(0, 5) == expected[:5]
    await log.truncate_before(20)
    assert log.read(0, 5) is None
    assert log.read(log.first_offset, 5) == expected[log.first_offset : log.first_offset + 5]
    await log.aclose()


async def test_last_sequence_is_exact_after_reopen(tmp_path: Path) -> None:
    log = await open_log(tmp_path)
    highest: dict[str, int] = {}
    for i in range(30):
        name = f"p{i % 3}"
        seqs = [(name, 3 * i + k + 1) for k in range(3)]
        await log.append([message(n, s) for n, s in seqs], [i] * 3, seqs)
        highest[name] = seqs[-1][1]
    unsequenced = [("p9", 0)]
    await log.append([message("p9", 0)], [0], unsequenced)
    assert {n: log.last_sequence(n) for n in highest} == highest
    assert log.last_sequence("p9") == 0 and log.last_sequence("nobody") == 0
    await log.aclose()
    for reopen in range(2):
        log = await open_log(tmp_path)
        assert log.producer_sequences() == highest
        await log.aclose()
        if reopen == 0:  # the second time, rebuild every index from the segments
            for p in segment_files(tmp_path, "idx"):
                p.unlink()


async def test_durability_none_never_fsyncs(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, ops=ops, durability=Durability.NONE)
    expected = await append_all(log, records(40), batch=2)
    await asyncio.gather(*(log.append([b"c"], [1]) for _ in range(10)))
    assert log.stats().segments > 2
    assert await log.roll()
    await log.aclose()
    assert ops.fsyncs == 0 and ops.writes > 0
    log = await open_log(tmp_path, durability=Durability.NONE)
    assert (await read_all(log))[:40] == expected and log.next_offset == 50
    await log.aclose()


async def test_cloud_durability_syncs_like_fsync(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(), ops=ops, durability=Durability.CLOUD)
    ops.fsyncs = 0
    await append_all(log, records(3))
    assert ops.fsyncs == 3
    await log.aclose()


async def test_segments_roll_by_age(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(segment_max_age_s=60), ops=ops)
    await append_all(log, records(3))
    assert log.stats().segments == 1
    ops.clock_ms += 59_000
    await append_all(log, records(1))
    assert log.stats().segments == 1
    ops.clock_ms += 1_000
    await append_all(log, records(1))
    assert log.stats().segments == 2
    assert int(segment_files(tmp_path)[1].name[:20]) == 4  # rolled before the commit of offset 4
    await log.aclose()


async def test_wait_for_and_close(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg())
    waiter = asyncio.create_task(log.wait_for(2))
    await append_all(log, records(2))
    assert not waiter.done()
    await log.append([b"c"], [0])
    await asyncio.wait_for(waiter, 5)
    await log.wait_for(0)  # already durable: returns at once
    late = asyncio.create_task(log.wait_for(100))
    pending = asyncio.create_task(log.append([b"last"], [0]))
    await asyncio.sleep(0)  # one loop turn: the append takes its offset
    assert log.next_offset == 4
    await log.aclose()
    assert await pending == 3  # queued before the close: committed
    with pytest.raises(LogClosed):
        await late
    with pytest.raises(LogClosed):
        await log.append([b"x"], [0])
    with pytest.raises(LogClosed):
        await log.wait_for(50)


async def test_back_pressure_holds_appends_before_they_take_offsets(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(max_pending_bytes=100), ops=ops)
    ops.gate = threading.Event()
    first = asyncio.create_task(log.append([b"x" * 90], [0]))
    await asyncio.to_thread(ops.entered.wait, 5)  # the commit is in flight
    second = asyncio.create_task(log.append([b"y"], [0]))
    for _ in range(5):
        await asyncio.sleep(0)
    assert log.next_offset == 1 and not second.done()
    ops.gate.set()
    ops.gate = None
    assert (await first, await second) == (0, 1)
    await log.aclose()


async def test_argument_checks_and_empty_append(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg(), initial_offset=1000)
    assert (log.first_offset, log.next_offset) == (1000, 1000)
    assert await log.append([], []) == 1000
    with pytest.raises(ValueError):
        await log.append([b"a"], [])
    with pytest.raises(ValueError):
        await log.append([b"a"], [1], [])
    assert await log.append([b"a", b"b"], [1, 2]) == 1000
    assert await read_all(log) == [LogEntry(1000, 1, b"a"), LogEntry(1001, 2, b"b")]
    await log.aclose()
    log = await open_log(tmp_path, cfg(), initial_offset=5)  # ignored: segments exist
    assert log.next_offset == 1002
    await log.aclose()


async def test_disk_full_state_fails_fast_while_a_retry_is_in_flight(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, cfg(), ops=ops)
    await append_all(log, records(2))
    ops.write_error = 28
    with pytest.raises(DiskFull):
        await log.append([b"a"], [0])
    ops.gate = threading.Event()
    probe = asyncio.create_task(log.append([b"b"], [0]))
    await asyncio.to_thread(ops.entered.wait, 5)
    with pytest.raises(DiskFull, match="retry"):
        await log.append([b"c"], [0])  # fails at once: the probe has not finished
    ops.write_error = None
    ops.gate.set()
    ops.gate = None
    assert await probe == 2
    assert await log.append([b"d"], [0]) == 3
    await log.aclose()


async def test_a_crashed_writer_fails_appends_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from danube_broker.wal import StorageFailed
    from danube_broker.wal.segments import ActiveSegment

    log = await open_log(tmp_path, cfg())
    await append_all(log, records(2))

    def bug(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ActiveSegment, "note_batch", bug)
    results = await asyncio.gather(*(log.append([b"x"], [0]) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, StorageFailed) for r in results), results
    assert any(r.levelno == logging.ERROR and "writer crashed" in r.getMessage() for r in caplog.records)
    with pytest.raises(StorageFailed, match="crashed"):
        await log.append([b"y"], [0])
    with pytest.raises(StorageFailed):
        await log.roll()
    await log.aclose()


async def test_bad_records_never_leave_a_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import danube_broker.wal.log as wal_log
    from danube_common.errors import MessageTooLarge

    log = await open_log(tmp_path, cfg())
    monkeypatch.setattr(wal_log, "MAX_RECORD_BYTES", 1000)
    with pytest.raises(MessageTooLarge):
        await log.append([b"ok", b"x" * 1001], [0, 0])
    with pytest.raises(TypeError):
        await log.append([b"ok", bytearray(b"not bytes")], [0, 0])  # type: ignore[list-item]
    assert log.next_offset == 0
    assert await log.append([b"a"], [0]) == 0
    await log.aclose()


async def test_a_record_bigger_than_a_read_chunk(tmp_path: Path) -> None:
    log = await open_log(tmp_path, cfg(tail_cache_bytes=0))
    big = bytes(range(256)) * (10 * 1024)  # 2.5 MiB: more than one read chunk
    expected = await append_all(log, [b"before", big, b"after"])
    assert log.read(0, 10) is None
    assert await log.read_async(0, 10, max_bytes=1) == expected[:1]
    assert await log.read_async(1, 10, max_bytes=1) == expected[1:2]
    assert await read_all(log) == expected
    await log.aclose()


async def test_one_open_log_per_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import danube_broker.wal.recovery as recovery
    from danube_broker.wal import StorageFailed
    from tests.support import wait_until

    first = await open_log(tmp_path, cfg())
    await append_all(first, records(2))
    with pytest.raises(StorageFailed, match="in use"):
        await open_log(tmp_path, cfg(lock_wait_s=0))
    attempts = 0
    real_lock = recovery.lock_directory

    def counting_lock(directory: Path) -> int:
        nonlocal attempts
        attempts += 1
        return real_lock(directory)

    monkeypatch.setattr(recovery, "lock_directory", counting_lock)
    waiting = asyncio.create_task(open_log(tmp_path, cfg(lock_wait_s=30)))
    await wait_until(lambda: attempts >= 2, what="a second attempt at the lock")
    assert not waiting.done()
    await first.aclose()  # releases the lock: the waiting open gets it
    second = await asyncio.wait_for(waiting, 10)
    assert second.next_offset == 2
    await second.aclose()


async def test_a_cancelled_open_leaves_the_directory_unlocked(tmp_path: Path) -> None:
    opening = asyncio.create_task(open_log(tmp_path, cfg()))
    await asyncio.sleep(0)  # one loop turn: recovery is running in the thread pool
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    log = await open_log(tmp_path, cfg(lock_wait_s=10))
    assert await log.append([b"a"], [0]) == 0
    await log.aclose()


@pytest.mark.parametrize(
    ("durability", "inline_bytes", "on_loop"),
    [
        (Durability.FSYNC, 0, False),
        (Durability.NONE, 0, False),  # the default: no disk call ever runs on the event loop
        (Durability.NONE, 64 * 1024, True),  # opted in: small page-cache writes stay on the loop
        (Durability.FSYNC, 64 * 1024, False),  # never with fsync
    ],
)
async def test_where_commits_are_written(
    tmp_path: Path, durability: Durability, inline_bytes: int, on_loop: bool
) -> None:
    ops = Ops()
    threads: list[threading.Thread] = []
    plain_pwrite = ops.pwrite

    def recording_pwrite(fd: int, data: bytes | memoryview, pos: int) -> int:
        threads.append(threading.current_thread())
        return plain_pwrite(fd, data, pos)

    ops.pwrite = recording_pwrite  # type: ignore[method-assign]
    c = cfg(segment_max_bytes=1 << 20, inline_write_max_bytes=inline_bytes)
    log = await open_log(tmp_path, c, ops=ops, durability=durability)
    threads.clear()  # opening wrote the segment header (in the pool); look at commits only
    try:
        await append_all(log, records(5), batch=1)
    finally:
        await log.aclose()
    main = threading.main_thread()
    assert threads, "commits were written"
    assert all((t is main) == on_loop for t in threads), [t.name for t in threads]
