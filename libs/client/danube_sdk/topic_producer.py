"""The producer of one (partition) topic: batching, the publish stream, and reconnection.

Messages are appended to an *open* batch as they are sent. The batch is sealed when it
reaches ``batching_max_messages`` or ``batching_max_bytes``, at once when no batch is in
flight (an idle producer does not linger), when the batches in flight are all acknowledged
(as Nagle's algorithm does: one partial batch per round trip, so batches grow with the
broker's load), or when it has been open for ``batching_max_publish_delay_ms`` (the cap on
that wait); sealed batches wait in ``ready`` for the sender. The sender
writes them on the ``PublishBatches`` stream without waiting for acks, keeping them in
``inflight`` (ordered by ``batch_seq``) until the broker's ``PublishAck`` resolves them; with
``max_inflight_batches`` unacknowledged it waits for an ack (the open batch keeps filling).

When the stream fails with a retryable error (topic moved, broker gone, back-pressure) the
supervisor backs off, looks the topic up again, re-creates the producer under the same name
and writes every batch still in flight again, in order, before new ones.

Idempotence (``enable_idempotence``): every message carries a ``sequence_id``, strictly
increasing per producer and starting above the broker's ``last_sequence_id`` for this
producer name. A batch that may have been stored (sent, no answer) is resent with the same
ids, so the broker drops the copies it already has and answers with their first offsets. A
batch the broker refused was not stored: it is retried with fresh ids after everything
already on the wire, so the ids on the wire always increase.

Explicit ids (``Producer.send_async(..., sequence_id=N)``): the caller numbers the messages
(strictly increasing per partition producer). They are never renumbered: not above the
broker's ``last_sequence_id`` on (re)connect, not when a refused batch is re-sent. So a
process that re-sends the same messages with the same ids under the same producer name has
every copy the broker already stored dropped as a duplicate.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import grpc.aio

from danube_common.aio import LoopEvent, cancel_and_wait
from danube_common.errors import DanubeError, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.batch import Batch, error_from_detail, fail_all
from danube_sdk.connection import Connections, Stubs, rpc
from danube_sdk.errors import ClientClosed, ClientTimeout
from danube_sdk.mux import MuxUnsupported, PublishLane
from danube_sdk.options import ClientOptions, ProducerOptions
from danube_sdk.packs import compress_batch
from danube_sdk.retry import backoff_s
from danube_sdk.streams import call_error, health_watch, map_stream_error, race
from danube_sdk.tracing import SendSampler, active_tracer
from danube_sdk.types import MessageId

if TYPE_CHECKING:
    from danube_sdk.schema_registry import ProducerSchema

log = logging.getLogger(__name__)


class TopicProducer:
    """Sends to one topic; owned by :class:`danube_sdk.producer.Producer`."""

    def __init__(
        self,
        conns: Connections,
        *,
        topic: str,
        name: str,
        opts: ProducerOptions,
        client_opts: ClientOptions,
        release: Callable[[int, int], None],
        schema: ProducerSchema | None = None,
    ) -> None:
        self.topic = topic
        self.name = name
        #: The schema version sent in CreateProducer and stamped on every message, or None.
        self.schema = schema
        self._conns = conns
        self._opts = opts
        self._client_opts = client_opts
        self._release = release
        self._loop = asyncio.get_running_loop()
        self._linger_s = opts.batching_max_publish_delay_ms / 1000.0
        self._max_messages = opts.batching_max_messages
        self._max_bytes = opts.batching_max_bytes
        self._max_inflight = opts.max_inflight_batches
        self._codec = opts.compression
        #: Packing would merge the caller's sequence ids: never with explicit ids.
        self._pack_runs = opts.pack_batches
        self.producer_id = 0
        #: Largest payload the broker accepts (0: it did not say).
        self.max_message_size = 0
        self.broker_url: str | None = None
        self._stubs: Stubs | None = None
        self.open: Batch | None = None
        self.ready: collections.deque[Batch] = collections.deque()
        self.inflight: dict[int, Batch] = {}
        self._next_seq = 1
        self._wake = LoopEvent()
        self._writes_allowed = LoopEvent()
        #: Set when fewer than ``max_inflight_batches`` batches are unacknowledged.
        self._slot_free = LoopEvent()
        self._retry_error: DanubeError | None = None
        self._refused: list[Batch] = []
        self._acked_in_session = False
        self._idempotent = opts.enable_idempotence
        #: The sequence id of the next message (idempotent producers).
        self._next_sequence = 1
        #: The caller numbers the messages (``add(..., sequence_id=)``): never renumber.
        self._explicit_ids = False
        #: The last explicit sequence id added (they must increase).
        self.last_explicit_id = 0
        #: Set when the producer can no longer publish (non-retryable error, or closed).
        self.fatal: DanubeError | None = None
        self._task: asyncio.Task[None] | None = None
        #: Sessions of this producer on PublishMux streams (PublishBatch.session).
        self._mux_sessions = 0
        #: Set when this process exports traces: sampled messages get a ``send`` span.
        tracer = active_tracer()
        self._sends = SendSampler.for_provider(tracer) if tracer is not None else None

    # ------------------------------------------------------------------ lifecycle

    async def connect(self, hint_url: str | None = None) -> None:
        """Look the topic up (unless given a broker URL) and create the producer there."""
        url = hint_url or await self._conns.lookup(self.topic)
        stubs = self._conns.stubs(url)
        timeout = self._client_opts.rpc_timeout_s
        if self.producer_id and self.broker_url == url:
            # Free our old registration on this broker before taking the name again.
            with contextlib.suppress(DanubeError):
                req = pb.CloseProducerRequest(producer_id=self.producer_id)
                await rpc(stubs.producer.CloseProducer(req, timeout=timeout))
        req = pb.ProducerRequest(
            request_id=self._conns.next_request_id(),
            producer_name=self.name,
            topic_name=self.topic,
            producer_access_mode=pb.ProducerAccessMode.Name(int(self._opts.access_mode)),
            dispatch_strategy=pb.DispatchStrategy.Name(int(self._opts.dispatch_strategy)),
        )
        if self.schema is not None:
            req.schema_ref.CopyFrom(self.schema.to_proto())
        resp = await rpc(stubs.producer.CreateProducer(req, timeout=timeout))
        self.producer_id = resp.producer_id
        self.max_message_size = resp.max_message_size_bytes
        if self._idempotent and not self._explicit_ids and resp.last_sequence_id >= self._next_sequence:
            if self._next_sequence > 1:
                log.warning(
                    "broker has sequence id %d for producer %s on %s, above ours (%d): does another "
                    "producer use this name? continuing above it",
                    resp.last_sequence_id,
                    self.name,
                    self.topic,
                    self._next_sequence - 1,
                )
            self._next_sequence = resp.last_sequence_id + 1
            self._renumber_unsent()
        self.broker_url = url
        self._stubs = stubs
        log.debug("producer %s attached to %s on %s (id %d)", self.name, self.topic, url, self.producer_id)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"danube-producer {self.topic}")

    async def aclose(self, err: DanubeError | None = None) -> None:
        """Stop sending; fail whatever is still pending; detach from the broker."""
        task, self._task = self._task, None
        exc = await cancel_and_wait(task)
        if exc is not None:
            raise exc
        if self.fatal is None:
            self._fail_everything(err or ClientClosed(f"producer {self.name} on {self.topic} is closed"))
        if self._stubs is not None and self.producer_id:
            req = pb.CloseProducerRequest(
                request_id=self._conns.next_request_id(), producer_id=self.producer_id
            )
            try:
                await rpc(self._stubs.producer.CloseProducer(req, timeout=self._client_opts.rpc_timeout_s))
            except DanubeError as exc:
                log.debug("CloseProducer for %s failed: %s", self.topic, exc)
            self._stubs = None

    # ------------------------------------------------------------------ hot path

    def add(
        self,
        payload: bytes,
        properties: dict[str, str] | None,
        key: str | None,
        fut: asyncio.Future[MessageId],
        now_ms: int,
        compression: int = 0,
        chunk: tuple[str, int, int, int] | None = None,
        deliver_at_ms: int = 0,
        sequence_id: int = 0,
    ) -> None:
        """Append one message to the open batch (sealing batches as they fill).
        ``compression``: the payload's codec; ``chunk``: (message uuid, index, count, total
        size) when the payload is one chunk of a large message; ``deliver_at_ms``: the due time
        (delayed delivery; 0 = at once); ``sequence_id``: the caller's id for it (explicit ids,
        checked by the Producer to increase; 0: numbered here)."""
        size = len(payload)
        b = self.open
        if b is None:
            b = self._open_batch()
        elif b.bytes + size > self._max_bytes:
            self._seal()
            b = self._open_batch()
        if sequence_id:
            self._explicit_ids = True
            self._pack_runs = False
            self.last_explicit_id = sequence_id
            m = b.messages.add(
                payload=payload, publish_time=now_ms, producer_name=self.name, sequence_id=sequence_id
            )
        elif self._idempotent:
            m = b.messages.add(
                payload=payload, publish_time=now_ms, producer_name=self.name, sequence_id=self._next_sequence
            )
            self._next_sequence += 1
        else:
            m = b.messages.add(payload=payload, publish_time=now_ms, producer_name=self.name)
        if self.schema is not None:
            m.schema_id = self.schema.schema_id
            m.schema_version = self.schema.version
        if properties:
            m.attributes.update(properties)
            size += sum(len(k) + len(v) for k, v in properties.items())
        if key is not None:
            m.routing_key = key
        if compression:
            m.compression = compression
        if chunk is not None:
            c = m.chunk
            c.message_uuid, c.index, c.count, c.total_size = chunk
        if deliver_at_ms:
            m.deliver_at_ms = deliver_at_ms
        if self._sends is not None:
            span = self._sends.start(self.topic, self.name, m.attributes, len(payload))
            if span is not None:
                if b.spans is None:
                    b.spans = []
                b.spans.append((len(b.futures), span))
        b.futures.append(fut)
        b.bytes += size
        if len(b.futures) >= self._max_messages or b.bytes >= self._max_bytes:
            self._seal()

    def _open_batch(self) -> Batch:
        now = self._loop.time()
        timeout = self._opts.send_timeout_s
        b = Batch(now, now + timeout if timeout > 0 else None, self._loop.create_future())
        self.open = b
        self._wake.set()  # the sender arms the linger timer
        return b

    def _seal(self) -> None:
        b = self.open
        if b is not None:
            self.open = None
            if self._codec:
                limit = self.max_message_size or self._max_bytes
                b.groups = compress_batch(
                    b.messages, self._codec, pack_runs=self._pack_runs, max_pack_bytes=limit
                )
            self.ready.append(b)
            self._wake.set()

    def seal_open(self) -> None:
        """Make the open batch ready now (used by flush)."""
        self._seal()

    def unfinished(self) -> list[asyncio.Future[None]]:
        """The completions of every batch not finished yet (flush waits for them)."""
        batches = [*self.inflight.values(), *self._refused, *self.ready]
        if self.open is not None:
            batches.append(self.open)
        return [b.done for b in batches]

    def _renumber_unsent(self) -> None:
        """Fresh sequence ids, in order, for every batch not on the wire (ready, then open).
        Explicit ids are the caller's: kept as they are."""
        if not self._idempotent or self._explicit_ids:
            return
        seq = self._next_sequence
        for b in self.ready:
            seq = b.renumber(seq)
        if self.open is not None:
            seq = self.open.renumber(seq)
        self._next_sequence = seq

    def _requeue_refused(self) -> None:
        """Batches refused with a retryable error go back to the front of ``ready``, in order,
        with fresh sequence ids (they were not stored). So do batches sent on the same stream
        after the first refused one and still unanswered (written as the stream was ending): the
        broker refuses every batch of a stream that follows a refused one, to keep the order, so
        none of them was stored either; re-sending them after the refused ones keeps the order."""
        if not self._refused:
            return
        first = min(b.seq for b in self._refused)
        behind = [seq for seq in self.inflight if seq > first]
        later = [self.inflight.pop(seq) for seq in behind]
        if later:
            self._slot_free.set()
        refused = sorted([*self._refused, *later], key=lambda b: b.seq)
        self._refused.clear()
        self.ready.extendleft(reversed(refused))
        self._renumber_unsent()

    def expire(self, now: float) -> None:
        """Fail batches whose send timeout has passed (oldest first, so stop at a live one)."""
        expired: list[Batch] = []
        for seq, batch in list(self.inflight.items()):
            if batch.deadline is None or batch.deadline > now:
                break
            del self.inflight[seq]
            expired.append(batch)
            self._slot_free.set()
        for batch in [b for b in self._refused if b.deadline is not None and b.deadline <= now]:
            self._refused.remove(batch)
            expired.append(batch)
        while self.ready and (d := self.ready[0].deadline) is not None and d <= now:
            expired.append(self.ready.popleft())
        if self.open is not None and (d := self.open.deadline) is not None and d <= now:
            expired.append(self.open)
            self.open = None
        if expired:
            err = ClientTimeout(
                f"message to {self.topic} not acknowledged within send_timeout_s={self._opts.send_timeout_s}"
            )
            fail_all(expired, err, self._release)

    def _fail_everything(self, err: DanubeError) -> None:
        self.fatal = err
        batches = [*self.inflight.values(), *self._refused, *self.ready]
        if self.open is not None:
            batches.append(self.open)
        self.inflight.clear()
        self._refused.clear()
        self.ready.clear()
        self.open = None
        fail_all(batches, err, self._release)

    # ------------------------------------------------------------------ supervisor

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._session()
                err: DanubeError = ClientClosed("publish session ended")
            except DanubeError as exc:
                err = exc
            self._requeue_refused()
            if not err.retryable:
                log.error("producer %s on %s failed: %s", self.name, self.topic, err)
                self._fail_everything(err)
                return
            if self._acked_in_session:
                attempt = 0
            hint = err.redirect
            log.warning("producer %s on %s: %s; reconnecting", self.name, self.topic, err)
            while True:
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1
                try:
                    await self.connect(hint)
                    break
                except DanubeError as exc:
                    if not exc.retryable:
                        log.error("producer %s on %s cannot reconnect: %s", self.name, self.topic, exc)
                        self._fail_everything(exc)
                        return
                    log.info("reconnecting producer %s on %s failed: %s", self.name, self.topic, exc)
                    hint = exc.redirect

    async def _session(self) -> None:
        """Publish on one stream until it fails; raises the error that ended it.

        With multiplexing the stream is this producer's lane of the connection's shared
        PublishMux stream (no health checks: the broker tells a detach in-band); a broker
        without it gets a PublishBatches stream of its own."""
        assert self._stubs is not None and self.broker_url is not None
        stubs = self._stubs
        self._acked_in_session = False
        self._retry_error = None
        self._writes_allowed.set()
        self._requeue_refused()
        mux = self._conns.publish_mux(self.broker_url)
        if mux is not None:
            self._mux_sessions += 1
            lane = mux.bind(self.producer_id, self._mux_sessions)
            what = f"publishing to {self.topic} on {mux.what}"
            try:
                await lane.write(pb.PublishBatch(producer_id=self.producer_id))  # bind (idle-proof)
                await race(
                    {"reader": self._read_loop(lane, what), "writer": self._write_loop(lane, what)}, {}
                )
                return
            except MuxUnsupported:
                self._writes_allowed.set()  # nothing was published: the per-topic stream resends it
            finally:
                lane.close()
        call = stubs.producer.PublishBatches()
        what = f"publishing to {self.topic} on {self.broker_url}"
        try:
            await race(
                {"reader": self._read_loop(call, what), "writer": self._write_loop(call, what)},
                {
                    "health": health_watch(
                        stubs,
                        client=pb.HealthCheckRequest.Producer,
                        client_id=self.producer_id,
                        interval_s=self._client_opts.health_check_interval_s,
                        rpc_timeout_s=self._client_opts.rpc_timeout_s,
                    )
                },
            )
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise map_stream_error(exc, what) from exc
        finally:
            call.cancel()

    async def _write_loop(self, call: grpc.aio.StreamStreamCall | PublishLane, what: str) -> None:
        """``call``: a PublishBatches stream, or a lane of the PublishMux stream (which raises
        DanubeError itself)."""
        try:
            for batch in list(self.inflight.values()):  # resend what was not acknowledged
                batch.frame.producer_id = self.producer_id
                await call.write(batch.frame)
            while True:
                await self._writes_allowed.wait()
                if len(self.inflight) >= self._max_inflight:
                    # The open batch keeps filling meanwhile: under load batches grow instead
                    # of piling up at the broker one small batch at a time.
                    self._slot_free.clear()
                    await self._slot_free.wait()
                    continue
                batch = await self._next_batch()  # no await between this and `inflight`
                seq = self._next_seq
                self._next_seq += 1
                batch.frame.batch_seq = seq
                batch.frame.producer_id = self.producer_id
                self.inflight[seq] = batch
                await call.write(batch.frame)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            assert not isinstance(call, PublishLane)
            raise await call_error(call, what) from None

    async def _next_batch(self) -> Batch:
        while True:
            if self.ready:
                return self.ready.popleft()
            b = self.open
            self._wake.clear()
            if b is None:
                await self._wake.wait()
                continue
            # Wait only while earlier batches are in flight (an idle pipe sends at once, so a
            # lone send() is not delayed): the last ack wakes us (_read_loop), the cap ends it.
            due = b.opened_at + self._linger_s
            if due <= self._loop.time() or not self.inflight:
                self._seal()
                continue
            await self._wake.wait_until(due)

    async def _read_loop(self, call: grpc.aio.StreamStreamCall | PublishLane, what: str) -> None:
        while True:
            ack = await call.read()
            if ack is grpc.aio.EOF:
                assert not isinstance(call, PublishLane)
                raise await call_error(call, what)
            assert isinstance(ack, pb.PublishAck)
            batch = self.inflight.pop(ack.batch_seq, None)
            if len(self.inflight) < self._max_inflight:
                self._slot_free.set()
            if not self.inflight and self.open is not None:
                self._wake.set()  # the pipe is idle: the open batch need not linger
            if batch is not None:
                if ack.HasField("error"):
                    self._on_refused(batch, ack.error)
                else:
                    sent = len(batch.messages)
                    if ack.count != sent:
                        log.warning(
                            "broker acked %d messages of a %d-message batch on %s",
                            ack.count,
                            sent,
                            self.topic,
                        )
                    self._acked_in_session = True
                    self._release(len(batch), batch.bytes)
                    offsets: Sequence[int] = ack.offsets
                    if offsets and len(offsets) != sent:
                        log.warning(
                            "broker listed %d offsets for a %d-message batch on %s; using first_offset",
                            len(offsets),
                            sent,
                            self.topic,
                        )
                        offsets = ()
                    if ack.duplicates:
                        log.debug("broker dropped %d duplicates on %s", ack.duplicates, self.topic)
                    batch.resolve(self.topic, ack.first_offset, self.producer_id, offsets)
            if self._retry_error is not None and not self.inflight:
                raise self._retry_error  # every batch sent before the refusal is answered

    def _on_refused(self, batch: Batch, detail: pb.ErrorDetail) -> None:
        err = error_from_detail(detail)
        if detail.retryable and not err.retryable:
            err = Unavailable(f"{err.message} [{err.code}]")
        # The broker's `retryable` decides, not the class: codes this client does not know yet
        # (e.g. DISK_FULL, STORAGE_FAILED) map to their status's class.
        if detail.retryable:
            # Stop writing, let the broker answer what is already on the wire, then retry
            # the refused batches on a new session (after backoff).
            self._refused.append(batch)
            self._writes_allowed.clear()
            if self._retry_error is None:
                self._retry_error = err
            return
        self._release(len(batch), batch.bytes)
        batch.fail(err)
