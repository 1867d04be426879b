"""Multiplexed streams: one PublishMux and one ConsumeMux stream per broker, shared by every
producer and consumer of the client attached to that broker (owned by :class:`Connections`).

A *lane* is one producer's (or consumer's) view of the shared stream: it writes frames tagged
with its id and reads the frames routed to it, so the per-topic session code runs unchanged on
either a lane or its own stream. When the shared stream breaks, every lane fails with the same
retryable error and each producer/consumer reconnects through its own supervisor (the next
session opens a new shared stream). A broker that answers UNIMPLEMENTED is remembered as one
without multiplexing: :class:`MuxUnsupported` tells the session to use per-topic streams there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from danube_common.aio import LoopEvent, cancel_and_wait
from danube_common.errors import DanubeError, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.batch import error_from_detail
from danube_sdk.streams import call_error, map_stream_error

if TYPE_CHECKING:
    from danube_sdk.connection import Stubs

log = logging.getLogger(__name__)

#: Frames queued for a shared stream's writer (beyond it, writers wait: back-pressure).
OUT_QUEUE_FRAMES = 256
#: Delivery frames a consumer may be sent before it has taken them (its credit window).
CONSUMER_CREDITS = 8
#: Credits are granted back in groups of this many frames taken (fewer frames on the wire; the
#: broker still holds at least the rest of the window, so delivery never waits for a grant).
CREDIT_GRANT = CONSUMER_CREDITS // 2
#: A PublishMux request takes queued batches until it is this big.
_REQUEST_BYTES = 1024 * 1024
#: PublishMux frames written and not yet known to be read by the broker (once the broker says
#: what it has read: ``PublishMuxResponse.frames_read``; it says so at least every 2 frames, so
#: this must be at least 2). Beyond it, the writer waits and batches queue up for its next
#: frame: a busy broker reads one frame per event-loop turn, and small frames written faster
#: than that would queue up in the connection, each message waiting behind all of them.
FRAMES_AHEAD = 4
#: How long a broken shared stream's status is waited for (it says why it broke).
_STATUS_WAIT_S = 1.0


class MuxUnsupported(Unavailable):
    """The broker does not serve the multiplexed RPC: use per-topic streams there."""


def detail_error(detail: pb.ErrorDetail, fallback: str) -> DanubeError:
    """The error an in-band ErrorDetail stands for (an empty one: a plain retryable end)."""
    if not detail.code:
        return Unavailable(fallback)
    err = error_from_detail(detail)
    if detail.redirect and err.redirect is None:
        err.redirect = detail.redirect
    if detail.retryable and not err.retryable:
        err = Unavailable(f"{err.message} [{err.code}]", redirect=err.redirect)
    return err


class _Lane:
    """Frames routed to one id, and the error that ended the lane."""

    def __init__(self, close: Callable[[_Lane], None]) -> None:
        self._events: collections.deque[object] = collections.deque()
        self._wake = LoopEvent()
        self.error: DanubeError | None = None
        self._close = close

    def deliver(self, event: object) -> None:
        self._events.append(event)
        self._wake.set()

    def fail(self, err: DanubeError) -> None:
        if self.error is None:
            self.error = err
            self._wake.set()

    async def _next(self) -> object:
        while True:
            if self._events:
                return self._events.popleft()
            if self.error is not None:
                raise self.error
            self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        self._close(self)


class _Shared:
    """A shared bidi stream: one writer task, one reader task, lanes by id."""

    kind = ""

    def __init__(
        self, url: str, open_call: Callable[[], grpc.aio.StreamStreamCall], on_end: Callable[[_Shared], None]
    ) -> None:
        self.url = url
        self._open = open_call
        self._call = open_call()
        #: Something arrived on the stream (so the server serves it).
        self._received = False
        self._on_end = on_end
        self.lanes: dict[int, _Lane] = {}
        self.error: DanubeError | None = None
        self._task = asyncio.create_task(self._run(), name=f"danube-{self.kind}-mux {url}")

    @property
    def what(self) -> str:
        return f"{self.kind} mux stream to {self.url}"

    async def _run(self) -> None:
        reader = asyncio.create_task(self._read_loop(), name=f"{self.what} read")
        writer = asyncio.create_task(self._write_loop(), name=f"{self.what} write")
        err: DanubeError = Unavailable(f"{self.what}: closed")
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_EXCEPTION)
            if not reader.done():
                # A failed write says only that the call is over: the reader learns the status.
                await asyncio.wait({reader}, timeout=_STATUS_WAIT_S)
            exc = next((t.exception() for t in (reader, writer) if t.done() and t.exception()), None)
            err = await self._map(exc)
        finally:
            try:
                await cancel_and_wait(reader, writer)
            finally:  # also when this task is cancelled meanwhile (aclose)
                self._call.cancel()
                self._end(err)

    async def _map(self, exc: BaseException | None) -> DanubeError:
        """The error the shared stream ended with (MuxUnsupported for UNIMPLEMENTED). The
        call's status comes first: a write that raced the server's answer fails as INTERNAL."""
        code = None
        with contextlib.suppress(TimeoutError, grpc.aio.AioRpcError):
            code = await asyncio.wait_for(self._call.code(), _STATUS_WAIT_S)
        if code is None and isinstance(exc, grpc.aio.AioRpcError):
            code = exc.code()
        if code == grpc.StatusCode.INTERNAL and not self._received and await self._unimplemented():
            code = grpc.StatusCode.UNIMPLEMENTED
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return MuxUnsupported(f"{self.url} does not serve the {self.kind} mux")
        if self._call.done():
            return await call_error(self._call, self.what)
        return map_stream_error(exc, self.what) if exc is not None else Unavailable(f"{self.what}: ended")

    async def _unimplemented(self) -> bool:
        """Does the server answer UNIMPLEMENTED to a call that sends nothing? (A write racing
        that answer fails the call as INTERNAL instead; a serving broker just waits.)"""
        call = self._open()
        try:
            return await asyncio.wait_for(call.code(), _STATUS_WAIT_S) == grpc.StatusCode.UNIMPLEMENTED
        except TimeoutError:
            return False
        finally:
            call.cancel()

    def _end(self, err: DanubeError) -> None:
        if self.error is not None:
            return
        self.error = err
        log.debug("%s ended: %s", self.what, err)
        for lane in list(self.lanes.values()):
            lane.fail(err)
        self.lanes.clear()
        self._fail_pending(err)
        self._on_end(self)

    def _fail_pending(self, err: DanubeError) -> None:
        pass

    async def _read_loop(self) -> None:
        while True:
            event = await self._call.read()
            if event is grpc.aio.EOF:
                raise _Eof()
            self._received = True
            self._route(event)

    def _route(self, event: object) -> None:
        raise NotImplementedError

    async def _write_loop(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        exc = await cancel_and_wait(self._task)
        if exc is not None:
            raise exc


class _Eof(Exception):
    """The server ended the shared stream."""


# ---------------------------------------------------------------------- publish


class PublishLane(_Lane):
    def __init__(self, mux: PublishMux, producer_id: int, session: int) -> None:
        super().__init__(mux.unbind)
        self.producer_id = producer_id
        self.session = session
        self._mux = mux

    async def write(self, frame: pb.PublishBatch) -> None:
        if self.error is not None:
            raise self.error
        frame.session = self.session
        await self._mux.send(frame)

    async def read(self) -> pb.PublishAck:
        ack = await self._next()
        assert isinstance(ack, pb.PublishAck)
        return ack


class PublishMux(_Shared):
    """The client's PublishMux stream to one broker."""

    kind = "publish"

    def __init__(self, stubs: Stubs, on_end: Callable[[_Shared], None]) -> None:
        self._out: asyncio.Queue[pb.PublishBatch] = asyncio.Queue(OUT_QUEUE_FRAMES)
        self._frames_sent = 0
        #: Frames the broker said it has read (None: it never said, so it does not pace us).
        self._frames_read: int | None = None
        self._read_moved = LoopEvent()
        super().__init__(stubs.url, stubs.producer.PublishMux, on_end)

    def bind(self, producer_id: int, session: int) -> PublishLane:
        if self.error is not None:
            raise self.error
        old = self.lanes.get(producer_id)
        if old is not None:
            old.fail(Unavailable(f"producer {producer_id} was bound again on {self.what}"))
        lane = PublishLane(self, producer_id, session)
        self.lanes[producer_id] = lane
        return lane

    def unbind(self, lane: _Lane) -> None:
        assert isinstance(lane, PublishLane)
        if self.lanes.get(lane.producer_id) is lane:
            del self.lanes[lane.producer_id]

    async def send(self, frame: pb.PublishBatch) -> None:
        if self.error is not None:
            raise self.error
        await self._out.put(frame)

    async def _write_loop(self) -> None:
        """One request per write, carrying every batch queued by then (up to a size); at most
        FRAMES_AHEAD written and not yet read by a broker that says what it read."""
        out = self._out
        while True:
            first = await out.get()
            while self._frames_read is not None and self._frames_sent - self._frames_read >= FRAMES_AHEAD:
                self._read_moved.clear()
                await self._read_moved.wait()  # batches queued meanwhile go into this frame
            req = pb.PublishMuxRequest()
            req.batches.append(first)
            size = first.ByteSize()
            while not out.empty() and size < _REQUEST_BYTES:
                b = out.get_nowait()
                req.batches.append(b)
                size += b.ByteSize()
            await self._call.write(req)
            self._frames_sent += 1

    def _route(self, response: object) -> None:
        assert isinstance(response, pb.PublishMuxResponse)
        if response.frames_read:
            self._frames_read = response.frames_read
            self._read_moved.set()
        for ack in response.acks:
            self._route_ack(ack)

    def _route_ack(self, event: pb.PublishAck) -> None:
        lane = self.lanes.get(event.producer_id)
        if lane is None:
            return  # a producer that left the stream: its answers are moot
        if event.batch_seq == 0 and event.HasField("error"):
            # The producer is detached here (topic moved, broker stopping): only this lane ends.
            del self.lanes[event.producer_id]
            lane.fail(detail_error(event.error, f"producer {event.producer_id} detached"))
            return
        lane.deliver(event)


