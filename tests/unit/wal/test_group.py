"""CommitGroup: many logs committed by one scheduler (one thread hop per round).

Real files in tmp_path; faults and held commits through each log's own DiskOps (helpers.Ops).
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danube_broker.wal import CommitGroup, DiskFull, Durability, LogClosed, StorageFailed, TopicLog, WalConfig
from danube_broker.wal.model import COMMIT_OBSERVER, CommitRound
from danube_broker.wal.segments import ActiveSegment
from danube_broker.wal.syncfs import CommitSync, filesystem_type, resolve, syncfs, trusted_filesystem
from tests.support import wait_until
from tests.unit.wal.helpers import EIO, ENOSPC, Ops, cfg, read_all, records

pytestmark = pytest.mark.unit


class Rounds:
    """A RoundObserver that keeps (logs, bytes) of every round."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.idle_closed = 0

    def round_committed(self, logs: int, nbytes: int, seconds: float) -> None:
        self.seen.append((logs, nbytes))

    def idle_file_closed(self) -> None:
        self.idle_closed += 1


async def open_logs(
    base: Path,
    n: int,
    group: CommitGroup | None,
    *,
    durability: Durability = Durability.FSYNC,
    c: WalConfig | None = None,
) -> tuple[list[TopicLog], list[Ops]]:
    ops = [Ops() for _ in range(n)]
    logs = [
        await TopicLog.open(
            base / f"t{i}", cfg=c or cfg(), durability=durability, ops=ops[i].disk_ops(), group=group
        )
        for i in range(n)
    ]
    return logs, ops


async def close_all(logs: list[TopicLog], group: CommitGroup) -> None:
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def stored(directory: Path) -> list[bytes]:
    """The records a log's directory holds, read back by a fresh open (recovery)."""
    lg = await TopicLog.open(directory, cfg=cfg(), durability=Durability.FSYNC)
    try:
        return [e.record for e in await read_all(lg)]
    finally:
        await lg.aclose()


async def hold(ops: Ops) -> threading.Event:
    """Block the next write of ``ops`` (a round in flight); returns the gate to release."""
    gate = threading.Event()
    ops.entered.clear()
    ops.gate = gate
    return gate


async def until_entered(ops: Ops) -> None:
    assert await asyncio.to_thread(ops.entered.wait, 10), "the held write never started"


async def test_many_logs_share_rounds_and_keep_their_own_offsets(tmp_path: Path) -> None:
    rounds = Rounds()
    group = CommitGroup(observer=rounds)
    logs, _ = await open_logs(tmp_path, 20, group)

    async def appender(lg: TopicLog, k: int) -> list[int]:
        return [await lg.append(records(2, start=10 * j), [j, j]) for j in range(10 + k % 3)]

    results = await asyncio.gather(*(appender(lg, i) for i, lg in enumerate(logs)))
    for i, (lg, firsts) in enumerate(zip(logs, results, strict=True)):
        assert firsts == list(range(0, 2 * len(firsts), 2)), i  # call order, no gap
        assert lg.durable_offset == lg.next_offset == 2 * len(firsts)
    commits = sum(lg.stats().commits for lg in logs)
    assert group.rounds < commits  # rounds served several logs at once
    assert max(n for n, _ in rounds.seen) > 1
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    # what was acked is on disk
    for i in range(20):
        lg = await TopicLog.open(tmp_path / f"t{i}", cfg=cfg(), durability=Durability.FSYNC)
        assert [e.offset for e in await read_all(lg)] == list(range(2 * len(results[i])))
        await lg.aclose()


async def test_work_arriving_during_a_round_goes_into_the_next_one(tmp_path: Path) -> None:
    group = CommitGroup()
    logs, ops = await open_logs(tmp_path, 6, group)
    gate = await hold(ops[0])
    first = asyncio.ensure_future(logs[0].append([b"a"], [1]))
    await until_entered(ops[0])
    seen: list[CommitRound] = []
    COMMIT_OBSERVER.set(seen.append)
    later = [asyncio.ensure_future(lg.append([b"b"], [2])) for lg in logs[1:]]
    await asyncio.sleep(0)
    assert group.rounds == 0 and not any(f.done() for f in later)
    gate.set()
    assert await first == 0
    assert await asyncio.gather(*later) == [0] * 5
    assert group.rounds == 2  # the five waiting logs shared one round
    assert {r.logs for r in seen} == {5}
    for lg in logs:
        await lg.aclose()
    await group.aclose()


