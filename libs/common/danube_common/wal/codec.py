"""WAL frames: encode a batch of records, and scan a buffer back into frames.

A frame, all integers little-endian::

    length u32 | crc32c u32 | offset u64 | publish_time_ms u64 | record bytes

``length`` counts the bytes after the crc field (16 + len(record)); the crc32c covers exactly
those bytes (offset, publish time and record). The record is opaque here (the broker stores an
encoded ``danube.StreamMessage``).

Pure and synchronous: no files, no event loop. :func:`scan` never raises on bad input; it
returns the good frames it found and where and why it stopped, so recovery can truncate a torn
tail and readers can report damage precisely.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import google_crc32c

#: Bytes before the record: length, crc, offset, publish time.
FRAME_HEADER_BYTES = 24
#: ``length`` counts these bytes before the record (offset + publish time).
_LENGTH_OVERHEAD = 16
#: A frame longer than this is treated as damage (a flipped length field), not as a frame.
MAX_FRAME_BYTES = 256 * 1024 * 1024

_pack_qq = struct.Struct("<QQ").pack
_pack_iiqq = struct.Struct("<IIQQ").pack
_unpack_ii = struct.Struct("<II").unpack_from
_unpack_qq = struct.Struct("<QQ").unpack
_crc = google_crc32c.value
_crc_extend = google_crc32c.extend


class Frame(NamedTuple):
    offset: int
    publish_time_ms: int
    record: bytes
    #: Byte position of the frame's first byte in the scanned buffer (plus ``base_position``).
    position: int


class StopReason(enum.Enum):
    """Why a scan stopped."""

    END = "end"  # the buffer ended exactly after the last good frame
    TRUNCATED = "truncated"  # a partial frame header or body at the end of the buffer
    BAD_LENGTH = "bad_length"  # a length field that cannot be a frame
    BAD_CRC = "bad_crc"  # the checksum does not match the frame's bytes
    OFFSET_GAP = "offset_gap"  # a good frame whose offset is not the expected next one
    LIMIT = "limit"  # max_frames or max_bytes reached (the rest was not examined)

    @property
    def is_damage(self) -> bool:
        """True when the scan stopped at bytes that are not a good frame."""
        return self in (StopReason.BAD_LENGTH, StopReason.BAD_CRC, StopReason.OFFSET_GAP)


@dataclass(frozen=True, slots=True)
class ScanResult:
    frames: list[Frame]
    #: Position just after the last good frame: where a torn tail is truncated.
    end: int
    stop: StopReason
    #: A sentence for logs and errors ("" when the scan reached the end cleanly).
    detail: str = ""

    @property
    def next_offset(self) -> int | None:
        """Offset after the last good frame, or None when no frame was found."""
        return self.frames[-1].offset + 1 if self.frames else None


def frame_size(record_len: int) -> int:
    """Bytes a frame holding a record of ``record_len`` bytes takes."""
    return FRAME_HEADER_BYTES + record_len


def encode_frame(offset: int, publish_time_ms: int, record: bytes) -> bytes:
    """One frame (for tests and tools; appends use :func:`encode_frames`)."""
    head = _pack_qq(offset, publish_time_ms)
    crc = _crc_extend(_crc(head), record)
    return _pack_iiqq(_LENGTH_OVERHEAD + len(record), crc, offset, publish_time_ms) + record


def encode_frames(first_offset: int, records: Sequence[bytes], publish_times_ms: Sequence[int]) -> bytes:
    """Frames for ``records`` at consecutive offsets from ``first_offset``, joined into one buffer."""
    if len(records) != len(publish_times_ms):
        raise ValueError(f"{len(records)} records but {len(publish_times_ms)} publish times")
    parts: list[bytes] = []
    add = parts.append
    pack_qq, pack_iiqq, crc, extend = _pack_qq, _pack_iiqq, _crc, _crc_extend
    offset = first_offset
    for record, pt in zip(records, publish_times_ms, strict=True):
        add(pack_iiqq(_LENGTH_OVERHEAD + len(record), extend(crc(pack_qq(offset, pt)), record), offset, pt))
        add(record)
        offset += 1
    return b"".join(parts)


def scan(
    buf: bytes,
    start: int = 0,
    *,
    expected_offset: int | None = None,
    max_frames: int | None = None,
    max_bytes: int | None = None,
    base_position: int = 0,
) -> ScanResult:
    """Decode consecutive frames from ``buf[start:]``.

    - ``expected_offset``: the first frame must carry this offset and each next one the next
      offset; otherwise the scan stops with OFFSET_GAP. None accepts any first offset (the rest
      must still be consecutive).
    - ``max_frames`` / ``max_bytes`` (record bytes, at least one frame is returned): stop early
      with LIMIT.
    - ``base_position`` is added to every reported position (when ``buf`` is a chunk of a file).

    Never raises on bad bytes: the result says where the good frames end and why.
    """
    frames: list[Frame] = []
    add = frames.append
    size = len(buf)
    pos = start
    want = expected_offset
    record_bytes = 0
    crc, extend, unpack_ii, unpack_qq = _crc, _crc_extend, _unpack_ii, _unpack_qq

    def result(stop: StopReason, detail: str = "") -> ScanResult:
        return ScanResult(frames, base_position + pos, stop, detail)

    while True:
        if pos == size:
            return result(StopReason.END)
        if max_frames is not None and len(frames) >= max_frames:
            return result(StopReason.LIMIT)
        if max_bytes is not None and frames and record_bytes >= max_bytes:
            return result(StopReason.LIMIT)
        if size - pos < FRAME_HEADER_BYTES:
            return result(StopReason.TRUNCATED, f"{size - pos} bytes of a frame header at the end")
        length, stored_crc = unpack_ii(buf, pos)
        if length < _LENGTH_OVERHEAD or length > MAX_FRAME_BYTES:
            return result(StopReason.BAD_LENGTH, f"frame length field {length} is impossible")
        end = pos + 8 + length
        if end > size:
            return result(
                StopReason.TRUNCATED, f"frame of {8 + length} bytes but only {size - pos} bytes remain"
            )
        head = buf[pos + 8 : pos + FRAME_HEADER_BYTES]
        record = buf[pos + FRAME_HEADER_BYTES : end]
        if extend(crc(head), record) != stored_crc:
            return result(StopReason.BAD_CRC, "crc32c mismatch")
        offset, pt = unpack_qq(head)
        if want is not None and offset != want:
            return result(StopReason.OFFSET_GAP, f"frame carries offset {offset}, expected {want}")
        add(Frame(offset, pt, record, base_position + pos))
        record_bytes += length - _LENGTH_OVERHEAD
        want = offset + 1
        pos = end


def count_intact_after(buf: bytes, pos: int) -> int:
    """Best effort, for log messages: how many good frames follow a damaged one at ``pos``.

    Hops over the damaged frame by its length field (when plausible) and counts the good frames
    after it. Returns 0 when the damaged frame's length cannot be trusted.
    """
    if len(buf) - pos < FRAME_HEADER_BYTES:
        return 0
    (length,) = struct.unpack_from("<I", buf, pos)
    if length < _LENGTH_OVERHEAD or pos + 8 + length > len(buf):
        return 0
    return len(scan(buf, pos + 8 + length).frames)
