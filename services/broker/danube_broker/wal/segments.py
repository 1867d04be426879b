"""Segment files as the engine sees them: the active (unsealed) segment it appends to, sealed
segments with their index, and the blocking file operations on them.

Everything here that touches the disk is synchronous and runs in the WAL's thread pool, never
on the event loop. The OS calls that can fail in interesting ways (write, fsync, truncate) and
the clock go through :class:`DiskOps`, so tests can inject ENOSPC/EIO and count fsyncs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from danube_common.errors import CorruptData
from danube_common.pb.DanubeApi_pb2 import StreamMessage
from danube_common.wal.codec import FRAME_HEADER_BYTES, Frame, StopReason, scan
from danube_common.wal.segment import (
    HEADER_BYTES,
    SegmentHeader,
    SegmentIndex,
    encode_header,
    encode_index,
    index_name,
    segment_name,
)

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 1024 * 1024


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class DiskOps:
    """The OS calls (and clock) the WAL uses; tests replace them to inject faults or count."""

    pwrite: Callable[[int, bytes | memoryview, int], int] = os.pwrite
    #: Used for segment data, the index files and the directory (Linux accepts directories).
    fsync: Callable[[int], None] = os.fdatasync
    ftruncate: Callable[[int, int], None] = os.ftruncate
    now_ms: Callable[[], int] = _now_ms


#: A lock file in every topic directory: one open TopicLog per directory, across processes.
LOCK_NAME = "wal.lock"


class DirectoryInUse(Exception):
    """Another open log (in this or another process) holds the directory's lock."""


