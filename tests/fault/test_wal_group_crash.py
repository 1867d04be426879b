"""Crashes under a shared CommitGroup: no acknowledged record is lost, offsets stay gap-free.

1. Power loss, simulated: many topics append through one group (with rolls; in one variant
   the appenders pause now and then, so the group closes idle logs' segment files and their
   next write opens them again); at a random moment everything not fdatasync'ed is dropped —
   each segment file is cut back to its size at its last fsync plus a random part of what came
   after (a torn, partly written-back tail), files never fsync'ed are emptied — then every log
   is recovered. With ``commit_sync`` filesystem a round's syncfs makes every segment file's
   size at that moment durable (and the power can go out during it).
2. kill -9: a child process runs the same load and prints each acknowledgement; it is killed
   mid-flight and the parent recovers the directories.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from danube_broker.wal import CommitGroup, DiskOps, Durability, TopicLog
from danube_broker.wal.journal import JournalWriter
from danube_broker.wal.syncfs import CommitSync, resolve, syncfs
from danube_common.wal import journal as jr
from tests.unit.wal.helpers import cfg, read_all

pytestmark = pytest.mark.slow

TOPICS = 30
MIB = 1024 * 1024


class PowerLossOps:
    """Real OS calls that remember each file's size at its last successful fdatasync. The
    power goes out at the ``crash_at``-th fsync (in the worker thread, amid a round): the synced
    sizes are frozen into ``snapshot`` and every call fails from then on."""

    def __init__(self, crash_at: int, base: Path) -> None:
        self.base = base
        self.synced: dict[str, int] = {}
        self.snapshot: dict[str, int] = {}
        self.dead = False
        self.fsyncs = 0
        self._crash_at = crash_at
        self._lock = threading.Lock()

    def arm(self, crash_at: int) -> None:
        """Count fsyncs from now on; the power goes out at the ``crash_at``-th."""
        with self._lock:
            self.fsyncs = 0
            self._crash_at = crash_at

    def _check(self) -> None:
        if self.dead:
            raise OSError(errno.EIO, "power lost")

    def pwrite(self, fd: int, data: bytes | memoryview, pos: int) -> int:
        self._check()
        return os.pwrite(fd, data, pos)

    def _count(self) -> None:
        with self._lock:
            self._check()
            self.fsyncs += 1
            if self.fsyncs >= self._crash_at:
                self.snapshot = dict(self.synced)
                self.dead = True
                self._check()

    def syncfs(self, fd: int) -> None:
        """The group's syncfs: every segment file's size before the call is durable after it."""
        self._count()
        sizes = {str(p): p.stat().st_size for p in self.base.glob("*/*.wal")}
        syncfs(fd)
        with self._lock:
            self._check()  # the power went out while it ran: it never returned
            self.synced.update(sizes)

    def fsync(self, fd: int) -> None:
        self._count()
        os.fdatasync(fd)
        st = os.fstat(fd)
        with self._lock:
            self._check()  # the power went out while this fsync ran: it never returned
            if stat.S_ISREG(st.st_mode):
                self.synced[os.readlink(f"/proc/self/fd/{fd}")] = st.st_size

    def ftruncate(self, fd: int, length: int) -> None:
        self._check()
        os.ftruncate(fd, length)

    def disk_ops(self) -> DiskOps:
        return DiskOps(pwrite=self.pwrite, fsync=self.fsync, ftruncate=self.ftruncate)


def lose_power(base: Path, synced: dict[str, int], rng: random.Random) -> tuple[int, int]:
    """Cut every segment file (and commit journal file) back to what was synced plus a random
    torn part of the rest. Returns (files cut, bytes dropped)."""
    cut = dropped = 0
    for seg in sorted([*base.glob("*/*.wal"), *jr.journal_dir(base).glob("*" + jr.SUFFIX)]):
        size = seg.stat().st_size
        keep = synced.get(str(seg), 0)
        if keep < size:
            new = rng.randint(keep, size)
            os.truncate(seg, new)
            cut += 1
            dropped += size - new
    return cut, dropped


def check_recovered(base: Path, acked: list[tuple[int, int, list[bytes]]]) -> int:
    """Every acked record is where its ack said; offsets are consecutive. Returns records."""

    async def run() -> int:
        total = 0
        for i in range(TOPICS):
            lg = await TopicLog.open(base / f"t{i}", cfg=cfg(), durability=Durability.FSYNC)
            entries = await read_all(lg)
            await lg.aclose()
            assert [e.offset for e in entries] == list(range(len(entries))), f"gap in t{i}"
            stored = [e.record for e in entries]
            for t, first, recs in acked:
                if t == i:
                    assert stored[first : first + len(recs)] == recs, f"t{i}: acked records at {first} lost"
            total += len(entries)
        return total

    return asyncio.run(run())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("seed", "idle_close_s", "commit_sync", "loop_write_bytes"),
    [
        (1, 0.0, CommitSync.FILES, 0),
        (2, 0.0, CommitSync.FILES, MIB),
        (3, 0.0, CommitSync.FILES, MIB),
        (4, 0.01, CommitSync.FILES, 0),
        (5, 0.01, CommitSync.FILES, MIB),
        (6, 0.0, CommitSync.FILESYSTEM, 0),
        (7, 0.0, CommitSync.FILESYSTEM, MIB),
        (8, 0.01, CommitSync.FILESYSTEM, MIB),
        (9, 0.0, CommitSync.JOURNAL, 0),
        (10, 0.0, CommitSync.JOURNAL, MIB),
        (11, 0.01, CommitSync.JOURNAL, MIB),
        (12, 0.0, CommitSync.JOURNAL, MIB),
    ],
    ids=str,
)
def test_power_loss_under_a_shared_group_keeps_every_acked_record(
    tmp_path: Path, seed: int, idle_close_s: float, commit_sync: CommitSync, loop_write_bytes: int
) -> None:
    """``loop_write_bytes``: the rounds' frames are written on the event loop (the broker's
    default), 0: in the worker thread with the flush."""
    rng = random.Random(seed)
    # Counted from the first append (opening's fsyncs are not): one per log per round (files),
    # one per round (filesystem, journal), plus the checkpoints' syncfs calls and journal files.
    crash_at = {
        CommitSync.FILES: rng.randint(240, 1440),
        CommitSync.FILESYSTEM: rng.randint(20, 240),
        CommitSync.JOURNAL: rng.randint(40, 340),
    }[commit_sync]
    ops = PowerLossOps(1 << 62, tmp_path)  # armed once the logs are open
    acked: list[tuple[int, int, list[bytes]]] = []
    closed = 0

    async def run() -> None:
        nonlocal closed
        journal = None
        if commit_sync is CommitSync.JOURNAL:
            # Small and short-lived journal files: checkpoints (a syncfs, then deletes) run
            # throughout, so the power also goes out amid them.
            journal = JournalWriter.open(
                tmp_path,
                ops=ops.disk_ops(),
                flush_filesystem=ops.syncfs,
                max_bytes=rng.choice([4096, 64 * 1024]),
                checkpoint_s=0.02,
            )
        group = CommitGroup(
            fsync_threads=4,
            idle_close_s=idle_close_s,
            commit_sync=commit_sync,
            syncfs=ops.syncfs,
            trusted=lambda dev: True,
            loop_write_bytes=loop_write_bytes,
            journal=journal,
        )
        c = cfg(segment_max_bytes=4096)
        logs = [
            await TopicLog.open(
                tmp_path / f"t{i}", cfg=c, durability=Durability.FSYNC, ops=ops.disk_ops(), group=group
            )
            for i in range(TOPICS)
        ]

        ops.arm(crash_at)  # the power goes out amid the appends, not while opening

        async def appender(i: int, a: int) -> None:
            r = random.Random(seed * 1000 + i * 10 + a)
            n = 0
            while not ops.dead:
                recs = [f"t{i}-a{a}-{n}-{k}".encode() * r.randint(1, 8) for k in range(r.randint(1, 4))]
                n += 1
                try:
                    first = await logs[i].append(recs, [n] * len(recs))
                except Exception:
                    return  # after the power loss
                acked.append((i, first, recs))
                if idle_close_s and r.random() < 0.2:
                    await asyncio.sleep(r.uniform(0, 4 * idle_close_s))  # load shaping: go idle

        await asyncio.gather(*(appender(i, a) for i in range(TOPICS) for a in range(2)))
        closed = group.idle_closed
        for lg in logs:
            await lg.aclose()
        await group.aclose()

    asyncio.run(run())
    assert ops.dead and len(acked) >= 100
    assert closed > 0 if idle_close_s else closed == 0  # files were closed and opened again
    cut, dropped = lose_power(tmp_path, ops.snapshot, rng)
    replayed = jr.replay(tmp_path) if commit_sync is CommitSync.JOURNAL else None  # as the next start does
    total = check_recovered(tmp_path, acked)
    assert total >= sum(len(r) for _, _, r in acked)
    print(
        f"seed {seed} ({commit_sync}, loop writes {loop_write_bytes}): {len(acked)} acks, {cut} files cut ({dropped} bytes),"
        f" {total} records recovered, {closed} idle files closed, {ops.fsyncs} flushes"
        + (f"; journal replay: {replayed}" if replayed is not None else "")
    )


CHILD = r"""
import asyncio, random, sys
from pathlib import Path
from danube_broker.wal import CommitGroup, Durability, TopicLog, WalConfig
from danube_broker.wal.journal import JournalWriter

