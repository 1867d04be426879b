"""The frame and segment codec (danube_common.wal): bytes in, bytes out, no files or loop."""

from __future__ import annotations

import struct

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danube_common.errors import CorruptData
from danube_common.wal import (
    FRAME_HEADER_BYTES,
    HEADER_BYTES,
    SegmentIndex,
    StopReason,
    build_index,
    decode_header,
    decode_index,
    encode_frame,
    encode_frames,
    encode_header,
    encode_index,
    index_name,
    parse_name,
    scan,
    segment_name,
)
from danube_common.wal.codec import count_intact_after

pytestmark = pytest.mark.unit

u64 = st.integers(min_value=0, max_value=2**64 - 1)
batches = st.lists(st.tuples(st.binary(max_size=300), u64), max_size=30)


def test_frame_layout_is_the_documented_one() -> None:
    frame = encode_frame(7, 1234, b"hello")
    length, crc, offset, pt = struct.unpack_from("<IIQQ", frame)
    assert (length, offset, pt) == (16 + 5, 7, 1234)
    assert frame[FRAME_HEADER_BYTES:] == b"hello"
    assert crc == google_crc32c.value(frame[8:])
    assert encode_frames(7, [b"hello"], [1234]) == frame


@given(first=st.integers(0, 2**63), batch=batches)
def test_round_trip(first: int, batch: list[tuple[bytes, int]]) -> None:
    recs = [r for r, _ in batch]
    pts = [t for _, t in batch]
    buf = encode_frames(first, recs, pts)
    r = scan(buf, expected_offset=first)
    assert r.stop is StopReason.END and r.end == len(buf)
    assert [(f.offset, f.publish_time_ms, f.record) for f in r.frames] == [
        (first + i, pts[i], recs[i]) for i in range(len(recs))
    ]
    # Positions point at each frame.
    for f in r.frames:
        assert buf[f.position : f.position + FRAME_HEADER_BYTES + len(f.record)] == encode_frame(
            f.offset, f.publish_time_ms, f.record
        )


@given(batch=batches.filter(bool), data=st.data())
def test_a_cut_keeps_exactly_the_whole_frames_before_it(
    batch: list[tuple[bytes, int]], data: st.DataObject
) -> None:
    buf = encode_frames(0, [r for r, _ in batch], [t for _, t in batch])
    cut = data.draw(st.integers(0, len(buf)))
    r = scan(buf[:cut])
    whole = [f for f in scan(buf).frames if f.position + FRAME_HEADER_BYTES + len(f.record) <= cut]
    assert r.frames == whole
    assert r.stop is (StopReason.END if r.end == cut else StopReason.TRUNCATED)


@given(batch=batches.filter(bool), data=st.data())
def test_a_flipped_byte_stops_the_scan_at_its_frame(
    batch: list[tuple[bytes, int]], data: st.DataObject
) -> None:
    buf = bytearray(encode_frames(100, [r for r, _ in batch], [t for _, t in batch]))
    frames = scan(bytes(buf)).frames
    k = data.draw(st.integers(0, len(frames) - 1))
    start = frames[k].position
    pos = data.draw(st.integers(start, start + FRAME_HEADER_BYTES + len(frames[k].record) - 1))
    buf[pos] ^= data.draw(st.integers(1, 255))
    r = scan(bytes(buf), expected_offset=100)
    assert r.frames == frames[:k]
    assert r.end == start
    assert r.stop is not StopReason.END


@settings(max_examples=300)
@given(st.binary(max_size=2000), st.integers(0, 50))
def test_garbage_never_raises(buf: bytes, start: int) -> None:
    r = scan(buf, min(start, len(buf)))
    assert r.end <= len(buf)


def test_offset_gap_and_limits() -> None:
    buf = encode_frames(5, [b"a", b"b"], [1, 2]) + encode_frames(9, [b"c"], [3])
    r = scan(buf, expected_offset=5)
    assert [f.offset for f in r.frames] == [5, 6] and r.stop is StopReason.OFFSET_GAP
    assert scan(buf, expected_offset=4).frames == []
    assert len(scan(buf, max_frames=1).frames) == 1
    r = scan(encode_frames(0, [b"x" * 10] * 5, [0] * 5), max_bytes=15)
    assert len(r.frames) == 2 and r.stop is StopReason.LIMIT
    bad_length = struct.pack("<II", 3, 0) + b"\0" * 30
    assert scan(bad_length).stop is StopReason.BAD_LENGTH


def test_count_intact_after_damage() -> None:
    buf = bytearray(encode_frames(0, [b"a", b"b", b"c", b"d"], [0] * 4))
    frames = scan(bytes(buf)).frames
    buf[frames[1].position + 20] ^= 0xFF
    r = scan(bytes(buf))
    assert len(r.frames) == 1
    assert count_intact_after(bytes(buf), r.end) == 2


def test_names() -> None:
    assert segment_name(42) == "00000000000000000042.wal"
    assert index_name(42) == "00000000000000000042.idx"
    assert parse_name(segment_name(42)) == (42, "wal")
    assert parse_name(index_name(2**63)) == (2**63, "idx")
    for bad in ("42.wal", "00000000000000000042.wal.tmp", "x0000000000000000042.wal"):
        assert parse_name(bad) is None


def test_header_round_trip_and_damage() -> None:
    h = encode_header(77, 123456)
    assert len(h) == HEADER_BYTES and h.startswith(b"DNBWAL1\n")
    parsed = decode_header(h + b"trailing frames")
    assert (parsed.first_offset, parsed.created_ms, parsed.version) == (77, 123456, 1)
    for i in range(HEADER_BYTES):
        damaged = bytearray(h)
        damaged[i] ^= 0x10
        with pytest.raises(CorruptData):
            decode_header(bytes(damaged))
    with pytest.raises(CorruptData, match="header is 5 bytes"):
        decode_header(h[:5])


names = st.text(max_size=20)


@given(
    first=st.integers(0, 2**40),
    pts=st.lists(st.integers(0, 2**50), max_size=40),
    every=st.integers(1, 10),
    seqs=st.dictionaries(names, u64, max_size=5),
)
def test_index_round_trip(first: int, pts: list[int], every: int, seqs: dict[str, int]) -> None:
    buf = encode_frames(first, [b"r"] * len(pts), pts)
    frames = scan(buf, base_position=HEADER_BYTES).frames
    idx = build_index(
        first,
        frames,
        segment_bytes=HEADER_BYTES + len(buf),
        index_every_frames=every,
        producer_sequences=seqs,
    )
    assert idx.next_offset == first + len(pts)
    assert idx.offsets == [first + i for i in range(0, len(pts), every)]
    assert idx.block_max_publish_ms == [max(pts[i : i + every]) for i in range(0, len(pts), every)]
    assert idx.max_publish_time_ms == max(pts, default=0)
    assert decode_index(encode_index(idx)) == idx


def test_index_damage_is_detected() -> None:
    idx = SegmentIndex(0, 10, 500, 99, 4, [0, 4, 8], [32, 100, 200], [5, 6, 7], {"p": 3})
    raw = encode_index(idx)
    for i in range(len(raw)):
        damaged = bytearray(raw)
        damaged[i] ^= 0x01
        with pytest.raises(CorruptData):
            decode_index(bytes(damaged))
    for cut in range(len(raw)):
        with pytest.raises(CorruptData):
            decode_index(raw[:cut])
