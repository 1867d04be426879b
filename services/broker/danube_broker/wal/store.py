"""SegmentStore: the segment files of one topic (sealed ones and the active one) as seen from
the event loop. Every blocking call goes to the WAL's thread pool."""

from __future__ import annotations

import asyncio
import logging
import os
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from danube_broker.wal.config import WalConfig
from danube_broker.wal.errors import StorageFailed, storage_error
from danube_broker.wal.recovery import Recovered, recover
from danube_broker.wal.segments import (
    ActiveSegment,
    DirectoryInUse,
    DiskOps,
    SealedSegment,
    read_frames,
    remove_segments,
    roll,
    start_position,
)
from danube_common.wal.codec import Frame

log = logging.getLogger(__name__)

_LOCK_RETRY_S = 0.02

T = TypeVar("T")


async def recover_directory(
    directory: Path,
    *,
    cfg: WalConfig,
    ops: DiskOps,
    sync: bool,
    initial_offset: int,
    executor: ThreadPoolExecutor,
) -> Recovered:
    """Lock and recover ``directory`` in the thread pool, waiting up to ``cfg.lock_wait_s`` for
    another open log of it to close. Cancelling leaves nothing open or locked."""
    loop = asyncio.get_running_loop()
    job = partial(recover, directory, cfg=cfg, ops=ops, sync=sync, initial_offset=initial_offset)
    deadline = loop.time() + cfg.lock_wait_s
    while True:
        fut = loop.run_in_executor(executor, job)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_release_abandoned)
            raise
        except DirectoryInUse:
            # Another log still has it (e.g. the topic's previous owner here is closing).
            if loop.time() >= deadline:
                raise StorageFailed(
                    f"WAL {directory} is in use by another open log (waited {cfg.lock_wait_s} s)"
                ) from None
            await asyncio.sleep(_LOCK_RETRY_S)
        except OSError as exc:
            raise storage_error(exc, f"opening WAL {directory}") from exc


def _release_abandoned(fut: asyncio.Future[Recovered]) -> None:
    """Close what a recovery nobody waits for anymore opened."""
    if fut.cancelled() or fut.exception() is not None:
        return
    rec = fut.result()
    for fd in (rec.active.fd, rec.lock_fd):
        os.close(fd)


