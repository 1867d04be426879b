"""The consumer of one (partition) topic: subscription, the delivery stream, reconnection.

Frames from ``ReceiveBatches`` go into the consumer's shared :class:`ReceiveQueue`. When the
stream ends (topic moved, broker gone) or a health check answers CLOSE, the supervisor backs
off, looks the topic up again and subscribes under the same consumer name, which takes the
old consumer over, then opens a new stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc.aio

from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.chunking import ChunkAssembler, PackedMessage, build_messages
from danube_sdk.connection import Connections, Stubs, rpc
from danube_sdk.mux import ConsumeLane, MuxUnsupported
from danube_sdk.options import ClientOptions, ConsumerOptions
from danube_sdk.packs import PackTracker
from danube_sdk.receive_queue import ReceiveQueue
from danube_sdk.retry import backoff_s
from danube_sdk.start_position import StartPosition
from danube_sdk.streams import call_error, health_watch, map_stream_error, race
from danube_sdk.types import Message

log = logging.getLogger(__name__)

#: Skipped ranges remembered per partition (the oldest are dropped; the total keeps counting).
_SKIPPED_KEPT = 100
#: Upper bound asked of the broker per MessageBatch frame.
MAX_MESSAGES_PER_FRAME = 1000


class TopicConsumer:
    """Receives from one topic; owned by :class:`danube_sdk.consumer.Consumer`."""

    def __init__(
        self,
        conns: Connections,
        *,
        topic: str,
        name: str,
        subscription: str,
        opts: ConsumerOptions,
        client_opts: ClientOptions,
        queue: ReceiveQueue,
        decode: Callable[[bytes], Any] | None = None,
        reader: StartPosition | None = None,
    ) -> None:
        self.topic = topic
        #: A reader (non-durable subscription) starting here; None: a durable subscription.
        self._reader = reader
        #: Readers: the next offset to hand on (everything below was put into the receive queue);
        #: a re-attach asks the broker for it, and messages below it are dropped as duplicates.
        self.reader_next: int | None = None
        #: Decodes payloads for ``Message.value()`` (the consumer's schema), or None.
        self._decode = decode
        self.name = name
        self.subscription = subscription
        self._conns = conns
        self._opts = opts
        self._client_opts = client_opts
        self._queue = queue
        self.consumer_id = 0
        self.broker_url: str | None = None
        self._stubs: Stubs | None = None
        #: True while subscribed and streaming; acks are held back while False.
        self.attached = False
        self._received_in_session = False
        #: Offsets of this topic the subscription skipped because they were gone (retention cut
        #: them before it read them, or an operator accepted their loss), as the broker said.
        self.skipped: list[tuple[int, int]] = []
        self.skipped_total = 0
        self._task: asyncio.Task[None] | None = None
        #: This consumer's lane of the ConsumeMux stream while a session runs on one.
        self._lane: ConsumeLane | None = None
        #: Told of a fatal error first (multi-topic consumers); True: handled, the shared queue
        #: is not failed.
        self.on_fatal: Callable[[TopicConsumer, DanubeError], bool] | None = None
        #: True while the reader waits for room in the receive queue (reading nothing: the
        #: chunk timeout does not run meanwhile).
        self.waiting_for_room = False
        #: Chunks of large messages until each message is complete.
        self.chunks = ChunkAssembler(
            timeout_s=opts.chunked_message_timeout_s,
            max_pending=opts.max_pending_chunked_messages,
            topic=topic,
        )
        #: Packs delivered and not fully acknowledged (readers, which never ack, keep none).
        self.packs = PackTracker()
        self._packs_or_none = self.packs if reader is None else None

    async def subscribe(self, hint_url: str | None = None) -> None:
        url = hint_url or await self._conns.lookup(self.topic)
        stubs = self._conns.stubs(url)
        resp = await rpc(
            stubs.consumer.Subscribe(
                pb.ConsumerRequest(
                    request_id=self._conns.next_request_id(),
                    topic_name=self.topic,
                    consumer_name=self.name,
                    subscription=self.subscription,
                    subscription_type=pb.ConsumerRequest.SubscriptionType.Name(int(self._opts.sub_type)),
                    key_filters=list(self._opts.key_filters),
                    initial_position=pb.ConsumerRequest.InitialPosition.Name(
                        int(self._opts.initial_position)
                    ),
                    max_unacked_messages=self._opts.max_unacked_messages,
                    reader=self._reader_start(),
                    read_compacted=self._opts.read_compacted,
                ),
                timeout=self._client_opts.rpc_timeout_s,
            )
        )
        if self._reader is not None:
            start = int(resp.reader_start_offset)
            self.reader_next = start if self.reader_next is None else max(self.reader_next, start)
        self.consumer_id = resp.consumer_id
        self.broker_url = url
        self._stubs = stubs
        self.attached = True
        log.debug("consumer %s subscribed to %s on %s (id %d)", self.name, self.topic, url, self.consumer_id)

    def _reader_start(self) -> pb.ReaderStart | None:
        if self._reader is None:
            return None
        if self.reader_next is not None:  # re-attaching: continue after what was received
            return StartPosition.offset(self.reader_next).to_proto()
        return self._reader.to_proto()

    def _fresh(self, msgs: Sequence[pb.StreamMessage]) -> Sequence[pb.StreamMessage]:
        """Readers: drop what was already received (a re-attach may resend it); note the rest."""
        nxt = self.reader_next
        if nxt is None or not msgs:
            return msgs
        fresh = []
        for m in msgs:
            offset = m.msg_id.topic_offset
            if offset >= nxt:
                fresh.append(m)
                nxt = offset + 1
        self.reader_next = nxt
        return fresh

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"danube-consumer {self.topic}")

    async def aclose(self, *, unsubscribe: bool) -> None:
        task, self._task = self._task, None
        exc = await cancel_and_wait(task)
        if exc is not None:
            raise exc
        self.attached = False
        if self._stubs is not None and self.consumer_id:
            req = pb.CloseConsumerRequest(
                request_id=self._conns.next_request_id(),
                consumer_id=self.consumer_id,
                unsubscribe=unsubscribe,
            )
            try:
                await rpc(self._stubs.consumer.CloseConsumer(req, timeout=self._client_opts.rpc_timeout_s))
            except DanubeError as exc:
                if unsubscribe:
                    raise
                log.debug("CloseConsumer for %s failed: %s", self.topic, exc)
            self._stubs = None

    # ------------------------------------------------------------------ acks

    async def ack_batch(self, offsets: list[int], *, cumulative: bool = False) -> None:
        """One AckBatch; ``cumulative``: everything up to and including ``offsets[0]``."""
        if not self.attached or self._stubs is None:
            raise Unavailable(f"consumer {self.name} on {self.topic} is reconnecting")
        lane = self._lane
        if lane is not None and lane.error is None:
            await lane.ack(offsets, cumulative=cumulative, timeout_s=self._client_opts.rpc_timeout_s)
            return
        req = pb.AckBatchRequest(
            request_id=self._conns.next_request_id(),
            consumer_id=self.consumer_id,
            topic_name=self.topic,
            subscription_name=self.subscription,
            topic_offsets=offsets,
            cumulative=cumulative,
        )
        await rpc(self._stubs.consumer.AckBatch(req, timeout=self._client_opts.rpc_timeout_s))

    async def seek(self, *, offset: int | None = None, publish_time_ms: int | None = None) -> int:
        """Move the subscription's cursor; return the offset it continues from.

        Messages of this topic buffered client-side are dropped first (they are from the old
        position). Frames the broker sent before it processed the seek may still arrive.
        """
        if not self.attached or self._stubs is None:
            raise Unavailable(f"consumer {self.name} on {self.topic} is reconnecting")
        req = pb.SeekRequest(request_id=self._conns.next_request_id(), consumer_id=self.consumer_id)
        if offset is not None:
            req.offset = offset
        elif publish_time_ms is not None:
            req.publish_time_ms = publish_time_ms
        dropped = self._queue.purge(self.topic)
        self.chunks.clear()
        self.packs.clear()
        resp = await rpc(self._stubs.consumer.Seek(req, timeout=self._client_opts.rpc_timeout_s))
        log.debug("seek on %s: continuing from %d (dropped %d buffered)", self.topic, resp.offset, dropped)
        return int(resp.offset)

    async def nack(self, msg: Message, delay_ms: int | None) -> None:
        if self._stubs is None:
            raise Unavailable(f"consumer {self.name} on {self.topic} is reconnecting")
        # A chunked message is redelivered whole: one Nack per chunk.
        ids = msg.chunk_msg_ids if isinstance(msg, PackedMessage) else (msg.raw.msg_id,)
        for msg_id in ids:
            req = pb.NackRequest(
                request_id=self._conns.next_request_id(),
                msg_id=msg_id,
                subscription_name=self.subscription,
            )
            if delay_ms is not None:
                req.delay_ms = delay_ms
            await rpc(self._stubs.consumer.Nack(req, timeout=self._client_opts.rpc_timeout_s))

    # ------------------------------------------------------------------ supervisor

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._session()
                err: DanubeError = Unavailable(f"delivery stream of {self.topic} ended")
            except DanubeError as exc:
                err = exc
            self.attached = False
            if not err.retryable:
                log.error("consumer %s on %s failed: %s", self.name, self.topic, err)
                self._fatal(err)
                return
            if self._received_in_session:
                attempt = 0
            hint = err.redirect
            log.warning("consumer %s on %s: %s; reconnecting", self.name, self.topic, err)
            while True:
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1
                try:
                    await self.subscribe(hint)
                    break
                except DanubeError as exc:
                    if not exc.retryable:
                        log.error("consumer %s on %s cannot resubscribe: %s", self.name, self.topic, exc)
                        self._fatal(exc)
                        return
                    log.info("resubscribing %s on %s failed: %s", self.name, self.topic, exc)
                    hint = exc.redirect

    def _fatal(self, err: DanubeError) -> None:
        if self.on_fatal is None or not self.on_fatal(self, err):
            self._queue.fail(err)

    async def _session(self) -> None:
        """Receive until the stream fails; raises the error that ended it. With multiplexing
        the stream is this consumer's lane of the connection's shared ConsumeMux stream (no
        health checks: the broker tells a detach in-band); else a ReceiveBatches stream."""
        assert self._stubs is not None and self.broker_url is not None
        stubs = self._stubs
        self._received_in_session = False
        frame_max = min(self._opts.receiver_queue_size, MAX_MESSAGES_PER_FRAME)
        mux = self._conns.consume_mux(self.broker_url)
        if mux is not None:
            lane = mux.attach(self.consumer_id, max_messages_per_frame=frame_max)
            self._lane = lane
            try:
                await self._lane_loop(lane)
            except MuxUnsupported:
                pass  # nothing was delivered on it: per-topic stream below
            finally:
                self._lane = None
                lane.close()
        req = pb.ReceiveBatchRequest(
            request_id=self._conns.next_request_id(),
            consumer_id=self.consumer_id,
            max_messages_per_frame=frame_max,
        )
        call = stubs.consumer.ReceiveBatches(req)
        what = f"receiving from {self.topic} on {self.broker_url}"
        try:
            await race(
                {"reader": self._read_loop(call, what)},
                {
                    "health": health_watch(
                        stubs,
                        client=pb.HealthCheckRequest.Consumer,
                        client_id=self.consumer_id,
                        interval_s=self._client_opts.health_check_interval_s,
                        rpc_timeout_s=self._client_opts.rpc_timeout_s,
                    )
                },
            )
        except grpc.aio.AioRpcError as exc:
            raise map_stream_error(exc, what) from exc
        finally:
            call.cancel()

    def _note_skipped(self, ranges: Sequence[pb.SkippedRange]) -> None:
        for r in ranges:
            self.skipped.append((r.start_offset, r.next_offset))
            self.skipped_total += r.next_offset - r.start_offset
            log.warning(
                "subscription %s on %s skipped offsets %d..%d: gone from the topic (cut by retention before "
                "it read them, or lost with a broker's disk by an operator's recorded decision)",
                self.subscription,
                self.topic,
                r.start_offset,
                r.next_offset - 1,
            )
        del self.skipped[:-_SKIPPED_KEPT]

    async def _lane_loop(self, lane: ConsumeLane) -> None:
        while True:
            frame = await lane.read()
            await self._on_frame(frame)
            lane.taken()  # one more frame may come now

    async def _on_frame(self, frame: pb.MessageBatch) -> None:
        if frame.skipped:
            self._note_skipped(frame.skipped)
        msgs = self._fresh(frame.messages) if self._reader is not None else frame.messages
        if msgs:
            self._received_in_session = True
            built = build_messages(
                msgs, self.topic, self._decode, self.chunks, time.monotonic(), self._packs_or_none
            )
            if built:
                self.waiting_for_room = True
                await self._queue.put_many(built)
                self.waiting_for_room = False

    async def _read_loop(self, call: grpc.aio.UnaryStreamCall, what: str) -> None:
        topic = self.topic
        queue = self._queue
        while True:
            frame = await call.read()
            if frame is grpc.aio.EOF:
                raise await call_error(call, what)
            assert isinstance(frame, pb.MessageBatch)
            if frame.skipped:
                self._note_skipped(frame.skipped)
            msgs = self._fresh(frame.messages) if self._reader is not None else frame.messages
            if msgs:
                self._received_in_session = True
                built = build_messages(
                    msgs, topic, self._decode, self.chunks, time.monotonic(), self._packs_or_none
                )
                if built:
                    self.waiting_for_room = True
                    await queue.put_many(built)
                    self.waiting_for_room = False