@pytest.mark.parametrize(
    ("where", "err", "cls"),
    [("write", ENOSPC, DiskFull), ("write", EIO, StorageFailed), ("fsync", EIO, StorageFailed)],
)
async def test_a_failing_log_fails_only_its_own_batches(
    tmp_path: Path, where: str, err: int, cls: type[Exception]
) -> None:
    group = CommitGroup()
    logs, ops = await open_logs(tmp_path, 4, group)
    for lg in logs:
        await lg.append([b"ok"], [1])
    # Log 0 holds a round, so logs 1-3 queue up and share the next one; log 1 fails in it.
    gate = await hold(ops[0])
    blocker = asyncio.ensure_future(logs[0].append([b"x"], [1]))
    await until_entered(ops[0])
    if where == "write":
        ops[1].write_error = err
    else:
        ops[1].fsync_error = err
    futs = {
        i: [asyncio.ensure_future(logs[i].append([b"y"] * 2, [2, 2])) for _ in range(3)] for i in (1, 2, 3)
    }
    await asyncio.sleep(0)
    gate.set()
    await blocker
    bad = await asyncio.gather(*futs[1], return_exceptions=True)
    assert all(isinstance(r, cls) for r in bad), bad
    for i in (2, 3):
        assert await asyncio.gather(*futs[i]) == [1, 3, 5]
        assert logs[i].durable_offset == 7
    assert (logs[1].durable_offset, logs[1].next_offset) == (1, 1)
    assert group.rounds <= 6
    # The fault clears: log 1 reuses the failed offsets.
    ops[1].write_error = ops[1].fsync_error = None
    assert await logs[1].append([b"z"], [3]) == 1
    await close_all(logs, group)
    assert await stored(tmp_path / "t1") == [b"ok", b"z"]


async def test_a_backlog_does_not_starve_other_logs(tmp_path: Path) -> None:
    rounds = Rounds()
    c = cfg(max_batch_bytes_per_commit=4096)
    group = CommitGroup(observer=rounds, max_round_bytes=16 * 1024)
    logs, _ = await open_logs(tmp_path, 8, group, c=c, durability=Durability.NONE)
    big = logs[0]
    backlog = [await big.enqueue([b"x" * 1000], [1]) for _ in range(400)]  # ~400 KB queued
    small = [asyncio.ensure_future(lg.append([b"s"], [1])) for lg in logs[1:]]
    await asyncio.gather(*small)
    # The small logs were served while the backlog was still mostly queued (round-robin).
    assert big.durable_offset < 100
    await asyncio.gather(*backlog)
    assert big.durable_offset == 400
    # Each round stayed under the overall cap (a single log's first batch may exceed it alone).
    assert all(nbytes <= 16 * 1024 or n == 1 for n, nbytes in rounds.seen)
    assert max(nbytes for _, nbytes in rounds.seen) <= 16 * 1024
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_aclose_during_a_round_commits_what_is_queued(tmp_path: Path) -> None:
    group = CommitGroup()
    logs, ops = await open_logs(tmp_path, 3, group)
    gate = await hold(ops[0])
    inflight = asyncio.ensure_future(logs[0].append([b"a"], [1]))
    await until_entered(ops[0])
    queued = [
        asyncio.ensure_future(logs[0].append([b"b"], [1])),
        asyncio.ensure_future(logs[1].append([b"c"], [1])),
    ]
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(logs[0].aclose())
    await asyncio.sleep(0)
    assert not closing.done()
    with pytest.raises(LogClosed):
        await logs[0].append([b"late"], [1])
    gate.set()
    await closing
    assert await inflight == 0
    assert await asyncio.gather(*queued) == [1, 0]
    assert await logs[2].append([b"d"], [1]) == 0  # the group goes on for the others
    for lg in logs[1:]:
        await lg.aclose()
    await group.aclose()
    with pytest.raises(LogClosed):
        await logs[1].append([b"x"], [1])
    lg = await TopicLog.open(tmp_path / "t0", cfg=cfg(), durability=Durability.FSYNC)
    assert [e.record for e in await read_all(lg)] == [b"a", b"b"]
    await lg.aclose()