async def main(base, topics, idle_close_s, commit_sync, loop_write_bytes):
    journal = JournalWriter.open(base, checkpoint_s=0.05) if commit_sync == "journal" else None
    group = CommitGroup(idle_close_s=idle_close_s, commit_sync=commit_sync, loop_write_bytes=loop_write_bytes,
                        journal=journal)
    assert group.commit_sync == commit_sync
    c = WalConfig(segment_max_bytes=8192)
    logs = [await TopicLog.open(base / f"t{i}", cfg=c, durability=Durability.FSYNC, group=group)
            for i in range(topics)]
    out = sys.stdout

    async def appender(i, a):
        r = random.Random(i * 10 + a)
        n = 0
        while True:
            size = r.randint(1, 4)
            first = await logs[i].append([f"t{i}-a{a}-{n}-{k}".encode() for k in range(size)], [n] * size)
            out.write(f"{i} {a} {n} {first} {size}\n")
            out.flush()
            n += 1
            if idle_close_s and r.random() < 0.2:
                await asyncio.sleep(r.uniform(0, 4 * idle_close_s))  # go idle: files closed, reopened

    await asyncio.gather(*(appender(i, a) for i in range(topics) for a in range(2)))

asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("idle_close_s", "commit_sync", "loop_write_bytes"),
    [
        (0.0, CommitSync.FILES, MIB),
        (0.01, CommitSync.FILES, 0),
        (0.0, CommitSync.FILESYSTEM, MIB),
        (0.01, CommitSync.FILESYSTEM, 0),
        (0.0, CommitSync.JOURNAL, MIB),
        (0.01, CommitSync.JOURNAL, 0),
    ],
    ids=str,
)
def test_kill9_under_a_shared_group_keeps_every_acked_record(
    tmp_path: Path, idle_close_s: float, commit_sync: CommitSync, loop_write_bytes: int
) -> None:
    if resolve(commit_sync) is not commit_sync:
        pytest.skip(f"commit_sync {commit_sync} is not supported on this kernel")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path),
            str(TOPICS),
            str(idle_close_s),
            commit_sync,
            str(loop_write_bytes),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while len(lines) < 2000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        lines += rest.splitlines(keepends=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    acked: list[tuple[int, int, list[bytes]]] = []
    for line in lines:
        if not line.endswith("\n"):
            continue  # cut by the kill
        i, a, n, first, size = map(int, line.split())
        acked.append((i, first, [f"t{i}-a{a}-{n}-{k}".encode() for k in range(size)]))
    assert len(acked) >= 500, len(acked)
    if commit_sync is CommitSync.JOURNAL:
        jr.replay(tmp_path)  # as the next start does: everything is in place after a kill -9
    total = check_recovered(tmp_path, acked)
    assert total >= sum(len(r) for _, _, r in acked)
