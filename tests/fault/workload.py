"""Drive SDK producers and consumers against a cluster, recording every operation in a History.

A :class:`Workload` runs ``producers`` producer processes and ``consumers`` consumer processes
(each its own :class:`~danube_sdk.DanubeClient`, as separate applications would) over a set of
reliable, non-partitioned topics, and records into a :class:`~tests.fault.history.History`:

- producers: each process ``producer-<i>`` sends to the topics in turn, at
  ``rate_per_producer_s`` messages per second (pacing only), payloads carrying
  ``MsgId(process, seq)`` with ``seq`` counting up per process. One SDK producer per topic,
  reliable, idempotent (the SDK default, set explicitly), named ``<run_id>-producer-<i>`` and
  with a long ``send_timeout_s`` so a failover of 20-30 s is ridden out rather than failed.
- consumers: each process ``consumer-<j>`` joins one subscription (every exclusive one gets
  exactly one consumer, the rest are spread over the others) on every topic, starting at
  ``earliest``; it records each delivery, then acknowledges it and records the ack.

How a failed send is recorded (the rule fault tests rely on):

- ``fail`` (definitely not stored) when the SDK failed the future before the message entered a
  batch (the future is already done when ``send_async`` returns: closed producer, a partition
  that already failed, ``MessageTooLarge`` checked client-side), or when the error is an
  ``InvalidArgument`` (``MessageTooLarge`` included): the broker refuses such a batch in-band,
  before appending anything to its log (see ``ProducerApi._publish_batch``).
- ``info`` (outcome unknown) for everything else: ``ClientTimeout`` (``send_timeout_s`` passed
  while the batch may have been stored), ``ClientClosed`` of in-flight batches at close,
  non-retryable reconnect errors (``ProducerBusy`` ...) that fail batches already on the wire.

:func:`final_read` reads a topic once more with a fresh exclusive subscription from
``earliest``: the ground truth the checker compares the history with.

Topics should be created first as reliable topics with a retention that keeps everything
(``danube-admin topics create T --dispatch-strategy reliable --retention-time-s 3600``): with the
default retention a reliable topic deletes what every subscription acknowledged, and the final
read (a new subscription) would then start above offset 0. A producer creating the topic makes
it reliable with the broker's default retention.

Cursor sampling (for invariant 7) is left to the caller. Sample the *durable* cursor, the etcd
key ``Keys(cluster).subscription_cursor(TopicName.parse(topic), sub)`` (``{"cursor": N}``), not
``danube-admin topics stats``: stats show the broker's in-memory cursor, which runs ahead of
the durable one, and after a crash the subscription resumes at the durable cursor + 1, so
offsets at or below a stats cursor are legitimately delivered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial

import grpc
import grpc.aio

from danube_common.errors import DanubeError, InvalidArgument
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_sdk import (
    ClientClosed,
    ClientTimeout,
    Consumer,
    DanubeClient,
    DispatchStrategy,
    InitialPosition,
    MessageId,
    Producer,
    SubType,
)
from tests.fault.history import History, MsgId, decode_payload, encode_payload
from tests.support import wait_until

log = logging.getLogger(__name__)

DEFAULT_SUBSCRIPTIONS: tuple[tuple[str, SubType], ...] = (
    ("shared-sub", SubType.SHARED),
    ("excl-sub", SubType.EXCLUSIVE),
)


def is_definite_failure(err: BaseException) -> bool:
    """Did the broker (or the SDK) refuse this send before anything of it was stored?"""
    return isinstance(err, InvalidArgument)


def assign_consumers(
    consumers: int, subscriptions: Sequence[tuple[str, SubType]]
) -> list[tuple[str, SubType]]:
    """The subscription of each consumer: one per subscription first, then the remaining
    consumers round-robin over the non-exclusive ones (an exclusive subscription admits one)."""
    if consumers < len(subscriptions):
        raise ValueError(f"{consumers} consumers cannot cover {len(subscriptions)} subscriptions")
    out = list(subscriptions)
    shared = [s for s in subscriptions if s[1] != SubType.EXCLUSIVE]
    if len(out) < consumers and not shared:
        raise ValueError(f"{consumers} consumers but only exclusive subscriptions (one consumer each)")
    while len(out) < consumers:
        out.append(shared[(len(out) - len(subscriptions)) % len(shared)])
    return out


class Workload:
    """Producers and consumers over ``topics``, recording into ``history``; see the module doc.

    ``await start()``, let it run (inject faults), then ``await stop()``. SDK failures of a
    process (e.g. a consumer's non-retryable error) end that process and are listed in
    :attr:`errors`; anything else raised by a loop is re-raised by :meth:`stop`.

    ``rate_per_producer_s`` is messages per second per producer process (over all topics);
    ``payload_bytes`` pads each payload to that size; ``receiver_queue_size`` is kept small
    (SDK default 1000) because a delivery is recorded when the application takes the message
    out of that queue, and a smaller queue narrows the window the ``delivery-after-ack``
    caveat describes (see tests/fault/history.py). ``run_id`` prefixes the SDK producer and
    consumer names (unique per workload by default, so broker-side sequence ids never clash).
    ``held``: subscriptions made at start, each with one consumer that receives nothing until
    :meth:`release_held` (a subscription far behind, holding retention back).
    """

    def __init__(
        self,
        service_url: str,
        topics: Sequence[str],
        *,
        history: History,
        producers: int = 4,
        consumers: int = 4,
        subscriptions: Sequence[tuple[str, SubType]] = DEFAULT_SUBSCRIPTIONS,
        rate_per_producer_s: float = 200.0,
        payload_bytes: int = 64,
        send_timeout_s: float = 60.0,
        operation_timeout_s: float = 60.0,
        receiver_queue_size: int = 200,
        run_id: str | None = None,
        held: Sequence[tuple[str, SubType]] = (),
        key_for: Callable[[str, int], str | None] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("a workload needs at least one topic")
        if producers < 1 or rate_per_producer_s <= 0:
            raise ValueError("a workload needs at least one producer and a rate > 0")
        self.service_url = service_url
        self.topics = list(topics)
        self.history = history
        self.n_producers = producers
        self.assignment = assign_consumers(consumers, subscriptions) + list(held)
        self.subscriptions = [name for name, _ in (*subscriptions, *held)]
        self._held = {name for name, _ in held}
        #: The routing key of a producer process' send number (None: no keys).
        self.key_for = key_for
        self._released = asyncio.Event()
        self.rate_per_producer_s = rate_per_producer_s
        self.payload_bytes = payload_bytes
        self.send_timeout_s = send_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.receiver_queue_size = receiver_queue_size
        self.run_id = run_id or f"wl-{uuid.uuid4().hex[:6]}"
        #: SDK failures that ended a producer or consumer process (empty in a healthy run).
        self.errors: list[str] = []
        self._clients: list[DanubeClient] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self._consumers: list[tuple[str, Consumer]] = []
        self._stop_producing = asyncio.Event()
        self._stop_consuming = asyncio.Event()
        #: Send futures not resolved yet (their done-callback records the outcome).
        self._pending: set[asyncio.Future[MessageId]] = set()
        #: topic -> messages whose send was acknowledged
        self._acked: dict[str, set[MsgId]] = defaultdict(set)
        #: (subscription, topic) -> messages delivered to it
        self._delivered: dict[tuple[str, str], set[MsgId]] = defaultdict(set)
        self._started = False

    # -------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Create every producer (which creates missing topics), then every consumer, then run."""
        if self._started:
            raise RuntimeError("a workload starts once")
        self._started = True
        try:
            producer_sets = [await self._make_producers(i) for i in range(1, self.n_producers + 1)]
            consumer_sets = [
                await self._make_consumers(j, sub, sub_type)
                for j, (sub, sub_type) in enumerate(self.assignment, start=1)
            ]
        except BaseException:
            await self._close_clients()
            raise
        for j, (process, sub, consumers) in enumerate(consumer_sets, start=1):
            for topic, consumer in consumers.items():
                self._consumers.append((sub, consumer))
                self._consumer_tasks.append(
                    asyncio.create_task(
                        self._consume(process, sub, topic, consumer), name=f"workload consumer-{j} {topic}"
                    )
                )
        for i, producers in enumerate(producer_sets, start=1):
            self._tasks.append(
                asyncio.create_task(self._produce(f"producer-{i}", producers), name=f"workload producer-{i}")
            )

    async def stop(self, *, drain_timeout_s: float | None = None, catch_up_timeout_s: float = 30.0) -> bool:
        """Stop producing; wait for every send's outcome (up to ``drain_timeout_s``, default
        ``send_timeout_s`` + 10 s); keep consuming until every subscription received every
        acknowledged message (up to ``catch_up_timeout_s``); close everything.

        Returns whether the consumers caught up. Re-raises the first unexpected error of a loop.
        """
        self._stop_producing.set()
        self._released.set()
        producer_results = await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=drain_timeout_s or self.send_timeout_s + 10)
        if self._pending:
            self.errors.append(f"{len(self._pending)} sends still unresolved after the drain")
        caught_up = True
        try:
            await wait_until(
                self.caught_up, timeout_s=catch_up_timeout_s, interval_s=0.05, what="consumers to catch up"
            )
        except AssertionError:
            caught_up = False
            log.warning("workload %s: consumers did not catch up: %s", self.run_id, self.lagging())
        self._stop_consuming.set()
        consumer_results = await asyncio.gather(*self._consumer_tasks, return_exceptions=True)
        await self._close_clients()
        for result in (*producer_results, *consumer_results):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result
        return caught_up

    def release_held(self) -> None:
        """The ``held`` subscriptions' consumers start receiving."""
        self._released.set()

    async def _close_clients(self) -> None:
        for client in self._clients:
            try:
                await client.close()
            except DanubeError as err:
                log.warning("workload %s: closing a client: %s", self.run_id, err)
        self._clients.clear()

    # -------------------------------------------------------------------- progress

    def acked_per_topic(self) -> dict[str, int]:
        """Acknowledged sends per topic so far."""
        return {topic: len(self._acked[topic]) for topic in self.topics}

    def skipped_now(self) -> list[tuple[str, str]]:
        """(subscription, topic) pairs whose live consumers were told of skipped offsets."""
        return [(sub, part) for sub, c in self._consumers for part in c.skipped]

    def caught_up(self) -> bool:
        """Has every subscription received every message acknowledged so far, on every topic?"""
        return all(
            self._acked[topic] <= self._delivered[(sub, topic)]
            for sub in self.subscriptions
            for topic in self.topics
        )

    def lagging(self) -> dict[str, int]:
        """``subscription topic`` -> acknowledged messages it has not received yet."""
        out = {}
        for sub in self.subscriptions:
            for topic in self.topics:
                n = len(self._acked[topic] - self._delivered[(sub, topic)])
                if n:
                    out[f"{sub} {topic}"] = n
        return out

    # -------------------------------------------------------------------- producers

    async def _make_producers(self, i: int) -> dict[str, Producer]:
        client = DanubeClient(self.service_url, operation_timeout_s=self.operation_timeout_s)
        self._clients.append(client)
        producers = {}
        for topic in self.topics:
            producer = await client.create_producer(
                topic,
                producer_name=f"{self.run_id}-producer-{i}",
                dispatch_strategy=DispatchStrategy.RELIABLE,
                send_timeout_s=self.send_timeout_s,
                enable_idempotence=True,
            )
            if producer.partitions != [topic]:
                raise ValueError(f"{topic} is partitioned: the workload needs non-partitioned topics")
            producers[topic] = producer
        return producers

    async def _produce(self, process: str, producers: dict[str, Producer]) -> None:
        interval_s = 1.0 / self.rate_per_producer_s
        seq = 0
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            delay = next_at - time.monotonic()
            if delay > 0:  # pacing to the target rate; stop() cuts it short
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stop_producing.wait()
                continue
            # Behind schedule (e.g. back-pressure during a failover): go on at the rate, no burst.
            next_at = max(next_at + interval_s, time.monotonic() - 1.0)
            topic = self.topics[seq % len(self.topics)]
            seq += 1
            msg = MsgId(process, seq)
            handle = self.history.send_invoked(process, topic, msg)
            key = self.key_for(process, seq) if self.key_for is not None else None
            try:
                fut = await producers[topic].send_async(encode_payload(msg, self.payload_bytes), key=key)
            except DanubeError as err:  # raised before the message was handed to a batch
                self.history.send_failed(handle, err, definite=True)
                continue
            if fut.done():  # failed (or, in theory, resolved) before entering a batch
                self._record_send(handle, topic, msg, fut, handed_over=False)
                continue
            self._pending.add(fut)
            fut.add_done_callback(partial(self._on_send_done, handle, topic, msg))

    def _on_send_done(self, handle: int, topic: str, msg: MsgId, fut: asyncio.Future[MessageId]) -> None:
        self._pending.discard(fut)
        self._record_send(handle, topic, msg, fut, handed_over=True)

    def _record_send(
        self, handle: int, topic: str, msg: MsgId, fut: asyncio.Future[MessageId], *, handed_over: bool
    ) -> None:
        if fut.cancelled():
            self.history.send_failed(handle, "cancelled", definite=not handed_over)
            return
        err = fut.exception()
        if err is None:
            self.history.send_ok(handle, fut.result().offset)
            self._acked[topic].add(msg)
        else:
            self.history.send_failed(handle, err, definite=not handed_over or is_definite_failure(err))

    # -------------------------------------------------------------------- consumers

    async def _make_consumers(
        self, j: int, subscription: str, sub_type: SubType
    ) -> tuple[str, str, dict[str, Consumer]]:
        client = DanubeClient(self.service_url, operation_timeout_s=self.operation_timeout_s)
        self._clients.append(client)
        consumers = {}
        for topic in self.topics:
            consumers[topic] = await client.subscribe(
                topic,
                subscription=subscription,
                consumer_name=f"{self.run_id}-consumer-{j}",
                sub_type=sub_type,
                initial_position=InitialPosition.EARLIEST,
                receiver_queue_size=self.receiver_queue_size,
            )
        return f"consumer-{j}", subscription, consumers

    async def _consume(self, process: str, subscription: str, topic: str, consumer: Consumer) -> None:
        delivered = self._delivered[(subscription, topic)]
        history = self.history
        if subscription in self._held:
            await self._released.wait()
        while not self._stop_consuming.is_set():
            try:
                msgs = await consumer.receive_many(500, timeout_s=0.2)
            except ClientTimeout:
                continue  # nothing for 0.2 s: look at the stop flag again
            except ClientClosed:
                return
            except DanubeError as err:
                self.errors.append(f"{process} ({subscription}) on {topic}: {type(err).__name__}: {err}")
                log.warning("workload %s: %s on %s stopped: %s", self.run_id, process, topic, err)
                return
            for m in msgs:
                msg = decode_payload(m.payload)
                history.delivered(
                    process, topic, subscription, msg, m.offset, redelivery=m.redelivery_count > 0
                )
                if msg is not None:
                    delivered.add(msg)
                try:
                    await consumer.ack(m)
                except ClientClosed:
                    return
                history.acked(process, topic, subscription, m.offset, msg)