async def test_group_aclose_serves_what_is_queued(tmp_path: Path) -> None:
    group = CommitGroup()
    logs, _ = await open_logs(tmp_path, 5, group)
    futs = [await lg.enqueue([b"q"] * 3, [1] * 3) for lg in logs]
    await group.aclose()
    assert [await f for f in futs] == [0] * 5
    for lg in logs:
        await lg.aclose()


async def test_a_bug_in_one_log_breaks_that_log_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    group = CommitGroup()
    logs, _ = await open_logs(tmp_path, 3, group)
    real = ActiveSegment.note_batch

    def bug(self: ActiveSegment, *a: object, **kw: object) -> None:
        if self.path.parent.name == "t1":
            raise RuntimeError("boom")
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ActiveSegment, "note_batch", bug)
    caplog.set_level(logging.ERROR)
    results = await asyncio.gather(*(lg.append([b"a"], [1]) for lg in logs), return_exceptions=True)
    assert results[0] == 0 and results[2] == 0
    assert isinstance(results[1], StorageFailed)
    assert any("writer crashed" in r.getMessage() for r in caplog.records)
    with pytest.raises(StorageFailed, match="crashed"):
        await logs[1].append([b"b"], [1])
    assert await logs[0].append([b"b"], [1]) == 1
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_rolls_in_a_shared_round(tmp_path: Path) -> None:
    group = CommitGroup()
    c = cfg(segment_max_bytes=300)
    logs, _ = await open_logs(tmp_path, 4, group, c=c)
    for k in range(6):
        await asyncio.gather(*(lg.append([b"r" * 60], [k]) for lg in logs))
    assert all(lg.stats().segments > 1 for lg in logs)
    assert await logs[0].roll() is True
    assert await logs[0].roll() is False  # nothing to seal
    for lg in logs:
        assert [e.offset for e in await read_all(lg)] == list(range(6))
        await lg.aclose()
    await group.aclose()


async def test_a_burst_queued_at_once_is_cut_into_segments_near_their_size(tmp_path: Path) -> None:
    # Forty batches queued before the first round: one commit of all of them would leave one big
    # unsealed segment (nothing to upload or trim); commits stop at the segment's room instead.
    group = CommitGroup()
    c = cfg(segment_max_bytes=1000)
    (lg,), _ = await open_logs(tmp_path, 1, group, c=c)
    futs = [await lg.enqueue([b"b" * 80], [k]) for k in range(40)]
    await asyncio.gather(*futs)
    sizes = [p.stat().st_size for p in sorted((tmp_path / "t0").glob("*.wal"))]
    assert len(sizes) >= 4, sizes
    assert max(sizes) <= 1000 + 200, sizes  # a segment passes its size by one frame at most
    assert [e.offset for e in await read_all(lg)] == list(range(40))
    await lg.aclose()
    await group.aclose()


async def test_a_crashed_scheduler_is_loud_and_fails_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures: list[str] = []
    group = CommitGroup(on_failure=lambda what, exc: failures.append(what))
    logs, _ = await open_logs(tmp_path, 2, group)

    def bug(self: CommitGroup) -> list[object]:
        raise RuntimeError("scheduler bug")

    monkeypatch.setattr(CommitGroup, "_take_round", bug)
    results = await asyncio.gather(*(lg.append([b"a"], [1]) for lg in logs), return_exceptions=True)
    assert all(isinstance(r, StorageFailed) for r in results), results
    assert failures == ["wal-commit-group"]
    for lg in logs:
        await lg.aclose()
    await group.aclose()


# ---------------------------------------------------------------- ordering under interleaving

