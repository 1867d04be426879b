"""The broker's data directory as the uploader sees it. Everything here blocks: run it in a thread.

- :func:`discover_topics`: every ``<data_dir>/<ns>/<topic>`` directory whose names parse as a
  topic (``*.superseded-<offset>`` directories, set aside by the broker, are ignored).
- :class:`TopicDir`: one topic directory: its segments (:meth:`TopicDir.list`, with sealed
  indexes cached and the open segment followed incrementally), and :meth:`TopicDir.build` which
  turns ``[start, end)`` of one segment into the bytes of an object: a segment header whose first
  offset is ``start`` then the frames copied byte for byte, each checked (crc32c, consecutive
  offsets) before anything is uploaded.
- :meth:`TopicDir.incarnation`: the directory's incarnation marker (``danube_common.wal.marker``);
  :meth:`TopicDir.intact_end`: where the log really ends (every frame's crc checked) and the
  highest sequence id per producer in it (used to record a dead broker's log end).

The broker's directory lock is not taken: what the uploader reads after its broker's lease
expired holds every frame the broker acknowledged (the broker acknowledges only before its
lease's deadline, see ``KeptLease``), and frames the broker may still write afterwards were never
acknowledged and lie past the end the uploader records.

The segment format is ``danube_common.wal`` (the uploader never imports the broker).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c
from google.protobuf.message import DecodeError

from danube_common.errors import CorruptData, InvalidTopicName
from danube_common.observability.messages import TRACEPARENT, is_sampled
from danube_common.pb.DanubeApi_pb2 import StreamMessage
from danube_common.topic_name import TopicName
from danube_common.wal.codec import FRAME_HEADER_BYTES, Frame, StopReason, scan
from danube_common.wal.marker import read_incarnation
from danube_common.wal.segment import (
    HEADER_BYTES,
    SegmentIndex,
    decode_header,
    decode_index,
    encode_header,
    index_name,
    parse_name,
    segment_name,
)
from danube_wal_uploader.next_step import LocalSegment

log = logging.getLogger(__name__)

#: A topic directory the broker set aside (an older stay of the topic on this broker).
_SUPERSEDED = re.compile(r"\.superseded-\d+$")
#: Frames checked per scan call (bounds the memory a scan's frame list takes).
_SCAN_FRAMES = 4096
#: Bytes read per step while following the open segment.
_FOLLOW_CHUNK_BYTES = 4 * 1024 * 1024
_LEN_OFFSET = struct.Struct("<I4xQ")


def discover_topics(data_dir: Path) -> dict[TopicName, Path]:
    """Topic directories under ``data_dir`` (missing directory: none)."""
    found: dict[TopicName, Path] = {}
    try:
        namespaces = [e for e in os.scandir(data_dir) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return found
    for ns in namespaces:
        try:
            entries = [e for e in os.scandir(ns.path) if e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if _SUPERSEDED.search(entry.name):
                continue
            try:
                name = TopicName.parse(f"/{ns.name}/{entry.name}")
            except InvalidTopicName:
                continue
            found[name] = Path(entry.path)
    return found


@dataclass(frozen=True, slots=True)
class Built:
    """An object ready to upload: ``data`` holds offsets ``[start, end)`` (empty when end == start)."""

    start: int
    end: int
    data: bytes
    crc32c: int
    max_publish_time_ms: int
    #: Byte position in the source segment where frame ``end`` starts (or would start).
    end_position: int
    #: False when the segment ends before ``start`` (nothing read).
    reached: bool = True
    #: Highest sequence id per producer name among the object's records.
    producer_sequences: dict[str, int] = field(default_factory=dict)
    #: The sampled trace contexts of its messages (collected only when asked: tracing on).
    traces: MessageTraces | None = None


@dataclass(slots=True)
class MessageTraces:
    """The trace contexts of the sampled messages among an object's records: the first
    ``limit`` kept as ``(offset, traceparent)`` (an upload span links to them), all counted."""

    limit: int
    kept: list[tuple[int, str]] = field(default_factory=list)
    #: Sampled messages seen (kept or not).
    sampled: int = 0

    def note(self, offset: int, message: StreamMessage) -> None:
        attrs = message.attributes
        if not is_sampled(attrs):
            return
        self.sampled += 1
        if len(self.kept) < self.limit:
            self.kept.append((offset, attrs[TRACEPARENT]))


@dataclass(slots=True)
class _Sealed:
    stat_key: tuple[int, int, int]
    index: SegmentIndex | None


@dataclass(slots=True)
class TopicDir:
    """One topic directory, with what was learnt about its files (not thread-safe: one
    operation at a time per topic)."""

    path: Path
    _sealed: dict[int, _Sealed] = field(default_factory=dict)
    #: Known ``(offset, byte position)`` of frames per segment: where reads can start.
    _points: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: The open segment as followed so far: ``first_offset -> (next_offset, position)``.
    _follow: dict[int, tuple[int, int]] = field(default_factory=dict)

    # ------------------------------------------------------------------ listing

    def list(self, *, follow_open: bool = True) -> list[LocalSegment]:
        """The segments on disk, oldest first. A segment is sealed when its ``.idx`` describes it
        or a later segment exists; the last one without an index is open (followed, with
        ``follow_open``, to its last complete frame: a progress estimate only)."""
        wal: dict[int, int] = {}
        idx: set[int] = set()
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return []
        for entry in entries:
            parsed = parse_name(entry.name)
            if parsed is None:
                continue
            if parsed[1] == "wal":
                try:
                    wal[parsed[0]] = entry.stat().st_size
                except FileNotFoundError:
                    continue
            else:
                idx.add(parsed[0])
        firsts = sorted(wal)
        out: list[LocalSegment] = []
        for i, first in enumerate(firsts):
            later = firsts[i + 1] if i + 1 < len(firsts) else None
            index = self._index(first, wal[first]) if first in idx else None
            if index is not None:
                out.append(LocalSegment(first, index.next_offset, True, wal[first]))
            elif later is not None:
                # Rolled before the index could be (re)written: it ends where the next one starts;
                # the read checks every frame of it.
                out.append(LocalSegment(first, later, True, wal[first]))
            else:
                nxt = self._follow_open(first, wal[first]) if follow_open else None
                out.append(LocalSegment(first, nxt, False, wal[first]))
        live = set(firsts)
        for cache in (self._sealed, self._points, self._follow):
            for gone in [k for k in cache if k not in live]:
                del cache[gone]
        return out

    def _index(self, first: int, wal_size: int) -> SegmentIndex | None:
        path = self.path / index_name(first)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._sealed.get(first)
        if cached is None or cached.stat_key != key:
            try:
                index: SegmentIndex | None = decode_index(path.read_bytes(), source=str(path))
            except (OSError, CorruptData) as exc:
                log.debug("ignoring index %s: %s", path, exc)
                index = None
            if index is not None and index.first_offset != first:
                index = None
            cached = _Sealed(key, index)
            self._sealed[first] = cached
            if index is not None:
                self._points[first] = [*zip(index.offsets, index.positions, strict=True)]
        index = cached.index
        if index is None or index.segment_bytes != wal_size:
            return None  # stale (the broker reopened the segment) or damaged: not sealed
        return index

    def _follow_open(self, first: int, size: int) -> int:
        """Walk the open segment's frames from where the last walk stopped (length and offset
        fields only: cheap; the read before an upload checks every crc)."""
        nxt, pos = self._follow.get(first, (first, HEADER_BYTES))
        restarted = False
        if pos > size:  # the broker cut the segment back: start again
            nxt, pos = first, HEADER_BYTES
        path = self.path / segment_name(first)
        try:
            with open(path, "rb", buffering=0) as f:
                while size - pos >= FRAME_HEADER_BYTES:
                    want = min(_FOLLOW_CHUNK_BYTES, size - pos)
                    chunk = os.pread(f.fileno(), want, pos)
                    walked, used = _walk(chunk, nxt)
                    if walked == 0 and used < 0 and pos > HEADER_BYTES and not restarted:
                        # What was followed is not there any more: the broker cut back frames of a
                        # failed commit and wrote others in their place. Follow again from the start.
                        nxt, pos, restarted = first, HEADER_BYTES, True
                        continue
                    if walked == 0:
                        if used < 0 or len(chunk) < want:
                            break  # damage (or a write in progress), or the file shrank
                        (length,) = struct.unpack_from("<I", chunk, 0)
                        if pos + 8 + length > size:
                            break  # the last frame is not complete (yet)
                        # One frame bigger than the chunk: read exactly that frame.
                        walked, used = _walk(os.pread(f.fileno(), 8 + length, pos), nxt)
                        if walked == 0:
                            break
                    nxt += walked
                    pos += used
        except FileNotFoundError:
            return nxt
        self._follow[first] = (nxt, pos)
        return nxt

    def incarnation(self) -> int | None:
        """The directory's incarnation marker (None: none)."""
        return read_incarnation(self.path)

    def sealed_sequences(self) -> dict[str, int]:
        """Highest sequence id per producer over the sealed segments' indexes seen by ``list``."""
        out: dict[str, int] = {}
        for cached in self._sealed.values():
            if cached.index is not None:
                for name, seq in cached.index.producer_sequences.items():
                    out[name] = max(out.get(name, 0), seq)
        return out

    def intact_end(self, segments: Sequence[LocalSegment]) -> tuple[int | None, dict[str, int]]:
        """Where the log ends (the last frame with a good crc in the open segment, after an
        fsync; the last sealed segment's end without one) and the highest sequence id per
        producer over the local log. (None, {}) without any segment."""
        if not segments:
            return None, {}
        last = max(segments, key=lambda seg: seg.first_offset)
        seqs = self.sealed_sequences()
        if last.sealed:
            return last.next_offset, seqs
        built = self.build(last, last.first_offset, 1 << 63, fsync=True)
        for name, seq in built.producer_sequences.items():
            seqs[name] = max(seqs.get(name, 0), seq)
        return built.end, seqs

    # ------------------------------------------------------------------ reading

    def build(
        self, segment: LocalSegment, start: int, end: int, *, fsync: bool = False, trace_links: int = 0
    ) -> Built:
        """The object holding ``[start, end)`` of ``segment``: exactly those frames when the
        segment is sealed (else CorruptData), up to the last intact frame below ``end`` when it
        is open. ``fsync`` first flushes the file (used when the broker is dead: what is
        uploaded is then durable here too). ``trace_links`` > 0: collect the trace contexts of
        sampled messages (:class:`MessageTraces`, that many kept). Raises FileNotFoundError when
        the file is gone."""
        path = self.path / segment_name(segment.first_offset)
        points = [p for p in self._points.get(segment.first_offset, []) if p[0] <= start]
        follow = self._follow.get(segment.first_offset)
        if follow is not None and follow[0] <= start:
            points.append(follow)
        hint = max(points, default=None)
        try:
            built = _build(path, segment, start, end, hint=hint, fsync=fsync, trace_links=trace_links)
        except _BadHint:
            built = _build(path, segment, start, end, hint=None, fsync=fsync, trace_links=trace_links)
        if built.end > built.start:
            self._remember(segment.first_offset, built.end, built.end_position)
        return built

    def _remember(self, first: int, offset: int, position: int) -> None:
        points = self._points.setdefault(first, [])
        if (offset, position) not in points:
            points.append((offset, position))
            points.sort()


