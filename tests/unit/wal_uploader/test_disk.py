"""The uploader's view of a topic directory: listing, following the open segment, building
objects from byte ranges (every frame checked), and where a dead broker's log really ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from danube_common.errors import CorruptData
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.topic_name import TopicName
from danube_common.wal.codec import encode_frames
from danube_common.wal.segment import HEADER_BYTES, decode_header, index_name, segment_name
from danube_wal_uploader.disk import TopicDir, discover_topics
from danube_wal_uploader.next_step import LocalSegment
from tests.unit.wal_uploader.helpers import append, decode_object, open_log, payload, write_topic

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

T = TopicName("default", "orders")


def firsts(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.wal"))


async def test_listing_sealed_and_open_segments(tmp_path: Path) -> None:
    log = await write_topic(tmp_path, T, 1500)
    try:
        td = TopicDir(log.directory)
        segs = td.list()
        starts = firsts(log.directory)
        assert [s.first_offset for s in segs] == starts
        assert all(s.sealed for s in segs[:-1]) and not segs[-1].sealed
        assert [s.next_offset for s in segs[:-1]] == starts[1:]
        assert segs[-1].next_offset == 1500  # followed to its last frame
        assert all(
            s.size_bytes == (log.directory / segment_name(s.first_offset)).stat().st_size for s in segs
        )
        await append(log, 1500, 7)
        assert td.list()[-1].next_offset == 1507  # followed further, from where it stopped
    finally:
        await log.aclose()
    # A damaged index on a segment followed by another: sealed anyway (ends where the next starts).
    (log.directory / index_name(starts[0])).write_bytes(b"junk")
    segs = TopicDir(log.directory).list()
    assert segs[0] == LocalSegment(starts[0], starts[1], True, segs[0].size_bytes)
    # The last segment with an index describing it (the broker died between sealing it and
    # creating the next): sealed.
    (log.directory / segment_name(starts[-1])).unlink()
    segs = TopicDir(log.directory).list()
    assert segs[-1].sealed and segs[-1].next_offset == starts[-1]


async def test_frames_cut_back_and_written_again_are_followed_again(tmp_path: Path) -> None:
    """Found by the soak: a failed commit's frames were followed, then cut off by the broker and
    other frames (other sizes) written in their place: the follow starts over, never sticks."""
    log = await open_log(tmp_path / "t", segment_max_bytes=64 * 1024 * 1024)
    try:
        await log.append([b"a" * 10, b"b" * 10], [1, 1])
        seg = log.directory / segment_name(0)
        durable_end = seg.stat().st_size
        with seg.open("ab") as f:  # a failed commit's two frames, left on disk
            f.write(encode_frames(2, [b"x" * 50, b"y" * 50], [1, 1]))
        td = TopicDir(log.directory)
        assert td.list()[-1].next_offset == 4
        os.truncate(seg, durable_end)  # the broker cuts them off...
        await log.append([b"c", b"d", b"e"], [1, 1, 1])  # ...and writes others at those offsets
        await log.append([b"f" * 300], [1])
        assert td.list()[-1].next_offset == 6
    finally:
        await log.aclose()


async def test_a_frame_bigger_than_a_read_chunk_is_followed(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "t", segment_max_bytes=64 * 1024 * 1024)
    try:
        await log.append([b"a" * 10, b"b" * (5 * 1024 * 1024), b"c"], [1, 2, 3])
        assert TopicDir(log.directory).list()[-1].next_offset == 3
    finally:
        await log.aclose()


async def test_built_objects(tmp_path: Path) -> None:
    log = await write_topic(tmp_path, T, 1200)
    try:
        td = TopicDir(log.directory)
        segs = td.list()
        first, second, tail = segs[0], segs[1], segs[-1]
        assert first.next_offset is not None and second.next_offset is not None
        # A whole sealed segment: exactly the file's bytes (its own header says its first offset).
        whole = td.build(first, 0, first.next_offset)
        assert whole.data == (log.directory / segment_name(0)).read_bytes()
        assert (whole.start, whole.end, whole.max_publish_time_ms) == (
            0,
            first.next_offset,
            1_000 + first.next_offset - 1,
        )
        # Part of one: a fresh header saying where it starts, then the frames byte for byte.
        mid = second.first_offset + 20
        part = td.build(second, mid, second.next_offset)
        assert decode_header(part.data[:HEADER_BYTES]).first_offset == mid
        frames = decode_object(part.data, mid, second.next_offset)
        assert [r for _, _, r in frames] == [payload(i) for i in range(mid, second.next_offset)]
        again = TopicDir(log.directory).build(second, mid, second.next_offset)  # no hints: same bytes
        assert again.data == part.data
        # The open segment, bounded: never past the bound.
        bounded = td.build(tail, tail.first_offset, tail.first_offset + 5)
        assert bounded.end == tail.first_offset + 5
        decode_object(bounded.data, tail.first_offset, tail.first_offset + 5)
        # Then from where that stopped (the remembered position), unbounded: to the last frame.
        rest = td.build(tail, bounded.end, 1 << 62)
        assert (rest.start, rest.end) == (bounded.end, 1200)
        # Past the end of the open segment: nothing, but it reached there.
        nothing = td.build(tail, 1200, 1 << 62)
        assert nothing.end == nothing.start == 1200 and nothing.data == b"" and nothing.reached
        beyond = td.build(tail, 1300, 1 << 62)
        assert beyond.end == 1300 and not beyond.reached
    finally:
        await log.aclose()


async def test_a_wrong_remembered_position_falls_back_to_a_scan(tmp_path: Path) -> None:
    log = await write_topic(tmp_path, T, 300)
    await log.aclose()
    td = TopicDir(log.directory)
    tail = td.list()[-1]
    td._points[tail.first_offset] = [(tail.first_offset + 3, HEADER_BYTES + 7)]  # garbage
    built = td.build(tail, tail.first_offset + 3, 300)
    assert built.end == 300
    decode_object(built.data, tail.first_offset + 3, 300)


async def test_torn_tail_and_damage(tmp_path: Path) -> None:
    log = await write_topic(tmp_path, T, 1500)
    await log.aclose()
    td = TopicDir(log.directory)
    segs = td.list()
    tail = segs[-1]
    assert len(segs) >= 3 and segs[1].sealed
    path = log.directory / segment_name(tail.first_offset)
    # A torn frame at the end of the open segment: the object stops before it.
    path.write_bytes(path.read_bytes() + b"\x50\x00\x00\x00\x01\x02")
    assert td.build(tail, tail.first_offset, 1 << 62).end == 1500
    # A bit flipped inside a sealed segment: refused, naming the file and offset.
    victim = log.directory / segment_name(segs[1].first_offset)
    raw = bytearray(victim.read_bytes())
    raw[-30] ^= 0x01
    victim.write_bytes(bytes(raw))
    assert segs[1].next_offset is not None
    with pytest.raises(CorruptData, match=str(victim)):
        TopicDir(log.directory).build(segs[1], segs[1].first_offset, segs[1].next_offset)


async def test_intact_end_checks_every_crc_and_collects_sequences(tmp_path: Path) -> None:
    def record(j: int) -> tuple[bytes, tuple[str, int]]:
        name, seq = ("p-a", j + 1) if j % 50 < 25 else ("p-b", 1000 + j)
        return pb.StreamMessage(
            payload=payload(j), producer_name=name, sequence_id=seq
        ).SerializeToString(), (
            name,
            seq,
        )

    log = await open_log(tmp_path / "t", incarnation=42)
    try:
        for i in range(0, 600, 50):
            recs = [record(j) for j in range(i, i + 50)]
            await log.append([r for r, _ in recs], [1_000] * 50, [q for _, q in recs])
    finally:
        await log.aclose()
    td = TopicDir(log.directory)
    assert td.incarnation() == 42
    segs = td.list()
    assert len(segs) > 1 and not segs[-1].sealed
    end, seqs = td.intact_end(segs)
    assert end == 600
    assert seqs == {"p-a": 575, "p-b": 1000 + 599}
    # A torn last frame (the broker died mid-write): the end is the last frame with a good crc.
    last = log.directory / segment_name(segs[-1].first_offset)
    raw = bytearray(last.read_bytes())
    raw[-3] ^= 0xFF
    last.write_bytes(bytes(raw))
    td = TopicDir(log.directory)
    end, _ = td.intact_end(td.list())
    assert end == 599
    assert TopicDir(tmp_path / "missing").intact_end([]) == (None, {})


def test_discovery(tmp_path: Path) -> None:
    for rel in ("default/a", "default/b.superseded-40", "ns2/c-part-0", "default/bad name", "bad ns/x"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "default" / "file").write_text("")
    assert sorted(str(t) for t in discover_topics(tmp_path)) == ["/default/a", "/ns2/c-part-0"]
    assert discover_topics(tmp_path / "missing") == {}