async def log_end(admin_addr: str, topic: str, *, timeout_s: float = 10.0) -> int | None:
    """The next offset of ``topic``'s log as its owner reports it (admin ``GetTopicStats``), or
    None if no owner answers with a served log within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(admin_addr) as channel:
        stub = apb_grpc.TopicAdminStub(channel)
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                st = await stub.GetTopicStats(apb.TopicStatsRequest(name=topic), timeout=min(5.0, remaining))
            except grpc.aio.AioRpcError as err:
                log.info("stats of %s: %s; asking again", topic, err.code().name)
            else:
                if st.dispatch_strategy == "reliable" and st.state == "":
                    return int(st.next_offset)
                log.info("stats of %s: not a served log yet (%r); asking again", topic, st.state)
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    return None


async def final_read(
    service_url: str,
    topic: str,
    *,
    expect_at_least: int,
    timeout_s: float,
    idle_s: float = 2.0,
    subscription: str | None = None,
    admin_addr: str | None = None,
    past_end_idle_s: float = 0.25,
    read_compacted: bool = False,
) -> list[tuple[int, MsgId | None]]:
    """Everything ``topic`` keeps, as a new exclusive subscription from ``earliest`` receives it.

    Reads until nothing arrived for ``idle_s`` after at least ``expect_at_least`` distinct
    offsets, or until ``timeout_s`` (then returns what it has, so the checker says what is
    missing). With ``admin_addr`` (the lookup's admin API) and nothing writing to the topic any
    more, the topic's log end is asked once subscribed: the read then ends as soon as it holds
    the last offset below that end and ``expect_at_least`` distinct offsets, and nothing more
    came for ``past_end_idle_s`` (if the end is never reached, the idle rule above still ends
    it). A repeated offset holding the same message (a redelivery after the reader's own
    reconnect) is dropped; a repeated offset holding another message is kept for the checker.
    ``read_compacted``: the subscription reads the topic's compacted view below its horizon.
    The subscription is deleted at the end.
    """
    out: list[tuple[int, MsgId | None]] = []
    seen: dict[int, MsgId | None] = {}
    deadline = time.monotonic() + timeout_s
    async with DanubeClient(service_url) as client:
        consumer = await client.subscribe(
            topic,
            subscription=subscription or f"final-read-{uuid.uuid4().hex[:8]}",
            consumer_name=f"reader-{uuid.uuid4().hex[:8]}",
            sub_type=SubType.EXCLUSIVE,
            initial_position=InitialPosition.EARLIEST,
            read_compacted=read_compacted,
        )
        end = None
        if admin_addr is not None:
            end = await log_end(admin_addr, topic, timeout_s=min(10.0, timeout_s))
        highest = -1
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                at_end = end is not None and highest >= end - 1 and len(seen) >= expect_at_least
                try:
                    msgs = await consumer.receive_many(
                        1000, timeout_s=min(past_end_idle_s if at_end else idle_s, remaining)
                    )
                except ClientTimeout:
                    if len(seen) >= expect_at_least:
                        break
                    continue
                for m in msgs:
                    msg = decode_payload(m.payload)
                    if m.offset not in seen or seen[m.offset] != msg:
                        seen.setdefault(m.offset, msg)
                        out.append((m.offset, msg))
                    highest = max(highest, m.offset)
                    await consumer.ack(m)
            else:
                log.warning(
                    "final read of %s: %d distinct offsets after %.0f s, expected at least %d",
                    topic,
                    len(seen),
                    timeout_s,
                    expect_at_least,
                )
        finally:
            try:
                await consumer.close(unsubscribe=True)
            except DanubeError as err:
                log.warning("final read of %s: deleting the subscription: %s", topic, err)
    return out
