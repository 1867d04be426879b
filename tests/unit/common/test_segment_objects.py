"""Finding a topic's uploaded objects and decoding one (danube_common.segment_objects): pure,
bytes built with the WAL codec as the uploader builds them."""

from __future__ import annotations

from datetime import UTC, datetime

import google_crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.errors import CorruptData
from danube_common.objstore import ObjectInfo
from danube_common.segment_objects import HistoryObject, Piece, cover, decode_object, objects_from_listing
from danube_common.storage import ObjectKeyParts, object_key, parse_object_key_parts
from danube_common.topic_name import TopicName
from danube_common.wal.codec import encode_frames
from danube_common.wal.segment import encode_header

pytestmark = pytest.mark.unit

T = TopicName("default", "orders")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def obj(start: int, nxt: int, key: str | None = None) -> HistoryObject:
    return HistoryObject(str(T), key or object_key(T, start, nxt), start, nxt, 100)


def segment(start: int, n: int) -> bytes:
    return encode_header(start, 1) + encode_frames(
        start, [b"r%d" % i for i in range(n)], [10 + i for i in range(n)]
    )


def info(key: str, size: int = 10) -> ObjectInfo:
    return ObjectInfo(key, size, "e", NOW)


def test_object_key_parts_parse_every_form() -> None:
    assert parse_object_key_parts(object_key(T, 3, 9, incarnation=5, revision=7)) == ObjectKeyParts(
        T, 3, 9, 5, 7
    )
    assert parse_object_key_parts(object_key(T, 3, 9)) == ObjectKeyParts(T, 3, 9, None, 0)
    assert parse_object_key_parts("load-history/date=2026-01-01/x.jsonl") is None


def test_listing_keeps_one_incarnation_and_the_old_keys() -> None:
    keys = [
        object_key(T, 0, 5, incarnation=3),
        object_key(T, 0, 5, incarnation=8, revision=1),
        object_key(T, 5, 9, incarnation=8, revision=1),
        object_key(T, 9, 12),  # before incarnations: kept
        object_key(TopicName("default", "other"), 0, 5, incarnation=9),
        "default/orders/i8/notes.txt",
    ]
    got = objects_from_listing([info(k) for k in keys], T)
    assert [(o.start_offset, o.next_offset) for o in got] == [(0, 5), (5, 9), (9, 12)]
    assert got[0].key == keys[1] and got[0].crc32c is None and got[0].size_bytes == 10
    older = objects_from_listing([info(k) for k in keys], T, incarnation=3)
    assert [o.key for o in older] == [keys[0], keys[3]]


@pytest.mark.parametrize(
    ("ranges", "start", "end", "pieces", "holes"),
    [
        ([(0, 5), (5, 9)], 0, None, [(0, 0, 5), (5, 5, 9)], []),
        ([(0, 5), (5, 9)], 3, 7, [(0, 3, 5), (5, 5, 7)], []),
        ([(0, 5), (5, 9)], 9, None, [], []),
        ([(0, 5), (8, 9)], 0, None, [(0, 0, 5), (8, 8, 9)], [(5, 8)]),
        ([(2, 5)], 0, 10, [(2, 2, 5)], [(0, 2), (5, 10)]),
        # an orphan [0, 7) beside described [0, 5) [5, 9): the furthest reaching object wins
        ([(0, 5), (0, 7), (5, 9)], 0, None, [(0, 0, 7), (5, 7, 9)], []),
        ([(0, 3), (0, 5), (3, 9)], 0, None, [(0, 0, 5), (3, 5, 9)], []),
        ([], 0, None, [], []),
    ],
)
def test_cover(
    ranges: list[tuple[int, int]],
    start: int,
    end: int | None,
    pieces: list[tuple[int, int, int]],
    holes: list[tuple[int, int]],
) -> None:
    got, gaps = cover([obj(s, n) for s, n in ranges], start_offset=start, end_offset=end)
    assert [(p.obj.start_offset, p.lo, p.hi) for p in got] == pieces
    assert gaps == holes


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=12), st.integers(0, 70))
def test_cover_reads_each_held_offset_once_in_order(spans: list[tuple[int, int]], start: int) -> None:
    objects = [obj(s, s + n, key=f"k{i}") for i, (s, n) in enumerate(spans)]
    pieces, holes = cover(objects, start_offset=start)
    read = [o for p in pieces for o in range(p.lo, p.hi)]
    held = sorted({o for s, n in spans for o in range(s, s + n) if o >= start})
    assert read == held
    for p in pieces:
        assert p.obj.start_offset <= p.lo < p.hi <= p.obj.next_offset
    assert not any(lo <= o < hi for lo, hi in holes for o in held)


def test_decode_checks_everything() -> None:
    data = segment(10, 4)
    o = HistoryObject(str(T), "k", 10, 14, len(data), google_crc32c.value(data))
    assert [f.offset for f in decode_object(data, o)] == [10, 11, 12, 13]
    assert [f.record for f in decode_object(data, o)] == [b"r0", b"r1", b"r2", b"r3"]

    def refused(bad: bytes, what: str, **change: object) -> None:
        o2 = HistoryObject(**{**{f: getattr(o, f) for f in o.__dataclass_fields__}, **change})  # type: ignore[arg-type]
        with pytest.raises(CorruptData) as err:
            decode_object(bad, o2)
        assert "object k of topic /default/orders" in err.value.message and what in err.value.message
        assert "not skipped" in err.value.message

    flipped = bytearray(data)
    flipped[-1] ^= 1
    refused(bytes(flipped), "crc32c mismatch", crc32c=None)
    refused(bytes(flipped), "crc32c mismatch")
    refused(data[:-1], "offset 13", size_bytes=0, crc32c=None)
    refused(data[:-1], "should be", crc32c=None)
    refused(data + b"\0", "unexpected bytes", size_bytes=0, crc32c=None)
    refused(data, "starts at offset 10", start_offset=11, next_offset=15)
    refused(data, "offset 14", next_offset=16, size_bytes=0, crc32c=None)
    refused(data, "descriptor records", crc32c=1)
    refused(b"junk" * 10, "not a WAL segment", size_bytes=0, crc32c=None)


@given(st.data())
def test_any_flipped_byte_is_refused(data: st.DataObject) -> None:
    """Every byte of an object is covered by a checksum (header or frame), so no single damaged
    byte can come back as a message, even without a descriptor's size and crc32c."""
    good = segment(7, 5)
    where = data.draw(st.integers(0, len(good) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(good)
    bad[where] ^= 1 << bit
    with pytest.raises(CorruptData):
        decode_object(bytes(bad), HistoryObject(str(T), "k", 7, 12, 0))


def test_piece_is_a_value() -> None:
    assert Piece(obj(0, 5), 1, 3) == Piece(obj(0, 5), 1, 3)