_steps = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 5), st.integers(0, 2)), min_size=1, max_size=60)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_offsets_stay_in_call_order_and_gap_free_per_log(steps: list[tuple[int, int, int]]) -> None:
    """Random interleavings of appends to 5 logs (some awaited at once, some left queued, with
    random yields): each log's offsets follow its call order without gaps, and the log reads
    back exactly what was appended."""

    async def run(base: Path) -> None:
        group = CommitGroup(max_round_bytes=2048)
        logs, _ = await open_logs(
            base, 5, group, c=cfg(max_batch_bytes_per_commit=512), durability=Durability.NONE
        )
        expect: list[list[bytes]] = [[] for _ in logs]
        pending: list[tuple[int, int, asyncio.Future[int]]] = []
        for n, (i, size, yields) in enumerate(steps):
            recs = [f"{i}-{n}-{k}".encode() for k in range(size)]
            want = len(expect[i])
            expect[i] += recs
            pending.append((i, want, await logs[i].enqueue(recs, [n] * size)))
            for _ in range(yields):
                await asyncio.sleep(0)
        for _i, want, fut in pending:
            assert await fut == want
        for i, lg in enumerate(logs):
            assert [e.record for e in await read_all(lg)] == expect[i]
            await lg.aclose()
        await group.aclose()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(Path(d)))


def open_paths() -> set[str]:
    """The files this process holds open."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed meanwhile
    return out


def active_path(lg: TopicLog) -> str:
    return str(lg._store.active.path)


async def test_idle_logs_close_their_segment_file_and_the_next_write_opens_it(tmp_path: Path) -> None:
    """A log unserved for idle_close_s has its active segment's fd closed (between rounds); a
    log kept busy keeps it; the next append opens it again and is durable (fsync'ed) and in
    order, rolls included, and a recovery reads every record back."""
    observer = Rounds()
    group = CommitGroup(idle_close_s=0.2, observer=observer)
    c = cfg(segment_max_bytes=600)
    logs, ops = await open_logs(tmp_path, 4, group, c=c)
    for lg in logs:
        await lg.append(records(2), [1, 2])
    busy, idle = logs[0], logs[1:]
    stop = asyncio.Event()

    async def keep_busy() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            await busy.append(records(1, start=100 + n), [n])
            await asyncio.sleep(0.02)  # load shaping: a write every 20 ms, well inside 0.2 s

    writer = asyncio.create_task(keep_busy())
    try:
        await wait_until(lambda: group.idle_closed >= 3, timeout_s=10)
        assert observer.idle_closed == group.idle_closed  # the metric sees each close
        paths = open_paths()
        assert not any(active_path(lg) in paths for lg in idle)
        assert active_path(busy) in paths
    finally:
        stop.set()
        await writer
    fsyncs = [o.fsyncs for o in ops]
    for i, lg in enumerate(idle, start=1):
        first = await lg.append(records(20, start=2, size=40), [3] * 20)  # 20 x ~50 B: rolls
        assert first == 2 and lg.durable_offset == 22
        assert ops[i].fsyncs > fsyncs[i]  # the write after reopening was fsync'ed
        assert lg.stats().segments > 1
        assert [e.record for e in await read_all(lg)] == records(2) + records(20, start=2, size=40)
    await wait_until(lambda: group.idle_closed >= 7, timeout_s=10)  # idle again: closed again
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    for lg in idle:
        again = await TopicLog.open(lg.directory, cfg=c, durability=Durability.FSYNC)
        assert [e.record for e in await read_all(again)] == records(2) + records(20, start=2, size=40)
        await again.aclose()


async def test_no_idle_closing_by_default(tmp_path: Path) -> None:
    group = CommitGroup()
    logs, _ = await open_logs(tmp_path, 2, group)
    await logs[0].append(records(1), [1])
    paths = open_paths()
    assert all(active_path(lg) in paths for lg in logs) and group.idle_closed == 0
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_a_log_never_written_is_closed_once_idle(tmp_path: Path) -> None:
    """Opening logs is all that happens (no round ever runs): the group still sets its timer."""
    group = CommitGroup(idle_close_s=0.1)
    logs, _ = await open_logs(tmp_path, 3, group)
    await wait_until(lambda: group.idle_closed == 3, timeout_s=10)
    paths = open_paths()
    assert not any(active_path(lg) in paths for lg in logs)
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_at_most_max_open_files_segment_files_stay_open(tmp_path: Path) -> None:
    """Beyond the bound the least recently used log's file is closed at once (a burst of
    topics opened faster than idle_close_s); writing to it opens it again and closes the next
    least recently used."""
    group = CommitGroup(idle_close_s=3600, max_open_files=2)
    logs, _ = await open_logs(tmp_path, 5, group)
    paths = open_paths()
    assert [active_path(lg) in paths for lg in logs] == [False, False, False, True, True]
    assert group.idle_closed == 3
    assert await logs[0].append(records(1), [1]) == 0  # opened again, written, fsync'ed
    paths = open_paths()
    assert [active_path(lg) in paths for lg in logs] == [True, False, False, False, True]
    assert [e.record for e in await read_all(logs[0])] == records(1)
    for lg in logs:
        await lg.aclose()
    await group.aclose()


# ---------------------------------------------------------------- commit_sync: filesystem


class FakeSyncfs:
    """syncfs for the group: counts calls (and the fds used), flushes for real, or fails."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.threads: list[int] = []
        self.error: int | None = None

    def __call__(self, fd: int) -> None:
        self.calls.append(fd)
        self.threads.append(threading.get_ident())
        if self.error is not None:
            raise OSError(self.error, os.strerror(self.error))
        syncfs(fd)


