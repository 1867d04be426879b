"""CommitGroup: the broker-wide commit scheduler of the WAL (one per broker process).

A round takes the queued batches of every log with pending appends (each log's own group
commit, capped per log and per round), then makes them durable with ONE hop to the thread
pool: every log's frames are written first, then the fdatasyncs run spread over a few threads
(ext4 merges concurrent ones into one journal commit: bench/wal_multi_fsync.py). Back on the
event loop each log completes its own batches. A failing write or fsync fails only that log's
batches (and its queue), never the other logs of the round.

A log without a group gets a private one (one log per round: the old per-log writer).
Rounds never overlap; work arriving during a round goes into the next one, which starts as
soon as the round ends (no linger). Logs are served round-robin: a log still holding work after
its turn goes to the back of the line, so a backlog cannot starve the others.

Idle files (``idle_close_s`` > 0): the group remembers when each log was last served (in order
of use, so finding the idle ones never walks the busy ones) and closes the active segment's fd
of a log idle that long, between rounds, on the event loop: no write or fsync of that log is in
flight then, and everything it wrote is already with the kernel (fsync'ed, if it syncs). Its
next round opens the file again in the worker thread. So 10,000 idle topics hold one fd each
(the WAL directory's lock) instead of two. The check runs when the group would otherwise sleep,
and after a round at most every ``idle_close_s / 8``; with no open file left there is no timer.
``max_open_files`` (> 0) also bounds how many active segment files stay open at once: beyond it
the least recently used log's file is closed at once, whatever its age (topics opened in a burst,
faster than ``idle_close_s``, would otherwise hold two fds each until then).

Flushing a round (``commit_sync``): ``files`` runs one fdatasync per log, spread over
``fsync_threads`` threads; ``filesystem`` runs ONE ``syncfs`` per file system the round wrote
to (:mod:`~danube_broker.wal.syncfs`: only where the kernel reports write-back errors to it,
and on local disk file systems: logs on any other are flushed per file), except for a file
system with one syncing log in the round: one fdatasync is cheaper there
(bench/wal_multi_fsync.py: 0.18 vs 0.27 ms; from 2 files on syncfs is faster, 8.6x the
fdatasyncs' rate at 64 files).
The fd it is called on is opened before the round's first write to that file system and kept
for the group's life, so a write-back error of any page the round wrote is reported to this
round; it fails every syncing log of that file system in the round (each one's segment is cut
back to its durable end before its next write, as after a failed fdatasync). An error a
one-log round's fdatasync reported is reported again to the next syncfs (the file system keeps
it too): that round fails as well, which costs its producers a re-send and loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from danube_broker.wal.cache import CacheBudget
from danube_broker.wal.segments import ActiveSegment, SealedSegment
from danube_broker.wal.syncfs import CommitSync, resolve, trusted_filesystem
from danube_broker.wal.syncfs import syncfs as _real_syncfs

if TYPE_CHECKING:
    from danube_broker.wal.journal import JournalWriter
    from danube_broker.wal.log import TopicLog, _Batch
    from danube_broker.wal.store import SegmentStore

log = logging.getLogger(__name__)

#: Default cap of one round's frame bytes over all logs (each log: max_batch_bytes_per_commit).
DEFAULT_MAX_ROUND_BYTES = 32 * 1024 * 1024
#: Default number of threads the fdatasyncs of a round are spread over.
DEFAULT_FSYNC_THREADS = 16


class RoundObserver(Protocol):
    """Told once per round (the broker's metrics), on the event loop."""

    def round_committed(self, logs: int, nbytes: int, seconds: float) -> None:
        """A round served ``logs`` logs, wrote ``nbytes`` frame bytes and took ``seconds``."""

    def idle_file_closed(self) -> None:
        """An idle log's active segment file was closed (reopened by its next write)."""


@dataclass(slots=True, eq=False)
class CommitJob:
    """One log's share of a round: either its batches (one write + one fsync) or a roll asked
    for by ``TopicLog.roll()``. Prepared and finished on the loop, run in the worker thread."""

    log: TopicLog
    store: SegmentStore
    batches: list[_Batch]
    data: bytes
    sync: bool
    #: Seal the active segment before writing (size/age), or this job is an explicit roll.
    roll_first: bool
    roll_requests: list[asyncio.Future[bool]] = field(default_factory=list)
    # results (set by run_write / run_sync)
    rolled: tuple[SealedSegment, ActiveSegment] | None = None
    seg: ActiveSegment | None = None
    written: bool = False
    fsync_s: float = 0.0
    error: OSError | None = None
    #: An unexpected exception (a bug): the log is broken, the other logs go on.
    bug: BaseException | None = None

    @property
    def is_roll(self) -> bool:
        return not self.batches

    def run_write(self) -> None:
        """Roll if due, write the frames (no fsync). Never raises: the outcome is recorded."""
        try:
            if self.roll_first:
                self.rolled = self.store.roll_blocking()
            if self.is_roll:
                return
            seg = self.rolled[1] if self.rolled is not None else self.store.active
            self.seg = seg
            self.store.write_blocking(seg, self.data)
            self.written = True
        except OSError as exc:
            self.error = exc
        except Exception as exc:
            self.bug = exc

    def run_sync(self) -> None:
        """fdatasync what :meth:`run_write` wrote (a no-op when nothing needs it)."""
        if not (self.written and self.sync) or self.seg is None:
            return
        try:
            self.fsync_s = self.store.sync_blocking(self.seg)
        except OSError as exc:
            self.error = exc
        except Exception as exc:
            self.bug = exc

    def flush_failed(self, exc: Exception) -> None:
        """The round's flush of this job's file system failed: the frames are not durable."""
        if isinstance(exc, OSError):
            self.error = exc
        else:
            self.bug = exc
        if self.seg is not None:
            self.seg.dirty = True  # the kernel may have dropped the pages: cut and rewrite


def _sync_all(jobs: list[CommitJob]) -> None:
    for job in jobs:
        job.run_sync()


class CommitGroup:
    """Use one per broker: pass it to every ``TopicLog.open(group=...)``; ``aclose()`` it after
    the logs. ``executor`` is the WAL's pool (one hop per round); ``fsync_threads`` (>= 1) the
    threads a round's fdatasyncs are spread over (its own small pool); ``idle_close_s`` (0:
    never) how long a log goes unserved before its active segment's fd is closed;
    ``max_open_files`` (0: no bound) how many active segment files may be open at once (needs
    ``idle_close_s`` > 0); ``commit_sync`` how a round is flushed (resolved by
    :func:`~danube_broker.wal.syncfs.resolve`); ``syncfs`` replaces the system call in tests
    (its mode is then used as given, without the platform check), ``trusted`` the check of a
    file system's type."""

    def __init__(
        self,
        executor: ThreadPoolExecutor | None = None,
        *,
        max_round_bytes: int = DEFAULT_MAX_ROUND_BYTES,
        fsync_threads: int = DEFAULT_FSYNC_THREADS,
        observer: RoundObserver | None = None,
        on_failure: Callable[[str, BaseException], None] | None = None,
        name: str = "wal-commit-group",
        idle_close_s: float = 0.0,
        max_open_files: int = 0,
        commit_sync: CommitSync = CommitSync.FILES,
        syncfs: Callable[[int], None] = _real_syncfs,
        trusted: Callable[[int], bool] = trusted_filesystem,
        loop_write_bytes: int = 0,
        cache_budget_bytes: int = 0,
        journal: JournalWriter | None = None,
    ) -> None:
        from danube_broker.wal.log import default_executor

        if (
            max_round_bytes <= 0
            or fsync_threads <= 0
            or idle_close_s < 0
            or max_open_files < 0
            or loop_write_bytes < 0
            or cache_budget_bytes < 0
        ):
            raise ValueError(
                "max_round_bytes and fsync_threads must be positive, idle_close_s, max_open_files, "
                "loop_write_bytes and cache_budget_bytes >= 0"
            )
        self._loop_write_bytes = loop_write_bytes
        #: The cap on the tail caches of all the group's logs together (None: each its own cap).
        self.cache_budget = CacheBudget(cache_budget_bytes) if cache_budget_bytes > 0 else None
        self._executor = executor or default_executor()
        self._max_round_bytes = max_round_bytes
        self._fsync_threads = fsync_threads
        self._fsync_pool: ThreadPoolExecutor | None = None
        #: The mode in use (``files`` or ``filesystem``; an injected ``syncfs`` is taken as is).
        self.commit_sync = resolve(commit_sync) if syncfs is _real_syncfs else CommitSync(commit_sync)
        if (self.commit_sync is CommitSync.JOURNAL) != (journal is not None):
            raise ValueError("commit_sync journal needs a JournalWriter, and only it takes one")
        self._journal = journal
        self._syncfs = syncfs
        self._trusted = trusted
        #: filesystem mode: st_dev -> an fd on that file system, open for the group's life
        #: (-1: a file system syncfs is not trusted on; its logs are flushed per file).
        self._fs_fds: dict[int, int] = {}
        self._observer = observer
        self._on_failure = on_failure
        self._name = name
        self._ready: deque[TopicLog] = deque()
        self._queued: set[TopicLog] = set()  # in _ready
        self._in_round: set[TopicLog] = set()
        self._wake = asyncio.Event()
        self._closing = False
        self._crashed: BaseException | None = None
        self.rounds = 0
        self._idle_close_s = idle_close_s
        self._max_open_files = max_open_files
        #: Logs whose active segment may be open, by when they were last served (oldest first).
        self._last_use: OrderedDict[TopicLog, float] = OrderedDict()
        self._next_idle_check = 0.0
        #: Active segment files closed for being idle (each is opened again by its next write).
        self.idle_closed = 0
        #: The loop of the first use (asyncio.get_running_loop() is a getpid() system call per
        #: call on CPython 3.11; the group lives on one loop).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task = asyncio.create_task(self._run(), name=name)

    @property
    def closed(self) -> bool:
        """True once ``aclose`` was called or the scheduler crashed: logs refuse appends."""
        return self._closing or self._crashed is not None

    def notify(self, lg: TopicLog) -> None:
        """``lg`` has work (a batch, a roll request, or it is closing): serve it in a round."""
        if lg in self._queued or lg in self._in_round:
            return  # already in line; a log in the current round is looked at again after it
        self._queued.add(lg)
        self._ready.append(lg)
        self._wake.set()

    def used(self, lg: TopicLog) -> None:
        """``lg`` was opened or served now: its file is open, and idle from now on."""
        if self._idle_close_s <= 0:
            return
        last_use = self._last_use
        if not last_use:
            self._wake.set()  # the loop may sleep with no timer: have it set one
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        last_use[lg] = loop.time()
        last_use.move_to_end(lg)
        while 0 < self._max_open_files < len(last_use):
            oldest = next(iter(last_use))
            del last_use[oldest]
            if oldest not in self._queued and oldest not in self._in_round and oldest.close_idle_file():
                self._idle_file_closed()

    def forget(self, lg: TopicLog) -> None:
        """``lg`` is closed."""
        self._last_use.pop(lg, None)

    def _close_idle(self, now: float) -> float | None:
        """Close the files of the logs unserved for ``idle_close_s``; return how long until the
        next one is due (None: no file left open)."""
        last_use = self._last_use
        cutoff = now - self._idle_close_s
        while last_use:
            lg, at = next(iter(last_use.items()))
            if at > cutoff:
                self._next_idle_check = now + self._idle_close_s / 8
                return max(at - cutoff, self._idle_close_s / 8)
            del last_use[lg]
            if lg in self._queued or lg in self._in_round:
                continue  # served again soon: used() puts it back
            if lg.close_idle_file():
                self._idle_file_closed()
        return None

    def _idle_file_closed(self) -> None:
        self.idle_closed += 1
        if self._observer is not None:
            self._observer.idle_file_closed()

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        jobs: list[CommitJob] = []
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._ready:
                    if self._closing:
                        return
                    self._wake.clear()
                    due = self._close_idle(loop.time()) if self._last_use else None
                    if due is None:
                        await self._wake.wait()
                    else:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(due):
                                await self._wake.wait()
                    continue
                if self._last_use and loop.time() >= self._next_idle_check:
                    self._close_idle(loop.time())
                jobs = self._take_round()
                if jobs:
                    await self._run_round(jobs)
                jobs = []
        except Exception as exc:
            log.exception(
                "%s: the WAL commit scheduler crashed; its logs refuse appends from now on", self._name
            )
            self._crashed = exc
            for lg in {*(j.log for j in jobs), *self._ready, *self._in_round}:
                lg.crashed(exc, [b for j in jobs if j.log is lg for b in j.batches])
            self._ready.clear()
            self._queued.clear()
            self._in_round.clear()
            if self._on_failure is not None:
                self._on_failure(self._name, exc)

    def _take_round(self) -> list[CommitJob]:
        """Round-robin over the logs in line, until the round's byte cap (the first log always
        gets a turn; a log whose next batch does not fit any more waits at the front)."""
        jobs: list[CommitJob] = []
        budget = self._max_round_bytes
        ready = self._ready
        while ready:
            lg = ready[0]
            if jobs and lg.next_commit_bytes() > budget:
                break
            ready.popleft()
            self._queued.discard(lg)
            job = lg.prepare_commit(budget if jobs else None)
            if job is None:
                lg.round_done()  # nothing to do (e.g. closing with an empty queue)
                continue
            self._in_round.add(lg)
            jobs.append(job)
            budget -= len(job.data)
            if budget <= 0:
                break
        return jobs

    async def _run_round(self, jobs: list[CommitJob]) -> None:
        t0 = time.perf_counter()
        t0_ns = time.time_ns()
        hop: list[CommitJob] = []
        budget = self._loop_write_bytes
        for job in jobs:
            if not job.roll_first and job.store.inline_write_ok(len(job.data)):
                job.run_write()  # durability none, small, opted in (inline_write_max_bytes): on the loop
                continue
            if job.sync and len(job.data) <= budget and self._loop_write_ok(job):
                # A page-cache write on the loop: microseconds, where the same write in the
                # worker thread waits for the GIL after its system call (up to the switch
                # interval while the loop runs Python) -- per log, so a round of many logs grew
                # with their number. The flush (the durability) stays in the thread, after it.
                budget -= len(job.data)
                job.run_write()
                if not job.written:
                    continue  # failed: recorded on the job, nothing to flush
            hop.append(job)
        if hop:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._blocking_round, hop)
        end_ns = time.time_ns()
        seconds = time.perf_counter() - t0
        nbytes = 0
        for job in jobs:
            self._in_round.discard(job.log)
            self.used(job.log)
            nbytes += len(job.data)
            try:
                job.log.finish_commit(job, t0_ns, end_ns, seconds, len(jobs))
            except Exception as exc:  # a bug in one log's bookkeeping breaks that log only
                job.log.crashed(exc, job.batches)
            if job.log.has_work():
                self.notify(job.log)  # to the back of the line: fairness
            job.log.round_done()
        self.rounds += 1
        if self._observer is not None:
            try:
                self._observer.round_committed(len(jobs), nbytes, seconds)
            except Exception:
                log.exception("%s: the round observer failed", self._name)

    def _loop_write_ok(self, job: CommitJob) -> bool:
        """May a syncing ``job``'s frames be written on the loop? Only a plain write of batches to an open,
        clean segment (no roll, reopen or repair: those take more system calls, a repair an
        fsync), and in filesystem mode only on a file system whose syncfs fd is open already
        (it must predate the write, see :meth:`_filesystem_round`)."""
        if job.roll_first or not job.batches or not job.store.cheap_write_ok():
            return False
        if self.commit_sync is CommitSync.FILESYSTEM:
            dev = job.store.device
            return dev is not None and dev in self._fs_fds
        return True  # files, journal: nothing to set up first

    def _blocking_round(self, jobs: list[CommitJob]) -> None:
        """Worker thread: every write not done on the loop first, then the flush (fdatasyncs
        spread over threads, or one syncfs per file system)."""
        if self.commit_sync is CommitSync.FILESYSTEM:
            self._filesystem_round(jobs)
            return
        if self._journal is not None:
            self._journal_round(self._journal, jobs)
            return
        for job in jobs:
            if not job.written:
                job.run_write()
        self._sync_spread([j for j in jobs if j.written and j.sync])

    def _sync_spread(self, syncing: list[CommitJob]) -> None:
        """fdatasync every job's file, spread over ``fsync_threads`` threads (worker thread)."""
        k = min(self._fsync_threads, len(syncing))
        if k <= 1:
            _sync_all(syncing)
            return
        if self._fsync_pool is None:
            self._fsync_pool = ThreadPoolExecutor(
                self._fsync_threads - 1, thread_name_prefix="danube-wal-sync"
            )
        chunks = [syncing[i::k] for i in range(k)]
        others: list[Future[None]] = [self._fsync_pool.submit(_sync_all, c) for c in chunks[1:]]
        _sync_all(chunks[0])
        for f in others:
            f.result()  # _sync_all never raises: outcomes are on the jobs

    def _filesystem_round(self, jobs: list[CommitJob]) -> None:
        """Worker thread: note each syncing job's file system (opening the group's fd on one
        seen for the first time BEFORE writing, so no write-back error of this round can
        predate it), write everything, then one syncfs per file system (per-file fdatasyncs on
        one syncfs is not trusted on)."""
        by_fs: dict[int, list[CommitJob]] = {}
        for job in jobs:
            if not (job.sync and job.batches):
                continue
            try:
                dev = job.store.device_blocking()
                if dev not in self._fs_fds:
                    self._fs_fds[dev] = (
                        os.open(job.store.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                        if self._trusted(dev)
                        else -1
                    )
            except OSError as exc:
                job.error = exc  # its frames are not written: the log fails this commit
                continue
            by_fs.setdefault(dev, []).append(job)
        for job in jobs:
            if job.error is None and not job.written:
                job.run_write()
        for dev, members in by_fs.items():
            written = [j for j in members if j.written]
            if len(written) <= 1 or self._fs_fds[dev] < 0:
                self._sync_spread(written)  # one file (an fdatasync is cheaper), or syncfs not trusted
                continue
            t0 = time.perf_counter()
            try:
                self._syncfs(self._fs_fds[dev])
            except Exception as exc:
                for job in written:
                    job.flush_failed(exc)
                continue
            seconds = time.perf_counter() - t0
            for job in written:
                job.fsync_s = seconds

    def _journal_round(self, journal: JournalWriter, jobs: list[CommitJob]) -> None:
        """Worker thread: the journal's checkpoint bookkeeping, every write not done on the
        loop, then one journal record for every syncing job, made durable by one fdatasync. A
        journal that cannot be repaired fails the round's batches (none is written after it:
        see :meth:`JournalWriter.before_round`); rolls go on (they flush their own files)."""
        try:
            journal.before_round()
        except Exception as exc:
            for job in jobs:
                if not job.batches:
                    job.run_write()
                elif job.written:
                    job.flush_failed(exc)
                elif isinstance(exc, OSError):
                    job.error = exc
                else:
                    job.bug = exc
            return
        for job in jobs:
            if job.error is None and not job.written:
                job.run_write()
        syncing = [j for j in jobs if j.written and j.sync]
        if not syncing:
            return
        try:
            seconds = journal.commit(syncing)
        except Exception as exc:
            for job in syncing:
                job.flush_failed(exc)
            return
        for job in syncing:
            job.fsync_s = seconds

    async def aclose(self) -> None:
        """Serve what is in line, then stop (idempotent). Close the logs first."""
        self._closing = True
        self._wake.set()
        await asyncio.shield(self._task)
        journal, self._journal = self._journal, None
        if journal is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, journal.close)
        if self._fsync_pool is not None:
            self._fsync_pool.shutdown(wait=True)
            self._fsync_pool = None
        for fd in self._fs_fds.values():
            if fd >= 0:
                os.close(fd)
        self._fs_fds.clear()
