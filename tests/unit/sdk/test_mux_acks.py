"""The SDK's ConsumeMux acks: answered, refused, expired and abandoned, on a scripted stream.

The stream stands in for a grpc.aio bidi call: the test reads what the SDK wrote and answers
(or does not answer) as a broker would.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from danube_common.errors import DanubeError, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.mux import ConsumeMux

pytestmark = pytest.mark.unit


class ScriptedCall:
    """A bidi call: writes are queued for the test, reads return what the test feeds."""

    def __init__(self) -> None:
        self.written: asyncio.Queue[pb.ConsumeMuxRequest] = asyncio.Queue()
        self._inbox: asyncio.Queue[object] = asyncio.Queue()
        self.cancelled = False

    async def write(self, req: pb.ConsumeMuxRequest) -> None:
        await self.written.put(req)

    async def read(self) -> object:
        return await self._inbox.get()

    def feed(self, response: pb.ConsumeMuxResponse) -> None:
        self._inbox.put_nowait(response)

    def cancel(self) -> bool:
        self.cancelled = True
        self._inbox.put_nowait(grpc.aio.EOF)
        return True

    def done(self) -> bool:
        return self.cancelled

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED


async def open_mux() -> tuple[ConsumeMux, ScriptedCall]:
    call = ScriptedCall()
    stubs: Any = SimpleNamespace(url="broker:1", consumer=SimpleNamespace(ConsumeMux=lambda: call))
    return ConsumeMux(stubs, on_end=lambda _mux: None), call


async def next_ack(call: ScriptedCall) -> pb.MuxAck:
    req = await asyncio.wait_for(call.written.get(), 5)
    assert len(req.acks) == 1, req
    return req.acks[0]


def answer(call: ScriptedCall, request_id: int, error: pb.ErrorDetail | None = None) -> None:
    result = pb.MuxAckResult(request_id=request_id)
    if error is not None:
        result.error.CopyFrom(error)
    call.feed(pb.ConsumeMuxResponse(events=[pb.ConsumeMuxEvent(consumer_id=7, ack_result=result)]))


async def test_an_answered_ack_returns_and_leaves_nothing_pending() -> None:
    mux, call = await open_mux()
    try:
        task = asyncio.create_task(mux.ack(7, [3, 4], cumulative=False, timeout_s=30))
        sent = await next_ack(call)
        assert (sent.consumer_id, list(sent.topic_offsets), sent.cumulative) == (7, [3, 4], False)
        answer(call, sent.request_id)
        await asyncio.wait_for(task, 5)
        assert mux._acks == {}
    finally:
        await mux.aclose()


async def test_a_refused_ack_raises_the_brokers_error() -> None:
    mux, call = await open_mux()
    try:
        task = asyncio.create_task(mux.ack(7, [3], cumulative=False, timeout_s=30))
        sent = await next_ack(call)
        answer(
            call,
            sent.request_id,
            pb.ErrorDetail(code="SUBSCRIPTION_NOT_FOUND", grpc_code=5, message="gone", retryable=False),
        )
        with pytest.raises(DanubeError, match="gone"):
            await asyncio.wait_for(task, 5)
        assert mux._acks == {}
    finally:
        await mux.aclose()


async def test_an_unanswered_ack_expires_and_a_late_answer_is_ignored() -> None:
    mux, call = await open_mux()
    try:
        task = asyncio.create_task(mux.ack(7, [9], cumulative=True, timeout_s=0.05))
        sent = await next_ack(call)
        with pytest.raises(Unavailable, match=r"not answered within 0\.05s"):
            await asyncio.wait_for(task, 5)
        assert mux._acks == {}
        answer(call, sent.request_id)  # arrives after the expiry: nothing to resolve
        other = asyncio.create_task(mux.ack(7, [10], cumulative=False, timeout_s=30))
        second = await next_ack(call)
        answer(call, second.request_id)
        await asyncio.wait_for(other, 5)  # the stream still works
        assert mux.error is None
    finally:
        await mux.aclose()


async def test_an_abandoned_ack_cancels_its_timer() -> None:
    mux, call = await open_mux()
    loop = asyncio.get_running_loop()
    try:
        task = asyncio.create_task(mux.ack(7, [1], cumulative=False, timeout_s=0.05))
        await next_ack(call)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert mux._acks == {}
        # The expiry timer was cancelled with the wait: none of the loop's timers is live and ours.
        live = [h for h in loop._scheduled if not h.cancelled() and "_ack_expired" in repr(h)]  # type: ignore[attr-defined]
        assert live == []
    finally:
        await mux.aclose()