def fs_group(fake: FakeSyncfs, *, trusted: bool = True, loop_write_bytes: int = 0) -> CommitGroup:
    group = CommitGroup(
        commit_sync=CommitSync.FILESYSTEM,
        syncfs=fake,
        trusted=lambda dev: trusted,
        loop_write_bytes=loop_write_bytes,
    )
    assert group.commit_sync is CommitSync.FILESYSTEM
    return group


async def one_round(group: CommitGroup, logs: list[TopicLog], recs: list[bytes]) -> list[object]:
    """Append to every log at once: they are all in line before the scheduler runs, so one
    round serves them. Returns each append's result or exception."""
    before = group.rounds
    out = await asyncio.gather(*(lg.append(recs, [1] * len(recs)) for lg in logs), return_exceptions=True)
    assert group.rounds == before + 1, "the appends did not share one round"
    return out


async def test_filesystem_mode_flushes_a_round_of_many_logs_with_one_syncfs(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    group = fs_group(fake)
    logs, ops = await open_logs(tmp_path, 10, group)
    fsyncs = [o.fsyncs for o in ops]  # opening fsyncs the first segment's header
    assert await one_round(group, logs, [b"a", b"b"]) == [0] * 10
    assert len(fake.calls) == 1
    assert [o.fsyncs for o in ops] == fsyncs  # no per-file fdatasync
    assert [lg.durable_offset for lg in logs] == [2] * 10
    assert all(lg.stats().fsync_p50_ms >= 0 and lg.stats().commits == 1 for lg in logs)
    # A round with one syncing log uses that file's fdatasync (cheaper than a syncfs).
    assert await logs[3].append([b"c"], [2]) == 2
    assert len(fake.calls) == 1 and ops[3].fsyncs == fsyncs[3] + 1
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    for i in range(10):
        lg = await TopicLog.open(tmp_path / f"t{i}", cfg=cfg(), durability=Durability.FSYNC)
        assert [e.record for e in await read_all(lg)] == [b"a", b"b", *([b"c"] if i == 3 else [])]
        await lg.aclose()


async def test_a_file_system_syncfs_is_not_trusted_on_is_flushed_per_file(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    group = fs_group(fake, trusted=False)
    logs, ops = await open_logs(tmp_path, 5, group)
    fsyncs = [o.fsyncs for o in ops]
    assert await one_round(group, logs, [b"a"]) == [0] * 5
    assert fake.calls == []
    assert [o.fsyncs for o in ops] == [n + 1 for n in fsyncs]
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_a_failed_syncfs_fails_every_syncing_log_of_the_round_and_they_recover(tmp_path: Path) -> None:
    fake = FakeSyncfs()
    group = fs_group(fake)
    logs, _ = await open_logs(tmp_path, 4, group)
    quiet, _ = await open_logs(tmp_path / "none", 2, group, durability=Durability.NONE)
    assert await one_round(group, logs, [b"ok"]) == [0] * 4
    fake.error = EIO
    out = await one_round(group, [*logs, *quiet], [b"lost", b"lost"])
    assert all(isinstance(r, StorageFailed) for r in out[:4]), out
    assert out[4:] == [0, 0]  # durability none: nothing to flush, not failed
    assert [(lg.durable_offset, lg.next_offset) for lg in logs] == [(1, 1)] * 4
    # The fault clears: the failed offsets are reused; the failed frames were cut.
    fake.error = None
    assert await one_round(group, logs, [b"z"]) == [1] * 4
    for lg in [*logs, *quiet]:
        await lg.aclose()
    await group.aclose()
    for i in range(4):
        lg = await TopicLog.open(tmp_path / f"t{i}", cfg=cfg(), durability=Durability.FSYNC)
        assert [e.record for e in await read_all(lg)] == [b"ok", b"z"]
        await lg.aclose()


async def test_loop_writes_in_filesystem_mode_write_on_the_loop_and_syncfs_in_the_thread(
    tmp_path: Path,
) -> None:
    fake = FakeSyncfs()
    group = fs_group(fake, loop_write_bytes=1024 * 1024)
    logs, ops = await open_logs(tmp_path, 10, group)
    loop_thread = threading.get_ident()
    # The first round on a file system goes to the thread: its syncfs fd must predate the writes.
    assert await one_round(group, logs, [b"a"]) == [0] * 10
    assert all(o.write_threads[-1] != loop_thread for o in ops)
    for o in ops:
        o.write_threads.clear()
    assert await one_round(group, logs, [b"b", b"c"]) == [1] * 10
    assert all(o.write_threads == [loop_thread] for o in ops)  # one write each, on the loop
    assert len(fake.calls) == 2 and fake.threads[-1] != loop_thread  # the flush: one syncfs, in the thread
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    for i in range(10):
        lg = await TopicLog.open(tmp_path / f"t{i}", cfg=cfg(), durability=Durability.FSYNC)
        assert [e.record for e in await read_all(lg)] == [b"a", b"b", b"c"]
        await lg.aclose()


async def test_loop_writes_in_files_mode_fdatasync_in_the_thread_and_respect_the_budget(
    tmp_path: Path,
) -> None:
    group = CommitGroup(commit_sync=CommitSync.FILES, loop_write_bytes=200)
    logs, ops = await open_logs(tmp_path, 4, group)
    loop_thread = threading.get_ident()
    fsyncs = [o.fsyncs for o in ops]
    for o in ops:
        o.write_threads.clear()  # opening wrote the segment headers
    # Each log's frames (~60 bytes) fit the round's 200-byte budget three times: the fourth
    # log's write goes to the thread with the flush.
    assert await one_round(group, logs, [b"x" * 40]) == [0] * 4
    on_loop = [o.write_threads == [loop_thread] for o in ops]
    assert sorted(on_loop) == [False, True, True, True], [o.write_threads for o in ops]
    assert [o.fsyncs for o in ops] == [n + 1 for n in fsyncs]
    assert all(t != loop_thread for o in ops for t in o.fsync_threads[-1:])
    for lg in logs:
        await lg.aclose()
    await group.aclose()


async def test_a_failed_loop_write_fails_its_log_only_and_the_repair_runs_in_the_thread(
    tmp_path: Path,
) -> None:
    group = CommitGroup(commit_sync=CommitSync.FILES, loop_write_bytes=1024 * 1024)
    logs, ops = await open_logs(tmp_path, 3, group)
    loop_thread = threading.get_ident()
    assert await one_round(group, logs, [b"ok"]) == [0] * 3
    ops[1].write_error = ENOSPC  # a full disk: half of the frames are written, then ENOSPC
    out = await one_round(group, logs, [b"lost", b"lost"])
    assert out[0] == 1 and out[2] == 1
    assert isinstance(out[1], DiskFull), out
    assert ops[1].write_threads[-1] == loop_thread  # the failed write was on the loop
    ops[1].write_error = None
    ops[1].write_threads.clear()
    assert await logs[1].append([b"z"], [3]) == 1  # the failed offsets are reused
    assert ops[1].write_threads and all(t != loop_thread for t in ops[1].write_threads)  # cut + write: thread
    await close_all(logs, group)
    assert await stored(tmp_path / "t1") == [b"ok", b"z"]


async def test_filesystem_mode_with_the_real_syncfs_keeps_one_fd_per_file_system(tmp_path: Path) -> None:
    if resolve(CommitSync.AUTO) is not CommitSync.FILESYSTEM:
        pytest.skip("this kernel does not report write-back errors to syncfs (Linux < 5.8)")
    if not trusted_filesystem(os.stat(tmp_path).st_dev):
        pytest.skip(f"{tmp_path} is not on a file system syncfs is trusted on")
    fds_before = len(os.listdir("/proc/self/fd"))
    group = CommitGroup(commit_sync=CommitSync.AUTO)
    assert group.commit_sync is CommitSync.FILESYSTEM
    logs, _ = await open_logs(tmp_path, 6, group)
    for n in range(3):
        assert await one_round(group, logs, [b"r%d" % n]) == [n] * 6
    # 6 logs: a lock fd + an active segment fd each, and the group's one fd on tmp_path's fs.
    assert len(os.listdir("/proc/self/fd")) == fds_before + 6 * 2 + 1
    for lg in logs:
        await lg.aclose()
    await group.aclose()
    assert len(os.listdir("/proc/self/fd")) == fds_before
    lg = await TopicLog.open(tmp_path / "t5", cfg=cfg(), durability=Durability.FSYNC)
    assert [e.record for e in await read_all(lg)] == [b"r0", b"r1", b"r2"]
    await lg.aclose()


@pytest.mark.parametrize(
    ("asked", "system", "release", "used"),
    [
        (CommitSync.AUTO, "Linux", "6.18.44-fc-v669", CommitSync.FILESYSTEM),
        (CommitSync.AUTO, "Linux", "5.8.0", CommitSync.FILESYSTEM),
        (CommitSync.AUTO, "Linux", "5.4.0-150-generic", CommitSync.FILES),
        (CommitSync.FILESYSTEM, "Linux", "4.19.0", CommitSync.FILES),
        (CommitSync.AUTO, "Darwin", "23.1.0", CommitSync.FILES),
        (CommitSync.FILES, "Linux", "6.1.0", CommitSync.FILES),
    ],
)
def test_commit_sync_resolves_to_what_the_platform_can_be_trusted_with(
    asked: CommitSync, system: str, release: str, used: CommitSync, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="danube_broker.wal.syncfs"):
        assert resolve(asked, system=system, release=release) is used
    warned = [r.getMessage() for r in caplog.records]
    if asked is CommitSync.FILESYSTEM and used is CommitSync.FILES:
        assert warned and "needs >= 5.8" in warned[0] and "one fdatasync per file instead" in warned[0]
    else:
        assert not warned


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 27 0:40 / /var/lib/docker/x rw,relatime shared:5 - overlay overlay rw,lowerdir=/a,upperdir=/b
40 27 0:52 / /mnt/nfs rw,relatime master:3 - nfs4 srv:/export rw,vers=4.2
"""


@pytest.mark.parametrize(
    ("dev", "kind", "trusted"),
    [
        (os.makedev(254, 0), "ext4", True),
        (os.makedev(0, 40), "overlay", False),
        (os.makedev(0, 52), "nfs4", False),
        (os.makedev(8, 1), None, False),
    ],
)
def test_syncfs_is_trusted_only_on_local_disk_file_systems(dev: int, kind: str | None, trusted: bool) -> None:
    assert filesystem_type(dev, MOUNTINFO) == kind
    assert trusted_filesystem(dev, MOUNTINFO) is trusted


async def test_the_groups_cache_budget_caps_its_logs_caches_and_reads_fall_back_to_disk(
    tmp_path: Path,
) -> None:
    group = CommitGroup(cache_budget_bytes=20_000)
    assert group.cache_budget is not None
    logs, _ = await open_logs(tmp_path, 4, group)
    for k in range(10):  # 4 logs x 10 appends x 3 x 500 bytes = 60,000 bytes: 3x the budget
        await asyncio.gather(*(lg.append([bytes([k]) * 500] * 3, [k] * 3) for lg in logs))
        assert group.cache_budget.used <= 20_000
    assert group.cache_budget.trims > 0
    for lg in logs:  # every record is still read back, from the cache or from disk
        assert [e.record for e in await read_all(lg)] == [
            bytes([k]) * 500 for k in range(10) for _ in range(3)
        ]
    await close_all(logs, group)
    assert group.cache_budget.used == 0  # closed logs' caches left the budget
