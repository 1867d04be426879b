"""Opening a topic's WAL directory: what survived, what to cut, where to continue.

Runs once per open, synchronously, in the WAL's thread pool.

1. Leftover ``*.tmp`` files (an index write that never finished) are removed, and so is an
   index whose segment is gone (retention crashed between the two unlinks).
2. Every segment but the last is **sealed**: its .idx is used when it is intact and matches
   the segment (same first offset, same file size, ends where the next segment starts);
   otherwise the segment is scanned and the .idx rewritten. A sealed segment whose scan stops
   early is **damaged**: it is kept, the damage is logged at ERROR, and reads reaching the
   damaged offset raise CorruptData. Its good frames stay readable; nothing is skipped silently.
3. The last segment is the **tail**: it is scanned from its header, and whatever follows the
   last good frame (a torn write, a bad checksum, a frame out of sequence) is truncated and
   logged at WARNING with the bytes dropped and why. A tail with a bad header is emptied and
   its header rewritten. The next offset is the one after the tail's last good frame.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from danube_broker.wal.cache import ENTRY_OVERHEAD_BYTES
from danube_broker.wal.config import WalConfig
from danube_broker.wal.segments import (
    ActiveSegment,
    DiskOps,
    SealedSegment,
    create_segment,
    lock_directory,
    make_dirs,
    merge_sequences,
    producer_sequences_of,
    write_all,
    write_file_atomic,
)
from danube_common.errors import CorruptData
from danube_common.wal.codec import Frame, StopReason, count_intact_after, scan
from danube_common.wal.segment import (
    HEADER_BYTES,
    SegmentHeader,
    SegmentIndex,
    build_index,
    decode_header,
    decode_index,
    encode_header,
    encode_index,
    index_name,
    parse_name,
    scan_segment_file,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovered:
    sealed: list[SealedSegment]
    active: ActiveSegment
    #: The newest frames of the tail segment, oldest first (to warm the tail cache).
    tail_frames: list[Frame]
    producer_sequences: dict[str, int]
    #: The directory lock's fd (close it after the active segment).
    lock_fd: int


def recover(directory: Path, *, cfg: WalConfig, ops: DiskOps, sync: bool, initial_offset: int) -> Recovered:
    """Lock the directory and recover it (raises DirectoryInUse while another log holds it)."""
    make_dirs(directory, ops, sync)
    lock_fd = lock_directory(directory)
    try:
        return _recover(
            directory, cfg=cfg, ops=ops, sync=sync, initial_offset=initial_offset, lock_fd=lock_fd
        )
    except BaseException:
        os.close(lock_fd)
        raise


def _recover(
    directory: Path, *, cfg: WalConfig, ops: DiskOps, sync: bool, initial_offset: int, lock_fd: int
) -> Recovered:
    wal: dict[int, Path] = {}
    idx: dict[int, Path] = {}
    for entry in directory.iterdir():
        if entry.name.endswith(".tmp"):
            log.info("removing unfinished file %s", entry)
            entry.unlink()
            continue
        parsed = parse_name(entry.name)
        if parsed is not None:
            (wal if parsed[1] == "wal" else idx)[parsed[0]] = entry
    for first in sorted(set(idx) - set(wal)):
        log.warning("removing index %s: its segment is gone", idx.pop(first))
        (directory / index_name(first)).unlink()

    if not wal:
        active = create_segment(directory, initial_offset, every=cfg.index_every_frames, ops=ops, sync=sync)
        return Recovered([], active, [], {}, lock_fd)

    firsts = sorted(wal)
    tail_first = firsts[-1]
    if tail_first in idx:
        # A crash after sealing but before the next segment existed: it is still the tail.
        idx.pop(tail_first).unlink()
    sealed = [
        _load_sealed(wal[first], idx.get(first), first, firsts[i + 1], cfg=cfg, ops=ops, sync=sync)
        for i, first in enumerate(firsts[:-1])
    ]
    active, tail_frames = _recover_tail(wal[tail_first], tail_first, cfg=cfg, ops=ops, sync=sync)
    seqs: dict[str, int] = {}
    for seg in sealed:
        merge_sequences(seqs, seg.index.producer_sequences)
    merge_sequences(seqs, active.index.producer_sequences)
    n = active.frames
    log.info(
        "opened WAL %s: %d sealed segment(s), offsets %d..%d",
        directory,
        len(sealed),
        sealed[0].first_offset if sealed else active.first_offset,
        active.first_offset + n,
    )
    return Recovered(sealed, active, tail_frames, seqs, lock_fd)


def _load_sealed(
    path: Path,
    idx_path: Path | None,
    first: int,
    expected_next: int,
    *,
    cfg: WalConfig,
    ops: DiskOps,
    sync: bool,
) -> SealedSegment:
    size = path.stat().st_size
    reason = "no index"
    if idx_path is not None:
        try:
            raw = idx_path.read_bytes()
            index = decode_index(raw, source=str(idx_path))
        except (OSError, CorruptData) as exc:
            reason = str(exc)
        else:
            if (
                index.first_offset == first
                and index.segment_bytes == size
                and index.next_offset == expected_next
            ):
                return SealedSegment(path, index, len(raw))
            reason = "the index does not describe the segment"

    # Rebuild the index by scanning the segment.
    try:
        scanned = scan_segment_file(path)
        if scanned.header.first_offset != first:
            raise CorruptData(f"{path}: header says offset {scanned.header.first_offset}")
    except CorruptData as exc:
        empty = SegmentIndex(first, expected_next, size, 0, cfg.index_every_frames)
        return _damaged(SealedSegment(path, empty, 0), first, str(exc))
    frames = scanned.result.frames
    index = build_index(
        first,
        frames,
        segment_bytes=size,
        index_every_frames=cfg.index_every_frames,
        producer_sequences=producer_sequences_of(f.record for f in frames),
    )
    end = index.next_offset
    if end > expected_next:
        raise CorruptData(
            f"WAL segment {path} holds offsets up to {end - 1}, the next segment starts at {expected_next}"
        )
    if scanned.result.stop is StopReason.END and end == expected_next:
        raw = encode_index(index)
        write_file_atomic(path.with_name(index_name(first)), raw, ops, sync)
        log.warning("rebuilt the index of WAL segment %s (%s)", path, reason)
        return SealedSegment(path, index, len(raw))
    index.next_offset = expected_next
    detail = (
        scanned.result.detail or f"the segment ends at offset {end}, the next one starts at {expected_next}"
    )
    return _damaged(SealedSegment(path, index, 0), end, f"{detail} (byte {scanned.result.end})")


def _damaged(seg: SealedSegment, offset: int, detail: str) -> SealedSegment:
    seg.damage_offset = offset
    seg.damage = detail
    log.error(
        "WAL segment %s is damaged at offset %d: %s; offsets %d..%d cannot be read (CORRUPT_DATA) "
        "and producer sequence ids there are unknown: restore the segment or delete the topic's data",
        seg.path,
        offset,
        detail,
        offset,
        seg.next_offset - 1,
    )
    return seg


def _recover_tail(
    path: Path, first: int, *, cfg: WalConfig, ops: DiskOps, sync: bool
) -> tuple[ActiveSegment, list[Frame]]:
    data = path.read_bytes()
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        try:
            header = decode_header(data, source=str(path))
            if header.first_offset != first:
                raise CorruptData(f"{path}: header says offset {header.first_offset}")
        except CorruptData as exc:
            log.warning("WAL tail %s: %s; dropping its %d bytes and starting it again", path, exc, len(data))
            header = SegmentHeader(first, ops.now_ms())
            ops.ftruncate(fd, 0)
            write_all(ops, fd, encode_header(first, header.created_ms), 0)
            if sync:
                ops.fsync(fd)
            frames = []
            size = HEADER_BYTES
        else:
            r = scan(data, HEADER_BYTES, expected_offset=first)
            frames = r.frames
            size = r.end
            if r.stop is not StopReason.END:
                intact = count_intact_after(data, r.end) if r.stop.is_damage else 0
                log.warning(
                    "WAL tail %s: %s at byte %d (offset %d); truncating %d bytes: the damaged frame%s",
                    path,
                    r.detail,
                    r.end,
                    first + len(frames),
                    len(data) - r.end,
                    f" and {intact} intact frame(s) after it" if intact else "",
                )
                ops.ftruncate(fd, r.end)
                if sync:
                    ops.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    index = build_index(
        first,
        frames,
        segment_bytes=size,
        index_every_frames=cfg.index_every_frames,
        producer_sequences=producer_sequences_of(f.record for f in frames),
    )
    active = ActiveSegment(path, fd, header, size, index)
    # Warm the tail cache with the newest frames that fit.
    budget = cfg.tail_cache_bytes
    k = len(frames)
    while k > 0 and budget >= len(frames[k - 1].record) + ENTRY_OVERHEAD_BYTES:
        k -= 1
        budget -= len(frames[k].record) + ENTRY_OVERHEAD_BYTES
    return active, frames[k:]
