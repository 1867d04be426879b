"""The commit journal (``wal.commit_sync: journal``): its format, its replay rules, and a commit
group that makes rounds durable with it. Real files in tmp_path; faults through helpers.Ops."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from danube_broker.wal import CommitGroup, Durability, StorageFailed, TopicLog, WalConfig
from danube_broker.wal.journal import JournalWriter
from danube_broker.wal.syncfs import CommitSync
from danube_common.wal import journal as jr
from danube_common.wal.segment import HEADER_BYTES, encode_header, segment_name
from tests.support import wait_until
from tests.unit.wal.helpers import EIO, Ops, cfg, cut_to_headers
from tests.unit.wal.test_group import one_round, stored

pytestmark = pytest.mark.unit


def entry(path: str, data: bytes, *, pos: int = HEADER_BYTES, first: int = 0, created: int = 7) -> jr.Entry:
    return jr.Entry(path.encode(), encode_header(first, created), pos, data)


def write_journal(data_dir: Path, seq: int, records: list[list[jr.Entry]], *, tail: bytes = b"") -> Path:
    d = jr.journal_dir(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / jr.journal_name(seq)
    path.write_bytes(jr.file_header() + b"".join(jr.encode_record(r) for r in records) + tail)
    return path


def segment(data_dir: Path, rel: str, *, first: int = 0, created: int = 7, body: bytes = b"") -> Path:
    path = data_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_header(first, created) + body)
    return path


# ---------------------------------------------------------------- format


def test_records_read_back_in_order_and_a_torn_last_record_is_ignored() -> None:
    recs = [[entry("a/b/x.wal", b"one"), entry("c/d/y.wal", b"two", pos=99)], [entry("a/b/x.wal", b"three")]]
    buf = jr.file_header() + b"".join(jr.encode_record(r) for r in recs)
    assert list(jr.read_records(buf)) == recs
    first_end = len(jr.file_header()) + len(jr.encode_record(recs[0]))
    for cut in range(first_end, len(buf)):  # the power went out while the last one was written
        assert list(jr.read_records(buf[:cut])) == recs[:1], cut
    corrupt = bytearray(buf)
    corrupt[-1] ^= 0xFF
    assert list(jr.read_records(bytes(corrupt))) == recs[:1]
    assert list(jr.read_records(buf + b"\0" * 64)) == recs  # a zero-filled end is the end
    assert list(jr.read_records(b"NOTAJRNL" + buf[8:])) == []


def test_a_segment_header_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        jr.encode_record([jr.Entry(b"p", b"short", 0, b"x")])


# ---------------------------------------------------------------- replay


def test_replay_puts_frames_back_skips_deleted_and_replaced_segments_and_deletes_the_journal(
    tmp_path: Path,
) -> None:
    lost = segment(tmp_path, "ns/t1/" + segment_name(0))  # the frames never reached the disk
    kept = segment(tmp_path, "ns/t2/" + segment_name(0), body=b"AAAA")
    replaced = segment(tmp_path, "ns/t3/" + segment_name(0), created=8, body=b"new!")
    journal = write_journal(
        tmp_path,
        1,
        [
            [entry("ns/t1/" + segment_name(0), b"1111"), entry("ns/t2/" + segment_name(0), b"AAAA")],
            [entry("ns/t1/" + segment_name(0), b"2222", pos=HEADER_BYTES + 4)],
            [entry("ns/t3/" + segment_name(0), b"old!"), entry("ns/gone/" + segment_name(0), b"zzzz")],
        ],
        tail=b"\x05\x00",  # a torn record header
    )
    later = write_journal(tmp_path, 2, [[entry("ns/t1/" + segment_name(0), b"3333", pos=HEADER_BYTES + 4)]])
    report = jr.replay(tmp_path)
    assert lost.read_bytes() == encode_header(0, 7) + b"11113333"  # the later file wins
    assert kept.read_bytes() == encode_header(0, 7) + b"AAAA"
    assert replaced.read_bytes() == encode_header(0, 8) + b"new!"  # another segment of that name
    assert (report.files, report.records) == (2, 4)
    assert (report.written, report.present, report.missing, report.superseded) == (3, 1, 1, 1)
    assert not journal.exists() and not later.exists()
    assert jr.replay(tmp_path).files == 0  # nothing left: replaying again changes nothing


def test_replay_unless_locked_leaves_a_live_writers_journal_alone(tmp_path: Path) -> None:
    lost = segment(tmp_path, "ns/t/" + segment_name(0))
    fd = jr.lock(tmp_path)
    journal = write_journal(tmp_path, 1, [[entry("ns/t/" + segment_name(0), b"data")]])
    try:
        assert jr.replay_unless_locked(tmp_path) is None
        assert journal.exists() and lost.read_bytes() == encode_header(0, 7)
    finally:
        os.close(fd)
    report = jr.replay_unless_locked(tmp_path)
    assert report is not None and report.written == 1
    assert lost.read_bytes() == encode_header(0, 7) + b"data"
    assert jr.replay_unless_locked(tmp_path / "elsewhere") is None  # no journal there at all


def test_a_second_writer_of_one_data_directory_is_refused(tmp_path: Path) -> None:
    w = JournalWriter.open(tmp_path)
    try:
        with pytest.raises(BlockingIOError):
            JournalWriter.open(tmp_path, lock_wait_s=0.05)
    finally:
        w.close()
    JournalWriter.open(tmp_path).close()  # released by close()


# ---------------------------------------------------------------- a commit group with a journal


def journal_group(
    data_dir: Path, ops: Ops, *, flush: object = None, max_bytes: int = 1 << 30, checkpoint_s: float = 3600.0
) -> CommitGroup:
    w = JournalWriter.open(
        data_dir,
        ops=ops.disk_ops(),
        flush_filesystem=flush,  # type: ignore[arg-type]
        max_bytes=max_bytes,
        checkpoint_s=checkpoint_s,
    )
    return CommitGroup(commit_sync=CommitSync.JOURNAL, journal=w, loop_write_bytes=1 << 20)


async def open_logs(base: Path, n: int, group: CommitGroup) -> tuple[list[TopicLog], list[Ops]]:
    ops = [Ops() for _ in range(n)]
    logs = [
        await TopicLog.open(
            base / "ns" / f"t{i}", cfg=cfg(), durability=Durability.FSYNC, ops=ops[i].disk_ops(), group=group
        )
        for i in range(n)
    ]
    return logs, ops


async def test_a_round_of_many_logs_is_one_journal_fsync_and_survives_losing_the_segments(
    tmp_path: Path,
) -> None:
    jops = Ops()
    group = journal_group(tmp_path, jops)
    logs, ops = await open_logs(tmp_path, 10, group)
    seg_fsyncs = [o.fsyncs for o in ops]  # opening fsyncs the first segment's header
    before = jops.fsyncs
    assert await one_round(group, logs, [b"a", b"b"]) == [0] * 10
    assert await one_round(group, logs, [b"c"]) == [2] * 10
    assert jops.fsyncs == before + 2  # one fdatasync per round, of the journal
    assert [o.fsyncs for o in ops] == seg_fsyncs  # none of the segments
    # A kill -9 here: the logs and the group are abandoned; then the machine loses power.
    for lg in logs:
        lg._store.close()  # type: ignore[attr-defined]  # release the directory locks as a dead process would
    os.close(group._journal._lock_fd)  # type: ignore[union-attr]
    assert cut_to_headers(tmp_path, "ns/*/*.wal") == 10
    w = JournalWriter.open(tmp_path)  # the next start replays before any log opens
    w.close()
    for i in range(10):
        assert await stored(tmp_path / "ns" / f"t{i}") == [b"a", b"b", b"c"]


async def test_a_failed_journal_fsync_fails_the_round_and_the_next_round_repairs_the_journal(
    tmp_path: Path,
) -> None:
    jops = Ops()
    group = journal_group(tmp_path, jops)
    logs, _ = await open_logs(tmp_path, 4, group)
    assert await one_round(group, logs, [b"ok"]) == [0] * 4
    jops.fsync_error = EIO
    out = await one_round(group, logs, [b"lost", b"lost"])
    assert all(isinstance(r, StorageFailed) for r in out), out
    assert [(lg.durable_offset, lg.next_offset) for lg in logs] == [(1, 1)] * 4
    jops.fsync_error = None
    w = group._journal
    assert w is not None and w.broken is not None
    assert await one_round(group, logs, [b"z"]) == [1] * 4  # the failed offsets are reused
    assert w.broken is None and w.checkpoints == 1
    # Only the new journal file is left: the failed record can never be replayed over "z".
    assert [p.name for _, p in jr.journal_files(jr.journal_dir(tmp_path))] == [jr.journal_name(2)]
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    for i in range(4):
        assert await stored(tmp_path / "ns" / f"t{i}") == [b"ok", b"z"]


async def test_a_journal_that_cannot_be_repaired_fails_rounds_until_it_can(tmp_path: Path) -> None:
    jops = Ops()
    group = journal_group(tmp_path, jops)
    logs, _ = await open_logs(tmp_path, 3, group)
    jops.fsync_error = EIO
    out = await one_round(group, logs, [b"x"])
    assert all(isinstance(r, StorageFailed) for r in out)
    out = await one_round(group, logs, [b"y"])  # the repair's own fsyncs fail
    assert all(isinstance(r, StorageFailed) for r in out)
    jops.fsync_error = None
    assert await one_round(group, logs, [b"z"]) == [0] * 3
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    for i in range(3):
        assert await stored(tmp_path / "ns" / f"t{i}") == [b"z"]


class PathOps(Ops):
    """Ops that also note the file each fdatasync flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.flushed.append(os.readlink(f"/proc/self/fd/{fd}"))


