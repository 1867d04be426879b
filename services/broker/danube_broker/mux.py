"""PublishMux: one publish stream carrying the batches of many producers (one client connection).

Each client frame carries any number of batches (of any producers) and each server frame every
ack and event ready at that moment, so the small batches of many topics share HTTP/2 messages.

Server frames also carry how many client frames have been read (``frames_read``, at least every
READ_REPORT_EVERY frames): the SDK keeps only a few frames written and unread, so that what it
queues meanwhile goes into its next frame. Otherwise a client writing many small frames fills
the connection faster than a busy broker reads them (one frame per event-loop turn), and each
message waits behind all of them (at 1,000 topics, 100-600 ms of the publish latency).

One task serves the stream's answers, one reads its frames. A reliable batch that needs no
waiting is queued in the WAL as its frame is read and answered from the commit's callback
(``BrokerRegistry.publish_now``: no task, no coroutine chain, two event-loop turns fewer from
commit to ack); any other batch is published by a task of its own as on PublishBatches, and
the lane's later batches take one too until it is answered (none overtakes it to the log).
Each producer seen on the stream has a *lane*: its batches in flight, in arrival order, and
its order guard (:class:`PublishStream`). Acks leave a lane in order; lanes
are independent, so a slow topic does not hold back another's acks. The stream as a whole is
bounded: at most ``depth`` batches and ``max_bytes`` encoded bytes in flight, beyond which it
reads nothing more (back-pressure through HTTP/2 flow control).

Order and refusals per producer are exactly those of PublishBatches: a lane keeps one order
guard per client *session* (``PublishBatch.session``), so after a retryable refusal every later
batch of that producer in the session is refused, until the client starts a new session and
re-sends in order. Only a refusal that stored nothing (too large, invalid payload, storage
error) is a batch's in-band answer, as on PublishBatches. Any other error (topic moved or closed
while the batch waited for object storage, lease uncertain, ...) may come after the batch was
stored: it *ends the producer's lane* as it would end a PublishBatches stream. The batch and every
later one of the lane go unanswered, the producer gets the detach event with that error, and the
client re-sends them all with their sequence ids (an idempotent producer's copies are dropped);
batches of that producer and session still arriving are refused in-band (nothing stored). A producer detached while on the stream (topic moved or unloaded, broker
stopping) has its batches in flight answered, then one event (a PublishAck with its id,
``batch_seq`` 0 and the detach error) and its lane is dropped; the stream goes on. A batch for
an unknown producer id is answered in-band with the error the id lookup gives (UNAVAILABLE for
an id not attached: the client creates the producer again). A frame with ``batch_seq`` 0 and
no messages binds its producer to the stream without being answered: a producer on an open
stream does not expire while idle, as with an open PublishBatches stream.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from danube_broker.dispatch.base import Msg, PublishResult, PublishStream
from danube_broker.producer import Producer
from danube_broker.registry import BrokerRegistry
from danube_broker.wal import StorageError
from danube_common.aio import cancel_and_wait
from danube_common.errors import (
    DanubeError,
    InvalidPayload,
    MessageTooLarge,
    ProducerNotFound,
    QuotaExceeded,
    Unavailable,
)
from danube_common.pb import DanubeApi_pb2 as pb

#: The broker tells the client how many frames it has read (``PublishMuxResponse.frames_read``)
#: at least every this many frames, with acks or on its own. The client keeps at most a few
#: frames unread (danube_sdk.mux.FRAMES_AHEAD, which must be at least this).
READ_REPORT_EVERY = 2


def error_detail(err: DanubeError) -> pb.ErrorDetail:
    return pb.ErrorDetail(
        code=err.code,
        grpc_code=err.grpc_status.value[0],
        message=err.message,
        retryable=err.retryable,
        redirect=err.redirect or "",
    )


def publish_ack(batch_seq: int, result: PublishResult) -> pb.PublishAck:
    ack = pb.PublishAck(batch_seq=batch_seq, first_offset=result.first_offset, count=result.count)
    if result.offsets is not None:
        ack.offsets.extend(result.offsets)
        ack.duplicates = result.duplicates
    return ack


#: Refusals that stored nothing: a batch's in-band answer (any other error ends the lane).
IN_BAND = (MessageTooLarge, InvalidPayload, StorageError, QuotaExceeded)


async def publish_one(
    reg: BrokerRegistry, producer: Producer, batch: pb.PublishBatch, guard: PublishStream
) -> pb.PublishAck:
    """Publish one batch; a refusal of the batch (nothing of it stored) is the ack's error."""
    msgs: list[Msg] = list(batch.messages)
    try:
        nbytes = reg.payload_bytes(msgs)
        result = await reg.publish(producer, msgs, nbytes, stream=guard)
    except IN_BAND as exc:
        return pb.PublishAck(batch_seq=batch.batch_seq, error=error_detail(exc))
    return publish_ack(batch.batch_seq, result)


