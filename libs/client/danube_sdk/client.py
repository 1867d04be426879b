"""DanubeClient: the entry point. Knows the service URL, owns channels, producers, consumers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from danube_common.errors import DanubeError, TopicNotFound
from danube_common.topic_name import TopicName
from danube_sdk.connection import Connections
from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed
from danube_sdk.options import ClientOptions, ConsumerOptions, ProducerOptions
from danube_sdk.producer import Producer
from danube_sdk.retry import retry_until
from danube_sdk.types import AccessMode, DispatchStrategy, InitialPosition, RoutingMode, SubType

log = logging.getLogger(__name__)


class DanubeClient:
    """A connection to a Danube cluster through its service URL (the lookup service).

    ``DanubeClient("http://127.0.0.1:6650")`` makes no call until a producer or consumer is
    created. Use ``async with`` or call :meth:`close`, which closes every producer and
    consumer made by this client, then the channels.
    """

    def __init__(
        self,
        service_url: str,
        *,
        rpc_timeout_s: float = 10.0,
        operation_timeout_s: float = 30.0,
        health_check_interval_s: float = 5.0,
    ) -> None:
        self.service_url = service_url
        self._opts = ClientOptions(
            rpc_timeout_s=rpc_timeout_s,
            operation_timeout_s=operation_timeout_s,
            health_check_interval_s=health_check_interval_s,
        )
        self._conns = Connections(service_url, rpc_timeout_s=rpc_timeout_s)
        self._producers: set[Producer] = set()
        self._consumers: set[Consumer] = set()
        self._closed = False

    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        dispatch_strategy: DispatchStrategy = DispatchStrategy.NON_RELIABLE,
        access_mode: AccessMode = AccessMode.SHARED,
        batching_max_messages: int = 1000,
        batching_max_bytes: int = 1024 * 1024,
        batching_max_publish_delay_ms: float = 2.0,
        max_inflight_batches: int = 5,
        max_pending_messages: int = 20_000,
        send_timeout_s: float = 30.0,
        routing_mode: RoutingMode = RoutingMode.ROUND_ROBIN,
        enable_idempotence: bool = True,
    ) -> Producer:
        """Attach a producer to ``topic`` (every partition of it, if partitioned).

        A topic that does not exist yet is created by the broker as a plain topic. The
        producer of partition ``n`` is named ``{producer_name}-{n}``. With
        ``enable_idempotence`` every message carries a sequence id, so a reliable topic's
        broker drops the copies a reconnect resends (give a stable ``producer_name`` to keep
        that across restarts of your process).
        """
        self._check_open()
        TopicName.parse(topic)
        opts = ProducerOptions(
            dispatch_strategy=DispatchStrategy(dispatch_strategy),
            access_mode=AccessMode(access_mode),
            batching_max_messages=batching_max_messages,
            batching_max_bytes=batching_max_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            max_inflight_batches=max_inflight_batches,
            max_pending_messages=max_pending_messages,
            send_timeout_s=send_timeout_s,
            routing_mode=RoutingMode(routing_mode),
            enable_idempotence=bool(enable_idempotence),
        )
        partitions = await self.topic_partitions(topic) or [topic]
        producer = Producer(
            self._conns,
            topic=topic,
            name=producer_name or f"producer-{uuid.uuid4().hex[:12]}",
            partitions=partitions,
            opts=opts,
            client_opts=self._opts,
        )
        await producer._start()
        producer.on_closed = self._producers.discard
        self._producers.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str,
        *,
        subscription: str,
        consumer_name: str | None = None,
        sub_type: SubType = SubType.SHARED,
        key_filters: Iterable[str] = (),
        receiver_queue_size: int = 1000,
        ack_batch_size: int = 1000,
        ack_flush_interval_ms: float = 5.0,
        initial_position: InitialPosition = InitialPosition.LATEST,
        max_unacked_messages: int = 0,
    ) -> Consumer:
        """Subscribe to an existing ``topic`` (all its partitions) as ``subscription``.

        Raises TopicNotFound if the topic does not exist: produce to it first, or create it
        with ``danube-admin topics create``. Subscribing again with the same consumer name
        takes the previous consumer over. ``initial_position`` says where a *new*
        subscription of a reliable topic starts (an existing one resumes from its cursor);
        ``max_unacked_messages`` bounds what the broker delivers before acks (0: its default).
        """
        self._check_open()
        TopicName.parse(topic)
        if not subscription:
            raise ValueError("subscription is required")
        opts = ConsumerOptions(
            sub_type=SubType(sub_type),
            key_filters=tuple(key_filters),
            receiver_queue_size=receiver_queue_size,
            ack_batch_size=ack_batch_size,
            ack_flush_interval_ms=ack_flush_interval_ms,
            initial_position=InitialPosition(initial_position),
            max_unacked_messages=max_unacked_messages,
        )
        partitions = await self.topic_partitions(topic)
        if not partitions:
            raise TopicNotFound(
                f"topic {topic} does not exist: create it first by producing to it, "
                f"or with `danube-admin topics create {topic}`"
            )
        consumer = Consumer(
            self._conns,
            topic=topic,
            subscription=subscription,
            name=consumer_name or f"consumer-{uuid.uuid4().hex[:12]}",
            partitions=partitions,
            opts=opts,
            client_opts=self._opts,
        )
        await consumer._start()
        consumer.on_closed = self._consumers.discard
        self._consumers.add(consumer)
        return consumer

    async def topic_partitions(self, topic: str) -> list[str]:
        """The partition topics of ``topic``: ``[topic]`` if plain, ``[]`` if unknown."""
        self._check_open()
        return await retry_until(
            lambda: self._conns.partitions(topic),
            timeout_s=self._opts.operation_timeout_s,
            what=f"looking up the partitions of {topic}",
        )

    async def lookup_topic(self, topic: str) -> str:
        """The URL of the broker serving ``topic`` (placing a new topic on a broker)."""
        self._check_open()
        return await self._conns.lookup(topic)

    async def close(self) -> None:
        """Close every producer (flushing it) and consumer of this client, then the channels."""
        if self._closed:
            return
        self._closed = True
        for producer in list(self._producers):
            try:
                await producer.close()
            except DanubeError as err:
                log.warning("closing producer on %s: %s", producer.topic, err)
        for consumer in list(self._consumers):
            try:
                await consumer.close()
            except DanubeError as err:
                log.warning("closing consumer on %s: %s", consumer.topic, err)
        self._producers.clear()
        self._consumers.clear()
        await self._conns.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the client is closed")

    async def __aenter__(self) -> DanubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
