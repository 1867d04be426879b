"""The SDK's PublishMux writer paces itself by what the broker says it has read.

On a scripted stream (tests.unit.sdk.test_mux_acks.ScriptedCall): the test reads the frames the
SDK wrote and answers with ``frames_read`` as a broker would, or never (a broker that does not
pace).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.mux import FRAMES_AHEAD, PublishMux
from tests.unit.sdk.test_mux_acks import ScriptedCall

pytestmark = pytest.mark.unit


async def open_mux() -> tuple[PublishMux, ScriptedCall]:
    call = ScriptedCall()
    stubs: Any = SimpleNamespace(url="broker:1", producer=SimpleNamespace(PublishMux=lambda: call))
    return PublishMux(stubs, on_end=lambda _mux: None), call


def batch(seq: int) -> pb.PublishBatch:
    return pb.PublishBatch(producer_id=1, batch_seq=seq, messages=[pb.StreamMessage(payload=b"x")])


async def written(call: ScriptedCall) -> list[int]:
    """The batch_seqs of the next frame the SDK wrote."""
    req = await asyncio.wait_for(call.written.get(), 5)
    return [b.batch_seq for b in req.batches]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_without_read_counts_the_writer_does_not_wait() -> None:
    mux, call = await open_mux()
    try:
        for seq in range(1, 3 * FRAMES_AHEAD + 1):
            await mux.send(batch(seq))
            assert await written(call) == [seq]  # a frame per batch, none held back
    finally:
        await mux.aclose()


async def test_the_writer_keeps_at_most_frames_ahead_unread_and_queued_batches_share_the_next_frame() -> None:
    mux, call = await open_mux()
    try:
        await mux.send(batch(1))
        assert await written(call) == [1]
        call.feed(pb.PublishMuxResponse(frames_read=1))  # this broker paces: frame 1 is read
        await settle()
        seq = 2
        for _ in range(FRAMES_AHEAD):  # room for FRAMES_AHEAD more unread frames
            await mux.send(batch(seq))
            assert await written(call) == [seq]
            seq += 1
        for s in range(seq, seq + 5):  # no room: these wait, queued
            await mux.send(batch(s))
        await settle()
        assert call.written.empty()
        call.feed(pb.PublishMuxResponse(frames_read=3))  # two more read: room again
        assert await written(call) == list(range(seq, seq + 5))  # all queued batches, one frame
        await settle()
        assert call.written.empty()
    finally:
        await mux.aclose()