@dataclass(eq=False)
class _Lane:
    """One producer on the stream."""

    producer: Producer
    session: int
    guard: PublishStream = field(default_factory=PublishStream)
    #: (answer, encoded size) in arrival order; the answer is a publish task or a done future.
    inflight: collections.deque[tuple[asyncio.Future[pb.PublishAck], int]] = field(
        default_factory=collections.deque
    )
    #: Registered in ``producer.detach_watchers`` while the lane exists.
    watcher: Callable[[], None] | None = None
    #: Batches of the lane published by a task (not ``publish_now``): later ones take a task
    #: too until they are answered, so none overtakes them on the way to the log.
    slow: int = 0


def lane_session(current: int, incoming: int) -> tuple[int, bool]:
    """The lane's session after a batch of session ``incoming``, and whether it starts a fresh
    order guard (a higher session does; an older or equal one keeps the current guard)."""
    if incoming > current:
        return incoming, True
    return current, False


class PublishMux:
    """Serves one PublishMux stream: :meth:`run` yields the acks and events to send."""

    def __init__(
        self,
        reg: BrokerRegistry,
        *,
        depth: int,
        max_bytes: int,
        on_open_close: Callable[[int], None] | None = None,
    ) -> None:
        self._reg = reg
        self._depth = depth
        self._max_bytes = max_bytes
        self._on_open_close = on_open_close
        self._lanes: dict[int, _Lane] = {}
        #: Producers whose lane ended on an error of unknown outcome -> the session it ended in.
        self._ended: dict[int, int] = {}
        #: Lanes that may have something to send (an answer finished, or detached).
        self._ready: collections.deque[int] = collections.deque()
        self._ready_set: set[int] = set()
        #: Answers for ids with no lane (unknown producers), in arrival order.
        self._direct: collections.deque[pb.PublishAck] = collections.deque()
        self._count = 0
        self._bytes = 0
        #: The stream's loop (asyncio.get_running_loop() is a getpid() system call per call on
        #: CPython 3.11: the hot paths here ask once).
        self._loop = asyncio.get_running_loop()
        self._wake: asyncio.Future[None] = self._loop.create_future()
        #: Set when answers leave the stream while the reader waits for room.
        self._has_room: asyncio.Future[None] | None = None
        #: Client frames read, and the count last told the client (``frames_read``).
        self._frames_read = 0
        self._frames_told = 0

    # ---- wake-ups (callbacks: no awaits)
    def _kick(self, _task: object = None) -> None:
        if not self._wake.done():
            self._wake.set_result(None)

    def _poke(self, producer_id: int) -> None:
        if producer_id not in self._ready_set:
            self._ready_set.add(producer_id)
            self._ready.append(producer_id)
        if not self._wake.done():
            self._wake.set_result(None)

    def _room(self) -> bool:
        return self._count < self._depth and self._bytes < self._max_bytes

    def _freed(self) -> None:
        """Answers left the stream: a reader waiting for room reads on (if there is some now)."""
        if self._has_room is not None and not self._has_room.done() and self._room():
            self._has_room.set_result(None)

    # ---- admission
    def _admit(self, batch: pb.PublishBatch) -> None:
        pid = batch.producer_id
        lane = self._lanes.get(pid)
        ended = self._ended.get(pid)
        if lane is None and ended is not None and batch.session <= ended:
            if batch.batch_seq or batch.messages:  # sent before the client saw the lane end
                err = Unavailable(f"producer {pid}: its publishing on this stream ended; re-send after it")
                self._direct.append(
                    pb.PublishAck(producer_id=pid, batch_seq=batch.batch_seq, error=error_detail(err))
                )
            return
        if lane is None:
            try:
                producer = self._reg.producer(pid)
            except ProducerNotFound as exc:
                # Retryable here, as for delivery streams: the client creates the producer again.
                err = Unavailable(exc.message)
                self._direct.append(
                    pb.PublishAck(producer_id=pid, batch_seq=batch.batch_seq, error=error_detail(err))
                )
                return
            except DanubeError as exc:
                self._direct.append(
                    pb.PublishAck(producer_id=pid, batch_seq=batch.batch_seq, error=error_detail(exc))
                )
                return
            lane = _Lane(producer, batch.session, watcher=functools.partial(self._poke, pid))
            self._lanes[pid] = lane
            self._reg.publish_stream_opened(producer)
            assert lane.watcher is not None
            producer.detach_watchers.add(lane.watcher)
            if not producer.live:
                self._poke(pid)
        else:
            lane.session, fresh = lane_session(lane.session, batch.session)
            if fresh:
                lane.guard = PublishStream()
        if batch.batch_seq == 0 and not batch.messages:
            return  # a bind frame: the producer is on the stream now (attached while idle)
        size = batch.ByteSize()
        answer: asyncio.Future[pb.PublishAck]
        if not lane.producer.live:
            answer = self._loop.create_future()
            answer.set_result(
                pb.PublishAck(batch_seq=batch.batch_seq, error=error_detail(_gone(lane.producer)))
            )
            self._poke(pid)
        else:
            fast = self._publish_now(pid, lane, batch)
            if fast is not None:
                answer = fast
            else:
                lane.slow += 1
                answer = self._loop.create_task(self._publish(lane.producer, batch, lane.guard))
                answer.add_done_callback(functools.partial(self._slow_done, pid, lane))
        lane.inflight.append((answer, size))
        self._count += 1
        self._bytes += size

    def _publish_now(
        self, pid: int, lane: _Lane, batch: pb.PublishBatch
    ) -> asyncio.Future[pb.PublishAck] | None:
        """The batch's answer, published without a task (see ``BrokerRegistry.publish_now``);
        None when it needs one."""
        if lane.slow:
            return None
        msgs: list[Msg] = list(batch.messages)
        try:
            nbytes = self._reg.payload_bytes(msgs)
        except DanubeError:
            return None  # the task refuses it
        answer: asyncio.Future[pb.PublishAck] = self._loop.create_future()
        done = functools.partial(self._answered, pid, batch.batch_seq, lane.guard, answer)
        if not self._reg.publish_now(lane.producer, msgs, nbytes, lane.guard, done):
            return None
        return answer

    def _answered(
        self,
        pid: int,
        batch_seq: int,
        guard: PublishStream,
        answer: asyncio.Future[pb.PublishAck],
        result: PublishResult | None,
        error: BaseException | None,
    ) -> None:
        """A ``publish_now`` batch's outcome, answered as the task would (:meth:`_publish`)."""
        if not answer.done():  # else: its lane ended meanwhile
            if error is None:
                assert result is not None
                answer.set_result(publish_ack(batch_seq, result))
            elif isinstance(error, IN_BAND):
                answer.set_result(pb.PublishAck(batch_seq=batch_seq, error=error_detail(error)))
            else:
                if isinstance(error, DanubeError):
                    guard.refused = True
                answer.set_exception(error)
        self._poke(pid)

    def _slow_done(self, pid: int, lane: _Lane, _answer: object) -> None:
        lane.slow -= 1
        self._poke(pid)

    async def _publish(
        self, producer: Producer, batch: pb.PublishBatch, guard: PublishStream
    ) -> pb.PublishAck:
        """As on PublishBatches; an error that would end a PublishBatches stream (the batch may
        be stored) is raised: it ends this producer's lane (see the module doc). Later batches
        of the session are refused meanwhile, as after any failure."""
        try:
            return await publish_one(self._reg, producer, batch, guard)
        except DanubeError:
            guard.refused = True
            raise

    # ---- answers
    def _drain(self) -> list[pb.PublishAck]:
        """Everything that can be sent now: direct answers, then ready lanes in turn."""
        out = list(self._direct)
        self._direct.clear()
        while self._ready:
            pid = self._ready.popleft()
            self._ready_set.discard(pid)
            lane = self._lanes.get(pid)
            if lane is None:
                continue
            while lane.inflight and lane.inflight[0][0].done():
                answer, size = lane.inflight.popleft()
                self._count -= 1
                self._bytes -= size
                failure = _outcome_unknown(answer)
                if failure is not None:
                    out.append(pb.PublishAck(producer_id=pid, error=error_detail(failure)))
                    self._end_lane(pid, lane)
                    break
                ack = answer.result()
                ack.producer_id = pid
                out.append(ack)
            else:
                if not lane.producer.live and not lane.inflight:
                    out.append(pb.PublishAck(producer_id=pid, error=error_detail(_gone(lane.producer))))
                    self._drop(pid, lane)
        self._freed()
        return out

    def _end_lane(self, pid: int, lane: _Lane) -> None:
        """The lane's publishing ended with an outcome unknown to the client: its batches still in
        flight go unanswered (their tasks are cancelled: what they stored stays stored, and the
        client's re-send of it is deduplicated)."""
        for answer, size in lane.inflight:
            self._count -= 1
            self._bytes -= size
            if not answer.done():
                answer.cancel()
            elif not answer.cancelled():
                answer.exception()  # seen: it goes unanswered on purpose
        lane.inflight.clear()
        self._ended[pid] = lane.session
        self._drop(pid, lane)

    def _drop(self, pid: int, lane: _Lane) -> None:
        self._lanes.pop(pid, None)
        if lane.watcher is not None:
            lane.producer.detach_watchers.discard(lane.watcher)
            lane.watcher = None
        self._reg.publish_stream_closed(lane.producer)

    # ---- the loop
    async def run(
        self, requests: AsyncIterator[pb.PublishMuxRequest]
    ) -> AsyncIterator[pb.PublishMuxResponse]:
        """One response per wake-up, carrying every ack and event ready then, and the count of
        frames read (also on its own, every READ_REPORT_EVERY frames: the client paces its
        writes by it). Frames are read and admitted by a reader task of their own, so reading
        goes on while a response is being written (a read costs an event-loop round trip: done
        one after the other with the writes, they would bound the stream's frame rate)."""
        reader = self._loop.create_task(self._read(aiter(requests)), name="publish-mux-read")
        reader.add_done_callback(self._kick)
        if self._on_open_close is not None:
            self._on_open_close(1)
        try:
            while True:
                if self._wake.done():
                    self._wake = self._loop.create_future()
                acks = self._drain()
                if acks or self._frames_read - self._frames_told >= READ_REPORT_EVERY:
                    self._frames_told = self._frames_read
                    # Pokes and reads meanwhile complete the new wake.
                    yield pb.PublishMuxResponse(acks=acks, frames_read=self._frames_read)
                if reader.done():
                    reader.result()  # the stream broke: raise why
                    if self._count == 0 and not self._direct:
                        return
                await self._wake  # set by a poke, or by the reader admitting or ending
        finally:
            if self._on_open_close is not None:
                self._on_open_close(-1)
            tasks: list[asyncio.Future[Any]] = [a for lane in self._lanes.values() for a, _ in lane.inflight]
            tasks.append(reader)
            for lane_pid, lane in list(self._lanes.items()):
                self._drop(lane_pid, lane)
            await cancel_and_wait(*tasks)

    async def _read(self, it: AsyncIterator[pb.PublishMuxRequest]) -> None:
        """Admit every frame as it arrives, while the stream has room (see ``depth``)."""
        async for frame in it:
            for batch in frame.batches:
                self._admit(batch)
            self._frames_read += 1
            if self._direct or self._frames_read - self._frames_told >= READ_REPORT_EVERY:
                self._kick()  # answers to send at once, or the client waits to hear of its frames
            while not self._room():
                self._has_room = self._loop.create_future()
                await self._has_room


def _outcome_unknown(answer: asyncio.Future[pb.PublishAck]) -> DanubeError | None:
    """The error of a publish that ended without an answer for the client (None: answered)."""
    if answer.cancelled():
        return Unavailable("the publish was cancelled; re-send it")
    exc = answer.exception()
    if exc is None:
        return None
    if isinstance(exc, DanubeError):
        return exc
    return Unavailable(f"the publish failed: {exc!r}; re-send it")


def _gone(producer: Producer) -> DanubeError:
    """Why a detached producer cannot publish (closed without a reason: create it again)."""
    return producer.detach_error or Unavailable(f"producer {producer.id} was closed; create it again")