class SegmentStore:
    def __init__(
        self,
        directory: Path,
        sealed: list[SealedSegment],
        active: ActiveSegment,
        *,
        lock_fd: int,
        cfg: WalConfig,
        ops: DiskOps,
        sync: bool,
        executor: ThreadPoolExecutor,
    ) -> None:
        self.directory = directory
        self.sealed = sealed
        self.active = active
        self._lock_fd = lock_fd
        self._cfg = cfg
        self._ops = ops
        self._sync = sync
        self._executor = executor
        #: st_dev of the directory (its file system), learned by the first :meth:`device_blocking`.
        self._device: int | None = None

    async def in_thread(self, job: partial[T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    @property
    def first_offset(self) -> int:
        return self.sealed[0].first_offset if self.sealed else self.active.first_offset

    @property
    def bytes_on_disk(self) -> int:
        return sum(s.disk_bytes for s in self.sealed) + self.active.size

    @property
    def segment_count(self) -> int:
        return len(self.sealed) + 1

    # ------------------------------------------------------------ writing (the writer task only)

    def roll_due(self, incoming: int) -> bool:
        """Roll before a commit of ``incoming`` bytes? (size or age; never an empty segment)."""
        seg = self.active
        if seg.frames == 0:
            return False
        if seg.size + incoming > self._cfg.segment_max_bytes:
            return True
        return self._ops.now_ms() - seg.header.created_ms >= self._cfg.segment_max_age_s * 1000

    def write_blocking(self, seg: ActiveSegment, data: bytes) -> None:
        """Write ``data`` at ``seg``'s durable end, without fsync (worker thread, or the event
        loop for a small write with durability none). Marks ``seg`` dirty on failure."""
        seg.write_unsynced(data, self._ops, self._sync)

    def sync_blocking(self, seg: ActiveSegment) -> float:
        """fdatasync ``seg`` (worker thread); returns its seconds. Marks it dirty on failure."""
        return seg.sync(self._ops)

    def device_blocking(self) -> int:
        """The file system (st_dev) the segments are on (worker thread; one stat, then cached)."""
        if self._device is None:
            self._device = os.stat(self.directory).st_dev
        return self._device

    @property
    def device(self) -> int | None:
        """The file system (st_dev) of the segments, once :meth:`device_blocking` learnt it."""
        return self._device

    def cheap_write_ok(self) -> bool:
        """Is the next write of the active segment a plain page-cache write (its fd open, no
        cut to repair first)? Then the commit group may issue it on the event loop."""
        seg = self.active
        return seg.fd >= 0 and not seg.dirty

    def inline_write_ok(self, nbytes: int) -> bool:
        """May a commit of ``nbytes`` be written on the event loop? (durability none, opted in)"""
        return not self._sync and nbytes <= self._cfg.inline_write_max_bytes

    def roll_blocking(self) -> tuple[SealedSegment, ActiveSegment]:
        """Seal the active segment and create the next one (worker thread; raises OSError and
        changes nothing). The caller then hands the result to :meth:`adopt` on the loop."""
        return roll(self.active, every=self._cfg.index_every_frames, ops=self._ops, sync=self._sync)

    def adopt(self, sealed: SealedSegment, nxt: ActiveSegment) -> None:
        """Account a roll done by :meth:`roll_blocking` (event loop)."""
        self.sealed.append(sealed)
        self.active = nxt
        log.debug(
            "WAL %s: sealed %s, next segment starts at %d", self.directory, sealed.path.name, nxt.first_offset
        )

    def close(self) -> None:
        """Close the active segment, then release the directory lock."""
        for fd in (self.active.fd, self._lock_fd):
            if fd < 0:  # the active segment, closed while idle
                continue
            try:
                os.close(fd)
            except OSError as exc:
                log.warning("WAL %s: closing a file failed: %s", self.directory, exc)

    # ------------------------------------------------------------ reading

    def _locate(self, offset: int) -> SealedSegment | ActiveSegment:
        if offset >= self.active.first_offset:
            return self.active
        i = bisect_right(self.sealed, offset, key=lambda s: s.first_offset) - 1
        return self.sealed[max(i, 0)]

    async def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Frame] | None:
        """Durable frames from ``offset`` (>= first_offset, < durable offset) out of the one
        segment holding it. None when that segment was deleted meanwhile (retention)."""
        seg = self._locate(offset)
        if isinstance(seg, SealedSegment):
            if seg.damage_offset is not None and offset >= seg.damage_offset:
                raise seg.corrupt_error(offset)
            end_pos = seg.index.segment_bytes
        else:
            end_pos = seg.size
        start_pos, start_offset = start_position(seg.index, offset)
        job = partial(
            read_frames,
            seg.path,
            start_pos=start_pos,
            start_offset=start_offset,
            end_pos=end_pos,
            from_offset=offset,
            max_entries=max_entries,
            max_bytes=max(max_bytes, 1),
        )
        try:
            return await self.in_thread(job)
        except FileNotFoundError:
            if offset < self.first_offset:
                return None
            raise StorageFailed(f"WAL {self.directory}: segment {seg.path.name} is missing") from None
        except OSError as exc:
            raise storage_error(exc, f"WAL {self.directory}: reading {seg.path.name}") from exc

    async def offset_for_time(self, publish_time_ms: int) -> int | None:
        """The first stored offset whose publish time is >= ``publish_time_ms``, or None.

        Each segment's index keeps the max publish time of every block of index_every_frames
        frames; only the first block that can hold the answer is read."""
        segments: list[SealedSegment | ActiveSegment] = [*self.sealed, self.active]
        for seg in segments:
            idx = seg.index
            if idx.next_offset == idx.first_offset or idx.max_publish_time_ms < publish_time_ms:
                continue
            end_pos = idx.segment_bytes if isinstance(seg, SealedSegment) else seg.size
            for i, block_max in enumerate(idx.block_max_publish_ms):
                if block_max < publish_time_ms:
                    continue
                job = partial(
                    read_frames,
                    seg.path,
                    start_pos=idx.positions[i],
                    start_offset=idx.offsets[i],
                    end_pos=end_pos,
                    from_offset=idx.offsets[i],
                    max_entries=idx.index_every_frames,
                    max_bytes=1 << 62,
                )
                try:
                    frames = await self.in_thread(job)
                except FileNotFoundError:
                    break  # deleted by retention meanwhile: the answer is in a later segment
                except OSError as exc:
                    raise storage_error(exc, f"WAL {self.directory}: reading {seg.path.name}") from exc
                for f in frames:
                    if f.publish_time_ms >= publish_time_ms:
                        return f.offset
        return None

    # ------------------------------------------------------------ retention

    def detach_before(self, offset: int) -> list[SealedSegment]:
        """Take the sealed segments whose every offset is below ``offset`` out of the store
        (readers stop choosing them at once); delete them with :meth:`delete`."""
        victims: list[SealedSegment] = []
        while self.sealed and self.sealed[0].next_offset <= offset:
            victims.append(self.sealed.pop(0))
        return victims

    async def delete(self, victims: list[SealedSegment]) -> int:
        try:
            return await self.in_thread(partial(remove_segments, victims))
        except OSError as exc:
            raise storage_error(exc, f"WAL {self.directory}: deleting segments") from exc