def lock_directory(directory: Path) -> int:
    """Take the directory's exclusive lock (flock, released when the fd is closed or the
    process dies); returns the fd to close. Raises DirectoryInUse when it is held."""
    fd = os.open(directory / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirectoryInUse(str(directory)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(ops: DiskOps, fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        n = ops.pwrite(fd, view[done:], pos + done)
        if n <= 0:
            raise OSError(5, f"write returned {n}")
        done += n


def sync_dir(directory: Path, ops: DiskOps) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        ops.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: Path, ops: DiskOps, sync: bool) -> None:
    """``mkdir -p directory``; with ``sync``, each directory created is made durable in its
    parent (an fsync of the parent), so a power loss cannot lose the entry of a directory whose
    files were fsync'ed."""
    missing: list[Path] = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    directory.mkdir(parents=True, exist_ok=True)
    if sync:
        for created in reversed(missing):
            sync_dir(created.parent, ops)


def write_file_atomic(path: Path, data: bytes, ops: DiskOps, sync: bool) -> None:
    """Write ``path`` so that a crash leaves either the old file or the complete new one."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    try:
        write_all(ops, fd, data, 0)
        if sync:
            ops.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync:
        sync_dir(path.parent, ops)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


def producer_sequences_of(records: Iterable[bytes]) -> dict[str, int]:
    """Highest sequence id per producer name among stored records (decodes each StreamMessage:
    for recovery and index rebuilds only, never on the append path). Records that are not a
    StreamMessage are skipped."""
    seqs: dict[str, int] = {}
    decode = StreamMessage.FromString
    for record in records:
        try:
            msg = decode(record)
        except DecodeError:
            continue
        seq = msg.sequence_id
        if seq and seq > seqs.get(msg.producer_name, 0):
            seqs[msg.producer_name] = seq
    return seqs


def merge_sequences(into: dict[str, int], more: dict[str, int]) -> None:
    for name, seq in more.items():
        if seq > into.get(name, 0):
            into[name] = seq


# ---------------------------------------------------------------- sealed segments


@dataclass(slots=True)
class SealedSegment:
    path: Path
    index: SegmentIndex
    index_bytes: int  # size of the .idx file (0 when there is none)
    #: Set when the segment is damaged: reads at or after this offset raise CorruptData.
    damage_offset: int | None = None
    damage: str = ""

    @property
    def first_offset(self) -> int:
        return self.index.first_offset

    @property
    def next_offset(self) -> int:
        return self.index.next_offset

    @property
    def disk_bytes(self) -> int:
        return self.index.segment_bytes + self.index_bytes

    def corrupt_error(self, offset: int) -> CorruptData:
        return CorruptData(f"WAL segment {self.path} is damaged at offset {offset}: {self.damage}")


# ---------------------------------------------------------------- the active segment


@dataclass(slots=True)
class ActiveSegment:
    """The segment being appended to. ``size`` and ``index`` describe only durable frames and
    are changed on the event loop after a commit; ``dirty`` (bytes past ``size`` may be on disk
    after a failed write) is handled by the worker thread before the next write. ``fd`` is -1
    while the file is closed for being idle (:meth:`close_idle`): the next write opens it again
    (:meth:`writable_fd`)."""

    path: Path
    fd: int
    header: SegmentHeader
    size: int
    index: SegmentIndex
    dirty: bool = field(default=False)

    @property
    def first_offset(self) -> int:
        return self.header.first_offset

    @property
    def frames(self) -> int:
        return self.index.next_offset - self.index.first_offset

    def writable_fd(self) -> int:
        """The open fd, opened again if :meth:`close_idle` closed it (the writer: worker thread,
        or the loop for an inline write)."""
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        return self.fd

    def close_idle(self) -> bool:
        """Close the fd of a segment nothing is writing (event loop, the log out of any commit
        round). Everything written was already handed to the kernel (and fsync'ed, when the log
        syncs): closing loses nothing, and an fsync on the fd opened again covers the file.
        False if it was closed already."""
        if self.fd < 0:
            return False
        fd, self.fd = self.fd, -1
        os.close(fd)
        return True

    def repair(self, ops: DiskOps, sync: bool) -> None:
        """Cut off whatever a failed write left after the durable end (worker thread)."""
        if self.dirty:
            fd = self.writable_fd()
            ops.ftruncate(fd, self.size)
            if sync:
                ops.fsync(fd)
            self.dirty = False

    def write(self, data: bytes, ops: DiskOps, sync: bool) -> float:
        """Write ``data`` at the durable end, then fsync if ``sync`` (worker thread). Returns the
        fsync's seconds. On any failure the segment is marked dirty and the error propagates."""
        self.write_unsynced(data, ops, sync)
        return self.sync(ops) if sync else 0.0

    def write_unsynced(self, data: bytes, ops: DiskOps, sync: bool) -> None:
        """Repair (``sync``: the cut is fsync'ed), then write ``data`` at the durable end
        without fsync. On any failure the segment is marked dirty and the error propagates."""
        try:
            self.repair(ops, sync)
            write_all(ops, self.writable_fd(), data, self.size)
        except BaseException:
            self.dirty = True
            raise

    def sync(self, ops: DiskOps) -> float:
        """fdatasync the written frames (worker thread); returns its seconds. A failure marks
        the segment dirty (the kernel may have dropped the pages: they are cut and rewritten)."""
        try:
            t0 = time.perf_counter()
            ops.fsync(self.writable_fd())
            return time.perf_counter() - t0
        except BaseException:
            self.dirty = True
            raise

    def note_batch(self, pos: int, first: int, pts: Sequence[int], sizes: Sequence[int]) -> None:
        """Account a durable batch written at byte ``pos`` in the sparse index (event loop)."""
        idx = self.index
        every = idx.index_every_frames
        n = len(pts)
        rel0 = first - idx.first_offset
        hit = -(-rel0 // every) * every - rel0  # batch index of the first frame that starts a block
        blocks = idx.block_max_publish_ms
        if hit > 0 and blocks:
            m = max(pts[:hit])
            if m > blocks[-1]:
                blocks[-1] = m
        done = 0
        while hit < n:
            pos += FRAME_HEADER_BYTES * (hit - done) + sum(sizes[done:hit])
            done = hit
            idx.offsets.append(first + hit)
            idx.positions.append(pos)
            blocks.append(max(pts[hit : hit + every]))
            hit += every
        idx.next_offset = first + n
        batch_max = max(pts)
        if batch_max > idx.max_publish_time_ms:
            idx.max_publish_time_ms = batch_max


def create_segment(
    directory: Path, first_offset: int, *, every: int, ops: DiskOps, sync: bool
) -> ActiveSegment:
    """Start a new segment file holding only its header (durable before it is used)."""
    path = directory / segment_name(first_offset)
    created = ops.now_ms()
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    try:
        write_all(ops, fd, encode_header(first_offset, created), 0)
        if sync:
            ops.fsync(fd)
            sync_dir(directory, ops)
    except BaseException:
        os.close(fd)
        _unlink_quietly(path)
        raise
    index = SegmentIndex(first_offset, first_offset, HEADER_BYTES, 0, every)
    return ActiveSegment(path, fd, SegmentHeader(first_offset, created), HEADER_BYTES, index)


def roll(
    active: ActiveSegment, *, every: int, ops: DiskOps, sync: bool
) -> tuple[SealedSegment, ActiveSegment]:
    """Seal ``active`` (its index written atomically) and start the next segment (worker thread).

    Order, so that a crash at any step recovers: (1) cut any garbage after the durable end,
    (2) write the .idx (tmp + fsync + rename + dir fsync), (3) create the next segment with its
    header (fsync + dir fsync). A crash before (3) leaves ``active`` the last segment: recovery
    treats it as the tail and drops its .idx. On failure nothing changes (the .idx is removed).
    """
    active.repair(ops, sync)
    index = active.index
    index.segment_bytes = active.size
    data = encode_index(index)
    idx_path = active.path.with_name(index_name(active.first_offset))
    write_file_atomic(idx_path, data, ops, sync)
    try:
        nxt = create_segment(active.path.parent, index.next_offset, every=every, ops=ops, sync=sync)
    except BaseException:
        _unlink_quietly(idx_path)
        raise
    active.close_idle()
    return SealedSegment(active.path, index, len(data)), nxt


def remove_segments(segments: Sequence[SealedSegment]) -> int:
    """Delete segments (index first, so a crash leaves a segment to re-index, never an orphan
    index); returns the bytes freed (worker thread)."""
    freed = 0
    for seg in segments:
        for path in (seg.path.with_name(index_name(seg.first_offset)), seg.path):
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            freed += size
    return freed


# ---------------------------------------------------------------- reading


def start_position(index: SegmentIndex, offset: int) -> tuple[int, int]:
    """(byte position, offset) of the indexed frame at or before ``offset``."""
    i = bisect_right(index.offsets, offset) - 1
    if i < 0:
        return HEADER_BYTES, index.first_offset
    return index.positions[i], index.offsets[i]


def read_frames(
    path: Path,
    *,
    start_pos: int,
    start_offset: int,
    end_pos: int,
    from_offset: int,
    max_entries: int,
    max_bytes: int,
) -> list[Frame]:
    """Frames with offsets >= ``from_offset`` from the segment at ``path``, scanning from
    ``start_pos`` (where the frame ``start_offset`` starts) up to ``end_pos`` (worker thread).

    At most ``max_entries`` frames and ``max_bytes`` record bytes (at least one frame). Damage
    ends the read: the good frames before it are returned, or CorruptData (naming the file,
    byte and offset) when the damage is the first thing to read.
    """
    out: list[Frame] = []
    got = 0
    pos, want = start_pos, start_offset
    chunk = _READ_CHUNK_BYTES
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        while pos < end_pos and len(out) < max_entries and not (out and got >= max_bytes):
            size = min(chunk, end_pos - pos)
            data = os.pread(fd, size, pos)
            skip = max(0, from_offset - want)
            r = scan(data, expected_offset=want, base_position=pos, max_frames=skip + max_entries - len(out))
            for fr in r.frames:
                if fr.offset < from_offset:
                    continue
                n = len(fr.record)
                if out and got + n > max_bytes:
                    return out
                out.append(fr)
                got += n
            if r.frames:
                want = r.frames[-1].offset + 1
            if r.stop is StopReason.LIMIT:
                pos = r.end
                continue
            if r.stop is StopReason.END and len(data) == size:
                pos = r.end
                continue
            if r.stop is StopReason.TRUNCATED and len(data) == size and pos + size < end_pos:
                if r.end == pos:  # one frame bigger than the chunk
                    (length,) = struct.unpack_from("<I", data, 0)
                    chunk = max(chunk, 8 + length)
                pos = r.end
                continue
            if out:
                return out
            detail = r.detail or f"the file ends at byte {pos + len(data)}, expected {end_pos}"
            raise CorruptData(f"WAL segment {path} is damaged at offset {want} (byte {r.end}): {detail}")
    return out