# ---------------------------------------------------------------------- consume


class ConsumeLane(_Lane):
    def __init__(self, mux: ConsumeMux, consumer_id: int) -> None:
        super().__init__(mux.detach)
        self.consumer_id = consumer_id
        self._mux = mux

    async def read(self) -> pb.MessageBatch:
        """The next delivery frame; the caller grants the credit back with :meth:`taken`."""
        frame = await self._next()
        assert isinstance(frame, pb.MessageBatch)
        return frame

    def taken(self) -> None:
        if self.error is None:
            self._mux.credit(self.consumer_id)

    async def ack(self, offsets: list[int], *, cumulative: bool, timeout_s: float) -> None:
        if self.error is not None:
            raise self.error
        await self._mux.ack(self.consumer_id, offsets, cumulative=cumulative, timeout_s=timeout_s)


class ConsumeMux(_Shared):
    """The client's ConsumeMux stream to one broker: attaches, credits and acks of all its
    consumers there are coalesced into as few frames as the writer can send."""

    kind = "consume"

    def __init__(self, stubs: Stubs, on_end: Callable[[_Shared], None]) -> None:
        self._pending = pb.ConsumeMuxRequest()
        self._credits: dict[int, int] = {}
        self._has_pending = LoopEvent()
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._next_ack = 0
        self._loop = asyncio.get_running_loop()
        super().__init__(stubs.url, stubs.consumer.ConsumeMux, on_end)

    def attach(self, consumer_id: int, *, max_messages_per_frame: int) -> ConsumeLane:
        if self.error is not None:
            raise self.error
        old = self.lanes.get(consumer_id)
        if old is not None:
            old.fail(Unavailable(f"consumer {consumer_id} was attached again on {self.what}"))
        lane = ConsumeLane(self, consumer_id)
        self.lanes[consumer_id] = lane
        self._credits.pop(consumer_id, None)
        if consumer_id in self._pending.detach:  # the old lane's detach must not follow this attach
            kept = [c for c in self._pending.detach if c != consumer_id]
            del self._pending.detach[:]
            self._pending.detach.extend(kept)
        self._pending.attach.add(
            consumer_id=consumer_id, max_messages_per_frame=max_messages_per_frame, credits=CONSUMER_CREDITS
        )
        self._has_pending.set()
        return lane

    def detach(self, lane: _Lane) -> None:
        assert isinstance(lane, ConsumeLane)
        if self.lanes.get(lane.consumer_id) is lane:
            del self.lanes[lane.consumer_id]
            self._credits.pop(lane.consumer_id, None)
            if self.error is None:
                self._pending.detach.append(lane.consumer_id)
                self._has_pending.set()

    def credit(self, consumer_id: int) -> None:
        if consumer_id in self.lanes:
            n = self._credits.get(consumer_id, 0) + 1
            self._credits[consumer_id] = n
            if n >= CREDIT_GRANT:
                self._has_pending.set()

    async def ack(self, consumer_id: int, offsets: list[int], *, cumulative: bool, timeout_s: float) -> None:
        if self.error is not None:
            raise self.error
        self._next_ack += 1
        rid = self._next_ack
        loop = self._loop
        fut: asyncio.Future[None] = loop.create_future()
        self._acks[rid] = fut
        self._pending.acks.add(
            request_id=rid, consumer_id=consumer_id, topic_offsets=offsets, cumulative=cumulative
        )
        self._has_pending.set()
        # A plain timer, not asyncio.timeout: no task cancellation on expiry, and no getpid()
        # system call per ack (asyncio.timeout asks for the running loop; CPython 3.11).
        timer = loop.call_later(timeout_s, self._ack_expired, rid, timeout_s)
        try:
            await fut
        finally:
            timer.cancel()
            self._acks.pop(rid, None)

    def _ack_expired(self, rid: int, timeout_s: float) -> None:
        fut = self._acks.get(rid)
        if fut is not None and not fut.done():
            fut.set_exception(Unavailable(f"ack on {self.what} not answered within {timeout_s:g}s"))

    def _fail_pending(self, err: DanubeError) -> None:
        for fut in self._acks.values():
            if not fut.done():
                fut.set_exception(err)
        self._acks.clear()

    async def _write_loop(self) -> None:
        while True:
            await self._has_pending.wait()
            self._has_pending.clear()
            req, self._pending = self._pending, pb.ConsumeMuxRequest()
            for cid, frames in list(self._credits.items()):
                if frames >= CREDIT_GRANT:  # smaller grants ride along later
                    req.credits.add(consumer_id=cid, frames=frames)
                    del self._credits[cid]
            await self._call.write(req)

    def _route(self, response: object) -> None:
        assert isinstance(response, pb.ConsumeMuxResponse)
        for event in response.events:
            self._route_event(event)

    def _route_event(self, event: pb.ConsumeMuxEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "ack_result":
            fut = self._acks.get(event.ack_result.request_id)
            if fut is not None and not fut.done():
                if event.ack_result.HasField("error"):
                    fut.set_exception(detail_error(event.ack_result.error, "ack refused"))
                else:
                    fut.set_result(None)
            return
        lane = self.lanes.get(event.consumer_id)
        if lane is None:
            return
        if kind == "delivery":
            lane.deliver(event.delivery)
        elif kind == "closed":
            del self.lanes[event.consumer_id]
            lane.fail(detail_error(event.closed, f"consumer {event.consumer_id} detached from {self.what}"))
