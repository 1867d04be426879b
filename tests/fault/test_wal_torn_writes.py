"""Torn and corrupted WAL files: recovery keeps exactly the frames before the damage.

Each example writes K frames (sometimes over several segments), closes the log, damages the
tail segment (a cut at a random byte, or a flipped byte inside a random frame) and reopens it:
every frame that lies wholly before the damage must be there, nothing after it, next_offset must
be the first damaged frame's offset, and appends must continue from there and survive another
reopen. Damage inside a *sealed* segment is not repaired: reads reaching it raise CorruptData.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danube_broker.wal import Durability, LogEntry, TopicLog, WalConfig
from danube_common.errors import CorruptData
from danube_common.wal.codec import FRAME_HEADER_BYTES
from danube_common.wal.segment import HEADER_BYTES, decode_index, scan_segment_file
from tests.unit.wal.helpers import append_all, cfg, read_all, segment_files

pytestmark = pytest.mark.slow

EXAMPLES = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


async def _write(d: Path, c: WalConfig, sizes: list[int], batch: int) -> list[LogEntry]:
    log = await TopicLog.open(d, cfg=c, durability=Durability.NONE)
    recs = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    expected = await append_all(log, recs, batch=batch)
    await log.aclose()
    return expected


async def _reopen_and_check(d: Path, c: WalConfig, keep: list[LogEntry]) -> None:
    log = await TopicLog.open(d, cfg=c, durability=Durability.NONE)
    nxt = keep[-1].offset + 1 if keep else 0
    assert log.next_offset == log.durable_offset == nxt
    assert await read_all(log) == keep
    more = await append_all(log, [b"after-1", b"after-2"], t0=7)
    assert more[0].offset == nxt
    await log.aclose()
    log = await TopicLog.open(d, cfg=c, durability=Durability.NONE)
    assert await read_all(log) == keep + more
    assert log.next_offset == nxt + 2
    await log.aclose()


sizes_st = st.lists(st.integers(0, 60), min_size=1, max_size=40)
segment_bytes_st = st.sampled_from([300, 700, 1 << 20])


@EXAMPLES
@given(sizes=sizes_st, batch=st.integers(1, 5), seg=segment_bytes_st, data=st.data())
def test_cut_tail_keeps_whole_frames_before_the_cut(
    sizes: list[int], batch: int, seg: int, data: st.DataObject
) -> None:
    c = cfg(segment_max_bytes=seg, index_every_frames=2)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        expected = asyncio.run(_write(d, c, sizes, batch))
        tail = segment_files(d)[-1]
        size = tail.stat().st_size
        cut = data.draw(st.integers(0, size - 1), label="cut")
        frames = scan_segment_file(tail).result.frames
        tail_first = int(tail.name[:20])
        whole = [f for f in frames if f.position + FRAME_HEADER_BYTES + len(f.record) <= cut]
        if cut < HEADER_BYTES:
            whole = []
        with tail.open("r+b") as f:
            f.truncate(cut)
        asyncio.run(_reopen_and_check(d, c, expected[: tail_first + len(whole)]))


@EXAMPLES
@given(sizes=sizes_st, batch=st.integers(1, 5), seg=segment_bytes_st, data=st.data())
def test_flipped_byte_in_tail_drops_that_frame_and_everything_after(
    sizes: list[int], batch: int, seg: int, data: st.DataObject
) -> None:
    c = cfg(segment_max_bytes=seg, index_every_frames=2)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        expected = asyncio.run(_write(d, c, sizes, batch))
        tail = segment_files(d)[-1]
        frames = scan_segment_file(tail).result.frames
        if not frames:
            return  # the last commit sealed a segment: the tail is empty
        k = data.draw(st.integers(0, len(frames) - 1), label="frame")
        start = frames[k].position
        pos = data.draw(
            st.integers(start, start + FRAME_HEADER_BYTES + len(frames[k].record) - 1), label="byte"
        )
        raw = bytearray(tail.read_bytes())
        raw[pos] ^= data.draw(st.integers(1, 255), label="xor")
        tail.write_bytes(bytes(raw))
        asyncio.run(_reopen_and_check(d, c, expected[: frames[k].offset]))


async def _sealed_damage(d: Path, drop_index: bool, caplog: pytest.LogCaptureFixture) -> None:
    c = cfg(segment_max_bytes=400, index_every_frames=2)
    expected = await _write(d, c, [20] * 30, 2)
    seg = segment_files(d)[1]
    frames = scan_segment_file(seg).result.frames
    bad = frames[len(frames) // 2]
    raw = bytearray(seg.read_bytes())
    raw[bad.position + FRAME_HEADER_BYTES + 3] ^= 0x55
    seg.write_bytes(bytes(raw))
    if drop_index:
        segment_files(d, "idx")[1].unlink()
    caplog.clear()
    log = await TopicLog.open(d, cfg=c, durability=Durability.NONE)
    assert log.next_offset == 30  # the tail is intact: nothing is truncated
    if drop_index:
        assert any(r.levelno == logging.ERROR and "damaged" in r.getMessage() for r in caplog.records)
    # Everything before the damaged frame reads; the read that reaches it fails, naming it.
    got = await log.read_async(0, 1000)
    assert got == expected[: bad.offset]
    with pytest.raises(CorruptData) as err:
        await log.read_async(bad.offset, 10)
    assert seg.name in str(err.value) and f"offset {bad.offset}" in str(err.value)
    # After the damaged segment, reads work again; so do appends.
    after = int(segment_files(d)[2].name[:20])
    assert await read_all(log, after) == expected[after:]
    assert await log.append([b"new"], [1]) == 30
    await log.aclose()


@pytest.mark.parametrize("drop_index", [False, True], ids=["index-intact", "index-rebuilt"])
def test_damage_in_a_sealed_segment_raises_corrupt_data(
    tmp_path: Path, drop_index: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    asyncio.run(_sealed_damage(tmp_path, drop_index, caplog))


@EXAMPLES
@given(data=st.data(), mode=st.sampled_from(["flip", "cut", "delete", "garbage"]))
def test_damaged_index_of_a_sealed_segment_is_rebuilt(data: st.DataObject, mode: str) -> None:
    c = cfg(segment_max_bytes=500, index_every_frames=3)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        expected = asyncio.run(_write(d, c, [25] * 40, 3))
        idx_files = segment_files(d, "idx")
        victim = data.draw(st.sampled_from(idx_files), label="index")
        raw = bytearray(victim.read_bytes())
        if mode == "flip":
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        elif mode == "cut":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif mode == "garbage":
            raw = bytearray(data.draw(st.binary(max_size=200)))
        if mode == "delete":
            victim.unlink()
        else:
            victim.write_bytes(bytes(raw))
        asyncio.run(_reopen_and_check(d, c, expected))
        for path in idx_files:
            decode_index(path.read_bytes())


def test_sealed_segment_cut_short_is_damaged_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The .idx still decodes but describes a longer file: it is not trusted, the segment is
    rescanned (the damage is reported at open), and the missing offsets raise CorruptData
    instead of vanishing."""
    caplog.set_level(logging.WARNING)

    async def scenario() -> None:
        c = cfg(segment_max_bytes=400, index_every_frames=2)
        expected = await _write(tmp_path, c, [20] * 30, 2)
        seg = segment_files(tmp_path)[0]
        frames = scan_segment_file(seg).result.frames
        with seg.open("r+b") as f:
            f.truncate(frames[-1].position + 5)
        log = await TopicLog.open(tmp_path, cfg=c, durability=Durability.NONE)
        assert any(r.levelno == logging.ERROR and seg.name in r.getMessage() for r in caplog.records)
        assert await log.read_async(0, 100) == expected[: frames[-1].offset]
        with pytest.raises(CorruptData, match=f"offset {frames[-1].offset}"):
            await log.read_async(frames[-1].offset, 100)
        assert await read_all(log, frames[-1].offset + 1) == expected[frames[-1].offset + 1 :]
        assert log.next_offset == 30
        await log.aclose()

    asyncio.run(scenario())