class _BadHint(Exception):
    pass


def _walk(buf: bytes, expected: int) -> tuple[int, int]:
    """Complete frames at the start of ``buf`` carrying consecutive offsets from ``expected``:
    (count, bytes). Count 0 with bytes -1 when the first frame cannot be one (damage)."""
    pos, n, size = 0, 0, len(buf)
    unpack = _LEN_OFFSET.unpack_from
    while size - pos >= FRAME_HEADER_BYTES:
        length, offset = unpack(buf, pos)
        if length < 16 or offset != expected + n:
            return (n, pos) if n else (0, -1)
        end = pos + 8 + length
        if end > size:
            break
        n += 1
        pos = end
    return n, pos


def _pread_exact(fd: int, size: int, pos: int) -> bytes:
    data = os.pread(fd, size, pos)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, pos + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _build(
    path: Path,
    segment: LocalSegment,
    start: int,
    end: int,
    *,
    hint: tuple[int, int] | None,
    fsync: bool,
    trace_links: int = 0,
) -> Built:
    first = segment.first_offset
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        if fsync:
            try:
                os.fdatasync(fd)
            except OSError as exc:  # e.g. EIO: what is cached may never reach the disk
                if exc.errno != errno.EINVAL:
                    raise
        header = decode_header(os.pread(fd, HEADER_BYTES, 0), source=str(path))
        if header.first_offset != first:
            raise CorruptData(f"{path}: its header says offset {header.first_offset}, its name {first}")
        size = os.fstat(fd).st_size
        from_off, from_pos = hint if hint is not None and hint[1] > HEADER_BYTES else (first, HEADER_BYTES)
        base = 0 if from_pos == HEADER_BYTES else from_pos
        if from_pos > size:
            raise _BadHint
        data = _pread_exact(fd, size - base, base)

    pos, off = from_pos - base, from_off
    # Skip to ``start`` (at most one index block, or nothing when the hint is exact).
    while off < start:
        r = scan(data, pos, expected_offset=off, max_frames=min(_SCAN_FRAMES, start - off))
        if not r.frames:
            if base:
                raise _BadHint
            if segment.sealed:
                raise CorruptData(f"WAL segment {path} is damaged at offset {off} (byte {pos}): {r.detail}")
            return Built(start, start, b"", 0, 0, base + pos, reached=False)  # ends before start
        off, pos = r.frames[-1].offset + 1, r.end
    p_start = pos
    max_pt = 0
    seqs: dict[str, int] = {}
    traces = MessageTraces(trace_links) if trace_links > 0 else None
    while off < end:
        r = scan(data, pos, expected_offset=off, max_frames=min(_SCAN_FRAMES, end - off))
        if r.frames:
            max_pt = max(max_pt, max(fr.publish_time_ms for fr in r.frames))
            _note_sequences(seqs, r.frames, traces)
            off, pos = r.frames[-1].offset + 1, r.end
        elif base and pos == from_pos - base and r.stop.is_damage:
            raise _BadHint
        if r.stop is not StopReason.LIMIT:
            if segment.sealed and off < end:
                raise CorruptData(
                    f"WAL segment {path} is damaged at offset {off} (byte {base + pos}): "
                    f"{r.detail or 'it ends early'}; offsets {off}..{end - 1} cannot be uploaded"
                )
            break
    if off == start:
        return Built(start, start, b"", 0, 0, base + pos)
    if base == 0 and start == first:
        obj = data if pos == len(data) else data[:pos]  # the file's own header says `start`
    else:
        obj = b"".join((encode_header(start, header.created_ms), memoryview(data)[p_start:pos]))
    del data
    return Built(
        start, off, obj, google_crc32c.value(obj), max_pt, base + pos, producer_sequences=seqs, traces=traces
    )


def _note_sequences(seqs: dict[str, int], frames: list[Frame], traces: MessageTraces | None = None) -> None:
    """Fold the frames' (producer name, sequence id) into ``seqs`` (records that do not decode
    are skipped: the object is still byte-exact, only deduplication learns less), and the
    sampled messages' trace contexts into ``traces`` when given."""
    decode = StreamMessage.FromString
    for fr in frames:
        try:
            m = decode(fr.record)
        except DecodeError:
            continue
        if m.sequence_id and m.sequence_id > seqs.get(m.producer_name, 0):
            seqs[m.producer_name] = m.sequence_id
        if traces is not None:
            traces.note(fr.offset, m)
