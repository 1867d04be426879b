"""ConsumeMux: one delivery stream for many consumers of one client connection.

One task serves the stream: it reads client frames (attach, detach, credits, acks) and writes
server frames (deliveries tagged with the consumer id, a consumer's end on the stream, ack
results). Each attached consumer has a delivery session as on ReceiveBatches
(:meth:`Consumer.open_stream`), whose wake-ups put the consumer in the *ready* round: the
writer sends at most one frame per ready consumer per round, so a busy consumer does not
starve the others.

Flow control is per consumer, by credits: one credit lets the broker send one frame, and the
client grants more as it drains that consumer. A consumer without credits is skipped; its
messages wait in its own bounded queue (and on reliable topics in its unacked window), which
back-pressures its dispatch as a slow ReceiveBatches stream does. The stream as a whole is
bounded by HTTP/2 flow control: a client that reads nothing stalls every consumer on the
stream (they share the connection, and each consumer's queue then fills and holds its
dispatch back); credits keep a client that drains only *some* consumers from stalling the
others.

Control answers (ack results, refusals of unknown ids) are queued up to ``control_limit``;
beyond that the stream reads no further client frame until they are sent.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from opentelemetry.trace import Span

from danube_broker import tracing as broker_tracing
from danube_broker.consumer import Consumer, StreamSession
from danube_broker.dispatch.base import Msg
from danube_broker.mux import error_detail
from danube_broker.registry import BrokerRegistry
from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.observability import tracing
from danube_common.pb import DanubeApi_pb2 as pb

#: A delivery frame is split above this size (a response then carries it alone).
_FRAME_SPLIT_BYTES = 4 * 1024 * 1024
#: Credits of a consumer attached with none asked for.
DEFAULT_CREDITS = 4


@dataclass(eq=False)
class _Attached:
    consumer: Consumer
    session: StreamSession
    per_frame: int
    credits: int


def delivery_frames(cid: int, batch: list[Msg], limit_bytes: int) -> list[pb.ConsumeMuxEvent]:
    """One delivery event, or several if one would pass ``limit_bytes``."""
    event = pb.ConsumeMuxEvent(consumer_id=cid)
    event.delivery.messages.extend(batch)
    if len(batch) == 1 or event.ByteSize() <= limit_bytes:
        return [event]
    half = len(batch) // 2
    return delivery_frames(cid, batch[:half], limit_bytes) + delivery_frames(cid, batch[half:], limit_bytes)


def round_of(ready: collections.deque[int]) -> list[int]:
    """The consumers served in this round: those ready now (later wake-ups wait a round)."""
    return [ready.popleft() for _ in range(len(ready))]


class ConsumeMux:
    def __init__(
        self,
        reg: BrokerRegistry,
        *,
        max_messages_per_frame: int,
        frame_limit_bytes: int,
        control_limit: int = 1024,
        on_open_close: Callable[[int], None] | None = None,
    ) -> None:
        self._reg = reg
        self._limit = max_messages_per_frame
        self._frame_limit_bytes = frame_limit_bytes
        self._control_limit = control_limit
        self._on_open_close = on_open_close
        self._attached: dict[int, _Attached] = {}
        self._ready: collections.deque[int] = collections.deque()
        self._ready_set: set[int] = set()
        self._control: collections.deque[pb.ConsumeMuxEvent] = collections.deque()
        self._loop = asyncio.get_running_loop()
        self._wake: asyncio.Future[None] = self._loop.create_future()
        #: Set when the control queue is sent while the reader waits for room in it.
        self._has_room: asyncio.Future[None] | None = None

    def _kick(self, _task: object = None) -> None:
        if not self._wake.done():
            self._wake.set_result(None)

    def _poke(self, cid: int) -> None:
        a = self._attached.get(cid)
        if a is None or (a.credits <= 0 and not a.session.ended):
            return
        if cid not in self._ready_set:
            self._ready_set.add(cid)
            self._ready.append(cid)
        if not self._wake.done():
            self._wake.set_result(None)

    # ---- client frames (no awaits)
    def _handle(self, req: pb.ConsumeMuxRequest) -> None:
        for cid in req.detach:  # before the attaches: a frame may detach and re-attach an id
            a = self._attached.pop(cid, None)
            if a is not None:
                self._reg.stream_closed(a.consumer, a.session)
        for att in req.attach:
            self._attach(att)
        for credit in req.credits:
            a = self._attached.get(credit.consumer_id)
            if a is not None:
                a.credits += credit.frames
                if len(a.consumer.queue):
                    self._poke(credit.consumer_id)
        for ack in req.acks:
            self._ack(ack)

    def _attach(self, att: pb.MuxAttach) -> None:
        cid = att.consumer_id
        old = self._attached.pop(cid, None)
        if old is not None:
            self._reg.stream_closed(old.consumer, old.session)
        try:
            consumer = self._reg.consumer_for_stream(cid)
        except DanubeError as exc:
            self._control.append(pb.ConsumeMuxEvent(consumer_id=cid, closed=error_detail(exc)))
            return
        per_frame = min(att.max_messages_per_frame or self._limit, self._limit)
        credits = att.credits or DEFAULT_CREDITS
        session = consumer.open_stream(notify=functools.partial(self._poke, cid))
        self._attached[cid] = _Attached(consumer, session, per_frame, credits)
        if len(consumer.queue):
            self._poke(cid)

    def _ack(self, ack: pb.MuxAck) -> None:
        result = pb.MuxAckResult(request_id=ack.request_id)
        try:
            consumer = self._reg.consumer(ack.consumer_id)
            self._reg.ack(
                consumer.topic_name,
                consumer.subscription.name,
                list(ack.topic_offsets),
                cumulative=ack.cumulative,
            )
        except DanubeError as exc:
            result.error.CopyFrom(error_detail(exc))
        self._control.append(pb.ConsumeMuxEvent(consumer_id=ack.consumer_id, ack_result=result))

    # ---- server frames
    def _take(self, cid: int) -> tuple[_Attached, list[Msg]] | pb.ConsumeMuxEvent | None:
        """The next frame's messages for ``cid``, or its end event, or None (nothing now)."""
        a = self._attached.get(cid)
        if a is None:
            return None
        try:
            batch = a.consumer.poll_batch(a.session, a.per_frame)
        except DanubeError as exc:
            self._end(cid, a)
            return pb.ConsumeMuxEvent(consumer_id=cid, closed=error_detail(exc))
        if batch is None:
            self._end(cid, a)
            return pb.ConsumeMuxEvent(consumer_id=cid, closed=pb.ErrorDetail())
        if not batch:
            return None
        a.credits -= 1
        return a, batch

    def _end(self, cid: int, a: _Attached) -> None:
        self._attached.pop(cid, None)
        self._reg.stream_closed(a.consumer, a.session)

    async def run(
        self, requests: AsyncIterator[pb.ConsumeMuxRequest]
    ) -> AsyncIterator[pb.ConsumeMuxResponse]:
        """One response per round (more when a round passes the frame limit). Client frames
        are read and handled by a reader task of their own, so reading goes on while a response
        is being written (as on PublishMux)."""
        reader = self._loop.create_task(self._read(aiter(requests)), name="consume-mux-read")
        reader.add_done_callback(self._kick)
        if self._on_open_close is not None:
            self._on_open_close(1)
        try:
            while True:
                if self._wake.done():
                    self._wake = self._loop.create_future()
                out = pb.ConsumeMuxResponse()
                out.events.extend(self._control)
                self._control.clear()
                if self._has_room is not None and not self._has_room.done():
                    self._has_room.set_result(None)
                size = out.ByteSize()
                spans: list[Span] = []  # of the deliveries in ``out``: ended once it is sent
                try:
                    for cid in round_of(self._ready):
                        self._ready_set.discard(cid)
                        taken = self._take(cid)
                        if taken is None:
                            continue
                        if isinstance(taken, pb.ConsumeMuxEvent):
                            out.events.append(taken)
                            continue
                        a, batch = taken
                        if tracing.ENABLED:
                            c = a.consumer
                            spans += (
                                broker_tracing.start_deliveries(
                                    c.topic_name, c.subscription.name, c.name, batch
                                )
                                or []
                            )
                        for frame in self._frames_of(cid, a, batch):
                            n = frame.ByteSize()
                            if out.events and size + n > self._frame_limit_bytes:
                                yield out
                                broker_tracing.end_all(spans)
                                out, size, spans = pb.ConsumeMuxResponse(), 0, []
                            out.events.append(frame)
                            size += n
                        if a.credits > 0 and len(a.consumer.queue) and cid in self._attached:
                            self._poke(cid)  # to the back of the next round
                    if out.events:
                        yield out
                finally:  # also when the client ends the stream as the frame goes out
                    broker_tracing.end_all(spans)
                if reader.done():
                    reader.result()  # the stream broke: raise why
                    if not self._control:
                        return  # the client ended the stream and everything it asked is answered
                    continue  # answers to the client's last frames, added while ``out`` was sent
                await self._wake  # set by a poke, or by the reader handling a frame or ending
        finally:
            if self._on_open_close is not None:
                self._on_open_close(-1)
            for cid, a in list(self._attached.items()):
                self._end(cid, a)
            await cancel_and_wait(reader)

    async def _read(self, it: AsyncIterator[pb.ConsumeMuxRequest]) -> None:
        """Handle every client frame as it arrives, while the control queue has room."""
        async for req in it:
            self._handle(req)
            if self._control:
                self._kick()
            while len(self._control) >= self._control_limit:
                self._has_room = self._loop.create_future()
                await self._has_room

    @staticmethod
    def _frames_of(cid: int, a: _Attached, batch: list[Msg]) -> list[pb.ConsumeMuxEvent]:
        frames = delivery_frames(cid, batch, _FRAME_SPLIT_BYTES)
        for start, end in a.consumer.take_skipped():
            frames[0].delivery.skipped.add(start_offset=start, next_offset=end)
        return frames
