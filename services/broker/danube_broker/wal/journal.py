"""JournalWriter: the broker's side of the commit journal (``wal.commit_sync: journal``; the
format, the replay and the lock are :mod:`danube_common.wal.journal`).

The commit group calls it from its worker thread, once per round: :meth:`JournalWriter.before_round`
(the checkpoint bookkeeping), then :meth:`JournalWriter.commit` with the round's written jobs (one
append, one fdatasync). Checkpoints keep the journal short without stalling rounds: when the
current file is ``max_bytes`` long or ``checkpoint_s`` old, the next round starts a new file
(a create, a header and two fsyncs) and a background thread flushes every segment written while
the old file was current (one ``syncfs`` of the data directory's file system where it can be
trusted, else one fdatasync per file), then deletes the old file. A failed append or flush
*breaks* the journal: the next round first flushes everything and deletes every journal file
(synchronously), so a record whose flush failed can never be replayed over the frames the
segments get instead; until that succeeds every round fails (producers re-send).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from danube_broker.wal.segments import DiskOps, make_dirs, write_all
from danube_common.wal import journal as jr
from danube_common.wal.segment import encode_header

if TYPE_CHECKING:
    from danube_broker.wal.group import CommitJob

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_CHECKPOINT_S = 5.0
#: Segment paths remembered with their journal key (cleared beyond this many).
_KEYS_MAX = 65_536


class JournalWriter:
    def __init__(
        self,
        data_dir: Path,
        lock_fd: int,
        *,
        ops: DiskOps,
        flush_filesystem: Callable[[int], None] | None,
        max_bytes: int,
        checkpoint_s: float,
        next_seq: int,
    ) -> None:
        self.data_dir = data_dir
        self._dir = jr.journal_dir(data_dir)
        self._lock_fd = lock_fd
        self._ops = ops
        #: syncfs (None: the file system is not trusted with it: flush file by file).
        self._flush_fs = flush_filesystem
        self._max_bytes = max_bytes
        self._checkpoint_s = checkpoint_s
        self._seq = next_seq
        self._fd = -1
        self._size = 0
        self._opened_at = 0.0
        #: Segment files written while the current journal file was current.
        self._touched: set[Path] = set()
        #: Older journal files not deleted yet, with the segment files their records went to.
        self._older: list[tuple[Path, set[Path]]] = []
        self._checkpoint: Future[None] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="danube-wal-checkpoint")
        self._mutex = threading.Lock()  # _older: the round thread and the checkpoint thread
        self.broken: BaseException | None = None
        self._keys: dict[Path, tuple[int, bytes, bytes]] = {}
        #: Counters (tests, metrics): checkpoints done and journal files started.
        self.checkpoints = 0
        self.files_started = 0

    # ------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        ops: DiskOps | None = None,
        flush_filesystem: Callable[[int], None] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        checkpoint_s: float = DEFAULT_CHECKPOINT_S,
        lock_wait_s: float = 10.0,
    ) -> JournalWriter:
        """Lock ``data_dir``'s journal, replay what a previous run left, start a new file
        (blocking: before any topic log of ``data_dir`` opens). Raises BlockingIOError if
        another process still holds the lock after ``lock_wait_s``."""
        if max_bytes <= 0 or checkpoint_s <= 0:
            raise ValueError("the journal's max_bytes and checkpoint_s must be positive")
        ops = ops or DiskOps()
        make_dirs(jr.journal_dir(data_dir), ops, sync=True)  # the lock creates it too, not durably
        deadline = time.monotonic() + lock_wait_s
        while True:
            try:
                fd = jr.lock(data_dir)
                break
            except BlockingIOError:
                # The WAL uploader replays a dead broker's journal holding the lock (briefly).
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        try:
            existing = jr.journal_files(jr.journal_dir(data_dir))
            nxt = existing[-1][0] + 1 if existing else 1  # names keep growing across restarts
            jr.replay(data_dir, fsync=ops.fsync, pwrite=ops.pwrite)
            w = cls(
                data_dir,
                fd,
                ops=ops,
                flush_filesystem=flush_filesystem,
                max_bytes=max_bytes,
                checkpoint_s=checkpoint_s,
                next_seq=nxt,
            )
            w._start_file()
        except BaseException:
            os.close(fd)
            raise
        return w

    def _start_file(self) -> None:
        path = self._dir / jr.journal_name(self._seq)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
        try:
            header = jr.file_header()
            write_all(self._ops, fd, header, 0)
            self._ops.fsync(fd)
            self._sync_dir()
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        old = self._fd
        if old >= 0:
            os.close(old)
            with self._mutex:
                self._older.append((self._dir / jr.journal_name(self._seq - 1), self._touched))
        self._fd = fd
        self._seq += 1
        self._size = len(header)
        self._opened_at = time.monotonic()
        self._touched = set()
        self.files_started += 1

    def _sync_dir(self) -> None:
        dfd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._ops.fsync(dfd)
        finally:
            os.close(dfd)

    # ------------------------------------------------------------ rounds (worker thread)
    def before_round(self) -> None:
        """Repair a broken journal (synchronously), or start a new file when this one is due
        (its checkpoint then runs in the background). Raises OSError: the round must fail."""
        if self.broken is not None:
            self._wait_checkpoint()
            self._start_file()  # the broken file joins the older ones
            self._flush_and_delete()
            self.broken = None
            log.info("WAL commit journal: repaired after a failure; commits go on")
            return
        ckpt = self._checkpoint
        if ckpt is not None and ckpt.done():
            self._checkpoint = None
            exc = ckpt.exception()
            if exc is not None:  # the older files stay; the next checkpoint tries again
                log.warning("WAL commit journal: a checkpoint failed (%s); retried at the next one", exc)
        if self._checkpoint is None and (
            self._size >= self._max_bytes or time.monotonic() - self._opened_at >= self._checkpoint_s
        ):
            self._start_file()
            self._checkpoint = self._pool.submit(self._flush_and_delete)

    def commit(self, jobs: Sequence[CommitJob]) -> float:
        """Append one record of ``jobs``' written frames and fdatasync the journal; returns the
        seconds it took. Raises on failure (the journal is broken until the next round)."""
        entries = [self._entry(job) for job in jobs]
        record = jr.encode_record(entries)
        t0 = time.perf_counter()
        try:
            write_all(self._ops, self._fd, record, self._size)
            self._size += len(record)
            self._ops.fsync(self._fd)
        except BaseException as exc:
            self.broken = exc
            raise
        return time.perf_counter() - t0

    def _entry(self, job: CommitJob) -> jr.Entry:
        seg = job.seg
        assert seg is not None
        key = self._keys.get(seg.path)
        if key is None or key[0] != seg.header.created_ms:
            if len(self._keys) >= _KEYS_MAX:
                self._keys.clear()
            rel = os.fsencode(os.path.relpath(seg.path, self.data_dir))
            if rel.startswith(b".."):
                raise ValueError(
                    f"segment {seg.path} is outside the journal's data directory {self.data_dir}"
                )
            key = (seg.header.created_ms, rel, encode_header(seg.first_offset, seg.header.created_ms))
            self._keys[seg.path] = key
        self._touched.add(seg.path)
        # seg.size is the durable end the frames were written at (moved only after the round).
        return jr.Entry(key[1], key[2], seg.size, job.data)

    # ------------------------------------------------------------ checkpoints
    def _flush_and_delete(self) -> None:
        """Flush every segment the older journal files cover, then delete those files."""
        with self._mutex:
            older = list(self._older)
        if not older:
            return
        if self._flush_fs is not None:
            dfd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                self._flush_fs(dfd)
            finally:
                os.close(dfd)
        else:
            for path in set().union(*(touched for _, touched in older)):
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # deleted since (retention): nothing to keep
                try:
                    self._ops.fsync(fd)
                finally:
                    os.close(fd)
        for path, _ in older:
            path.unlink(missing_ok=True)
        self._sync_dir()
        with self._mutex:
            del self._older[: len(older)]
        self.checkpoints += 1

    def _wait_checkpoint(self) -> None:
        ckpt, self._checkpoint = self._checkpoint, None
        if ckpt is not None:
            ckpt.exception()  # wait; a failure is retried by the caller's own flush

    def close(self) -> None:
        """Flush and delete everything (a clean stop leaves no journal), release the lock."""
        try:
            self._wait_checkpoint()
            if self.broken is None:
                self._start_file()
                self._flush_and_delete()
                # The new, empty file stays: a header only (replay finds nothing in it).
        except OSError as exc:
            log.warning(
                "WAL commit journal: the last checkpoint failed (%s); it is replayed at the next start", exc
            )
        finally:
            self._pool.shutdown(wait=True)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            os.close(self._lock_fd)
