"""Disk faults under the WAL: ENOSPC and EIO from the write and from fsync.

The OS calls are replaced through DiskOps: a failing write first writes half its bytes (as a
filling disk does), a failing fsync comes after the whole commit reached the page cache. After
each fault: the commit's appends raise DiskFull / StorageFailed, nothing of them is readable,
durable_offset has not moved, reads still work; once the fault clears, appends reuse the failed
offsets, and a reopen finds exactly the acknowledged records (no garbage left in the file).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from danube_broker.wal import DiskFull, Durability, StorageError, StorageFailed, TopicLog, WalConfig
from danube_common.wal.codec import StopReason
from danube_common.wal.segment import scan_segment_file
from tests.unit.wal.helpers import EIO, ENOSPC, Ops, append_all, cfg, read_all, records, segment_files

pytestmark = pytest.mark.unit

FAULTS = [
    pytest.param("write", ENOSPC, DiskFull, id="write-ENOSPC"),
    pytest.param("write", EIO, StorageFailed, id="write-EIO"),
    pytest.param("fsync", ENOSPC, DiskFull, id="fsync-ENOSPC"),
    pytest.param("fsync", EIO, StorageFailed, id="fsync-EIO"),
]


def inject(ops: Ops, where: str, err: int | None) -> None:
    if where == "write":
        ops.write_error = err
    else:
        ops.fsync_error = err


async def open_log(d: Path, ops: Ops | None = None, c: WalConfig | None = None) -> TopicLog:
    return await TopicLog.open(
        d, cfg=c or cfg(), durability=Durability.FSYNC, ops=ops.disk_ops() if ops else None
    )


def assert_clean_files(d: Path) -> None:
    for seg in segment_files(d):
        s = scan_segment_file(seg)
        assert s.result.stop is StopReason.END and s.result.end == s.file_bytes, seg


@pytest.mark.parametrize(("where", "err", "cls"), FAULTS)
async def test_failed_commit_leaves_the_log_consistent(
    tmp_path: Path, where: str, err: int, cls: type[StorageError]
) -> None:
    ops = Ops()
    log = await open_log(tmp_path, ops)
    good = await append_all(log, records(5), batch=2)

    inject(ops, where, err)
    results = await asyncio.gather(
        *(log.append([f"bad{i}".encode()] * 3, [9] * 3, [("p", 100 + i)] * 3) for i in range(6)),
        return_exceptions=True,
    )
    assert all(isinstance(r, cls) for r in results), results
    assert all(r.retryable for r in results if isinstance(r, StorageError))
    assert (log.durable_offset, log.next_offset) == (5, 5)
    assert log.last_sequence("p") == 0  # the failed records' sequence ids were taken back
    assert log.read(5, 10) == []
    assert await read_all(log) == good
    assert log.stats().failed_commits >= 1

    inject(ops, where, None)
    more = await append_all(log, records(4, start=100), batch=2)
    assert [e.offset for e in more] == [5, 6, 7, 8]
    assert await read_all(log) == good + more
    await log.aclose()
    assert_clean_files(tmp_path)
    log = await open_log(tmp_path)
    assert await read_all(log) == good + more
    assert log.next_offset == 9
    await log.aclose()


async def test_disk_full_then_later_appends_retry_the_write(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, ops)
    await append_all(log, records(2))
    ops.write_error = ENOSPC
    for _ in range(3):  # each append is a new attempt while the disk stays full
        with pytest.raises(DiskFull):
            await log.append([b"x" * 100], [0])
    writes = ops.writes
    ops.write_error = None
    assert await log.append([b"ok"], [0]) == 2
    assert ops.writes == writes + 1
    await log.aclose()
    assert_clean_files(tmp_path)


async def test_failure_when_the_truncate_fails_too(tmp_path: Path) -> None:
    ops = Ops()
    log = await open_log(tmp_path, ops)
    good = await append_all(log, records(3))
    ops.fsync_error = EIO
    with pytest.raises(StorageFailed):
        await log.append([b"lost"], [0])
    ops.fsync_error = None
    ops.truncate_error = EIO  # the repair before the next write fails as well
    with pytest.raises(StorageFailed):
        await log.append([b"lost-too"], [0])
    ops.truncate_error = None
    assert await log.append([b"kept"], [0]) == 3
    await log.aclose()
    assert_clean_files(tmp_path)
    log = await open_log(tmp_path)
    assert [e.record for e in await read_all(log)] == [e.record for e in good] + [b"kept"]
    await log.aclose()


# A roll's fsyncs, in order: the index's temporary file, the directory (rename), the new
# segment's header, the directory (new file).
ROLL_STEPS = [pytest.param(1, id="index"), pytest.param(3, id="new-segment")]


@pytest.mark.parametrize("fail_at", ROLL_STEPS)
async def test_failed_roll_before_a_commit_fails_that_commit(tmp_path: Path, fail_at: int) -> None:
    ops = Ops()
    c = cfg(segment_max_age_s=60)
    log = await open_log(tmp_path, ops, c)
    good = await append_all(log, records(4))
    ops.clock_ms += 60_000  # the next commit rolls first
    ops.fail_fsync_numbers = {ops.fsyncs + fail_at}
    with pytest.raises(StorageFailed):
        await log.append([b"lost"], [0])
    assert log.stats().segments == 1 and (log.next_offset, log.durable_offset) == (4, 4)
    assert segment_files(tmp_path, "idx") == []  # a failed roll leaves no index behind
    good += await append_all(log, records(3, start=10))  # this commit's roll succeeds
    assert log.stats().segments == 2
    assert await read_all(log) == good
    await log.aclose()
    assert_clean_files(tmp_path)
    log = await open_log(tmp_path, None, c)
    assert await read_all(log) == good
    await log.aclose()


@pytest.mark.parametrize("fail_at", ROLL_STEPS)
async def test_failed_explicit_roll_changes_nothing(tmp_path: Path, fail_at: int) -> None:
    ops = Ops()
    log = await open_log(tmp_path, ops)
    good = await append_all(log, records(4))
    ops.fail_fsync_numbers = {ops.fsyncs + fail_at}
    with pytest.raises(StorageFailed):
        await log.roll()
    assert log.stats().segments == 1
    good += await append_all(log, records(2, start=10))
    assert await log.roll() is True
    good += await append_all(log, records(2, start=20))
    await log.aclose()
    assert_clean_files(tmp_path)
    log = await open_log(tmp_path)
    assert await read_all(log) == good and log.stats().segments == 2
    await log.aclose()