async def test_checkpoints_flush_the_segments_then_delete_older_journal_files(tmp_path: Path) -> None:
    jops = PathOps()
    group = journal_group(tmp_path, jops, max_bytes=200)  # a new file almost every round
    logs, ops = await open_logs(tmp_path, 3, group)
    seg_fsyncs = [o.fsyncs for o in ops]  # opening's
    w = group._journal
    assert w is not None
    for k in range(12):
        assert await one_round(group, logs, [f"r{k}".encode() * 20]) == [k] * 3
    await wait_until(lambda: w.checkpoints >= 3)
    assert w.files_started >= 4
    assert [o.fsyncs for o in ops] == seg_fsyncs  # the rounds flush no segment themselves
    # No syncfs given: the checkpoints fdatasync each segment file written meanwhile.
    segs = await asyncio.to_thread(lambda: {str(p) for p in tmp_path.glob("ns/*/*.wal")})
    assert segs <= set(jops.flushed)
    files = jr.journal_files(jr.journal_dir(tmp_path))
    assert len(files) <= 3, files  # the current one, and the ones a checkpoint is flushing
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    # A clean stop checkpoints everything: an empty journal file is all that is left.
    assert [p.read_bytes() for _, p in jr.journal_files(jr.journal_dir(tmp_path))] == [jr.file_header()]
    for i in range(3):
        assert await stored(tmp_path / "ns" / f"t{i}") == [f"r{k}".encode() * 20 for k in range(12)]


async def test_checkpoints_use_the_file_system_flush_when_given(tmp_path: Path) -> None:
    calls: list[int] = []
    group = journal_group(tmp_path, Ops(), flush=calls.append, checkpoint_s=0.001)
    logs, _ = await open_logs(tmp_path, 2, group)
    w = group._journal
    assert w is not None
    for k in range(3):
        await asyncio.sleep(0.005)
        assert await one_round(group, logs, [b"x"]) == [k] * 2
    await wait_until(lambda: w.checkpoints >= 1)
    assert calls  # syncfs on the data directory instead of one fdatasync per file
    for lg in logs:
        await lg.aclose()
    await group.aclose()


def test_journal_mode_needs_a_writer_and_the_shared_commit() -> None:
    with pytest.raises(ValidationError, match="shared_commit"):
        WalConfig(commit_sync=CommitSync.JOURNAL, shared_commit=False)
    assert WalConfig(commit_sync=CommitSync.JOURNAL).commit_sync is CommitSync.JOURNAL

    async def build() -> None:
        with pytest.raises(ValueError, match="JournalWriter"):
            CommitGroup(commit_sync=CommitSync.JOURNAL)

    asyncio.run(build())
