"""WAL segment files: names, the segment header, and the sealed segment's sidecar index.

A topic's directory holds ``{first_offset:020d}.wal`` segments (and, for sealed ones,
``{first_offset:020d}.idx``). A segment file is a 32-byte header then frames (see
:mod:`danube_common.wal.codec`)::

    magic "DNBWAL1\\n" | version u32 | first_offset u64 | created_ms u64 | crc32c u32 (of the 28 bytes before)

The index (written once, atomically, when the segment is sealed) lets a reader open the
segment without scanning it::

    magic "DNBIDX1\\n" | version u32 | first_offset u64 | next_offset u64 | segment_bytes u64
    | max_publish_time_ms u64 | index_every_frames u32 | n_entries u32 | n_producers u32
    | n_entries x (offset u64, position u64, block_max_publish_time_ms u64)
    | n_producers x (name_len u16, name utf-8, max_sequence_id u64)
    | crc32c u32 (of everything before)

Entry *i* points at frame ``first_offset + i * index_every_frames``; its block max is the
largest publish time of that frame and the ``index_every_frames - 1`` frames after it.
``segment_bytes`` is the .wal file size the index describes: a different size means the index
is stale and must be rebuilt.

Pure and synchronous, usable by any tool that reads segments (e.g. the uploader).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c

from danube_common.errors import CorruptData
from danube_common.wal.codec import Frame, ScanResult, scan

SEGMENT_MAGIC = b"DNBWAL1\n"
INDEX_MAGIC = b"DNBIDX1\n"
FORMAT_VERSION = 1
SEGMENT_SUFFIX = ".wal"
INDEX_SUFFIX = ".idx"

_HEADER = struct.Struct("<8sIQQ")
_HEADER_CRC = struct.Struct("<I")
#: Bytes of the segment header; the first frame starts here.
HEADER_BYTES = _HEADER.size + _HEADER_CRC.size

_INDEX_HEAD = struct.Struct("<8sIQQQQIII")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

_NAME_RE = re.compile(r"^(\d{20})\.(wal|idx)$")


def segment_name(first_offset: int) -> str:
    return f"{first_offset:020d}{SEGMENT_SUFFIX}"


def index_name(first_offset: int) -> str:
    return f"{first_offset:020d}{INDEX_SUFFIX}"


def parse_name(name: str) -> tuple[int, str] | None:
    """``(first_offset, "wal" | "idx")`` for a segment or index file name, else None."""
    m = _NAME_RE.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


# ---------------------------------------------------------------- segment header


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    first_offset: int
    created_ms: int
    version: int = FORMAT_VERSION


def encode_header(first_offset: int, created_ms: int) -> bytes:
    body = _HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, first_offset, created_ms)
    return body + _HEADER_CRC.pack(google_crc32c.value(body))


def decode_header(buf: bytes, *, source: str = "segment") -> SegmentHeader:
    """Parse a segment header; raises CorruptData saying what is wrong."""
    if len(buf) < HEADER_BYTES:
        raise CorruptData(f"{source}: header is {len(buf)} bytes, expected {HEADER_BYTES}")
    magic, version, first_offset, created_ms = _HEADER.unpack_from(buf, 0)
    if magic != SEGMENT_MAGIC:
        raise CorruptData(f"{source}: not a WAL segment (magic {magic!r})")
    (stored,) = _HEADER_CRC.unpack_from(buf, _HEADER.size)
    if google_crc32c.value(bytes(buf[: _HEADER.size])) != stored:
        raise CorruptData(f"{source}: header checksum mismatch")
    if version != FORMAT_VERSION:
        raise CorruptData(f"{source}: format version {version}, this build reads {FORMAT_VERSION}")
    return SegmentHeader(first_offset, created_ms, version)


# ---------------------------------------------------------------- sidecar index


@dataclass(slots=True)
class SegmentIndex:
    """What a reader needs to know about a sealed segment without scanning it."""

    first_offset: int
    next_offset: int  # one past the last offset (== first_offset for an empty segment)
    segment_bytes: int
    max_publish_time_ms: int  # 0 for an empty segment
    index_every_frames: int
    offsets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    block_max_publish_ms: list[int] = field(default_factory=list)
    producer_sequences: dict[str, int] = field(default_factory=dict)

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1


def build_index(
    first_offset: int,
    frames: Sequence[Frame],
    *,
    segment_bytes: int,
    index_every_frames: int,
    producer_sequences: dict[str, int] | None = None,
) -> SegmentIndex:
    """The index of a segment from its scanned frames (which must start at ``first_offset``)."""
    every = index_every_frames
    idx = SegmentIndex(
        first_offset=first_offset,
        next_offset=first_offset + len(frames),
        segment_bytes=segment_bytes,
        max_publish_time_ms=max((f.publish_time_ms for f in frames), default=0),
        index_every_frames=every,
        producer_sequences=dict(producer_sequences or {}),
    )
    for i in range(0, len(frames), every):
        idx.offsets.append(frames[i].offset)
        idx.positions.append(frames[i].position)
        idx.block_max_publish_ms.append(max(f.publish_time_ms for f in frames[i : i + every]))
    return idx


def encode_index(idx: SegmentIndex) -> bytes:
    n = len(idx.offsets)
    if not (len(idx.positions) == len(idx.block_max_publish_ms) == n):
        raise ValueError("index entry lists differ in length")
    parts = [
        _INDEX_HEAD.pack(
            INDEX_MAGIC,
            FORMAT_VERSION,
            idx.first_offset,
            idx.next_offset,
            idx.segment_bytes,
            idx.max_publish_time_ms,
            idx.index_every_frames,
            n,
            len(idx.producer_sequences),
        )
    ]
    flat: list[int] = []
    for entry in zip(idx.offsets, idx.positions, idx.block_max_publish_ms, strict=True):
        flat.extend(entry)
    parts.append(struct.pack(f"<{3 * n}Q", *flat))
    for name, seq in sorted(idx.producer_sequences.items()):
        raw = name.encode()
        parts += [_U16.pack(len(raw)), raw, _U64.pack(seq)]
    body = b"".join(parts)
    return body + _U32.pack(google_crc32c.value(body))


def decode_index(buf: bytes, *, source: str = "index") -> SegmentIndex:
    """Parse an index file; raises CorruptData when it is damaged or not an index."""
    if len(buf) < _INDEX_HEAD.size + _U32.size:
        raise CorruptData(f"{source}: {len(buf)} bytes is too short for an index")
    (stored,) = _U32.unpack_from(buf, len(buf) - _U32.size)
    body = bytes(buf[: -_U32.size])
    if google_crc32c.value(body) != stored:
        raise CorruptData(f"{source}: index checksum mismatch")
    magic, version, first, nxt, seg_bytes, max_pt, every, n, n_prod = _INDEX_HEAD.unpack_from(body, 0)
    if magic != INDEX_MAGIC or version != FORMAT_VERSION:
        raise CorruptData(f"{source}: not a version-{FORMAT_VERSION} WAL index")
    try:
        pos = _INDEX_HEAD.size
        flat = struct.unpack_from(f"<{3 * n}Q", body, pos)
        pos += 24 * n
        seqs: dict[str, int] = {}
        for _ in range(n_prod):
            (name_len,) = _U16.unpack_from(body, pos)
            name = body[pos + 2 : pos + 2 + name_len].decode()
            pos += 2 + name_len
            (seqs[name],) = _U64.unpack_from(body, pos)
            pos += 8
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"{source}: malformed index ({exc})") from exc
    if pos != len(body) or nxt < first or every <= 0:
        raise CorruptData(f"{source}: inconsistent index")
    return SegmentIndex(
        first_offset=first,
        next_offset=nxt,
        segment_bytes=seg_bytes,
        max_publish_time_ms=max_pt,
        index_every_frames=every,
        offsets=list(flat[0::3]),
        positions=list(flat[1::3]),
        block_max_publish_ms=list(flat[2::3]),
        producer_sequences=seqs,
    )


# ---------------------------------------------------------------- reading files


@dataclass(frozen=True, slots=True)
class SegmentScan:
    header: SegmentHeader
    result: ScanResult
    file_bytes: int


def scan_segment_file(path: Path) -> SegmentScan:
    """Read a whole segment file and scan its frames (which must be consecutive from the header's
    first offset). Raises CorruptData when the header is bad; frame damage is reported in
    ``result`` (``result.end`` is where the good frames end)."""
    data = path.read_bytes()
    header = decode_header(data, source=str(path))
    result = scan(data, HEADER_BYTES, expected_offset=header.first_offset)
    return SegmentScan(header, result, len(data))


def iter_segment_names(directory: Path) -> Iterable[tuple[int, str, Path]]:
    """``(first_offset, kind, path)`` for every segment and index file in a topic directory."""
    for entry in directory.iterdir():
        parsed = parse_name(entry.name)
        if parsed is not None:
            yield parsed[0], parsed[1], entry
