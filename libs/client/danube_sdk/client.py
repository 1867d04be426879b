"""DanubeClient: the entry point. Knows the service URL, owns channels, producers, consumers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar, overload

from danube_common.compression import Compression
from danube_common.errors import DanubeError, InvalidArgument, TopicNotFound
from danube_common.topic_name import TopicName
from danube_sdk import multi_consumer
from danube_sdk.auth import ChannelSecurity, TlsOptions, TokenSupplier
from danube_sdk.connection import Connections
from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed
from danube_sdk.options import ClientOptions, ConsumerOptions, ProducerOptions
from danube_sdk.producer import Producer
from danube_sdk.reader import Reader
from danube_sdk.retry import retry_until
from danube_sdk.schema_registry import SchemaRegistryClient
from danube_sdk.schemas import Schema, SchemaReference
from danube_sdk.start_position import StartPosition
from danube_sdk.types import AccessMode, DispatchStrategy, InitialPosition, RoutingMode, SubType

log = logging.getLogger(__name__)

T = TypeVar("T")


class DanubeClient:
    """A connection to a Danube cluster through its service URL (the lookup service).

    ``DanubeClient("http://127.0.0.1:6650")`` makes no call until a producer or consumer is
    created. Use ``async with`` or call :meth:`close`, which closes every producer and
    consumer made by this client, then the channels.

    A secured cluster::

        DanubeClient(
            "https://localhost:6650",
            tls=TlsOptions(ca_file="ca.pem"),                      # + cert_file/key_file for mTLS
            token=jwt,                                             # or token_supplier=get_jwt
        )

    ``tls``: every channel is TLS (whatever the URL's scheme). ``token``: sent as
    ``authorization: Bearer <token>`` on every RPC; ``token_supplier``: a function or coroutine
    function called before every RPC for the token to send. A token forces TLS: without ``tls``
    the URL must be ``https://`` (checked against the default roots); an ``http://`` URL with a
    token is refused (ConfigError), so a token never travels in clear text. Unreadable TLS
    files raise ConfigError here, not at the first call. Refused calls raise
    :class:`~danube_sdk.errors.Unauthenticated` (no, bad or expired token) or
    :class:`~danube_sdk.errors.PermissionDenied` (the token's subject lacks the permission).
    ``multiplex`` (default): the producers and consumers attached to one broker share one
    publish stream and one delivery stream (PublishMux / ConsumeMux) instead of a stream each.
    """

    def __init__(
        self,
        service_url: str,
        *,
        rpc_timeout_s: float = 10.0,
        operation_timeout_s: float = 30.0,
        health_check_interval_s: float = 5.0,
        tls: TlsOptions | None = None,
        token: str | None = None,
        token_supplier: TokenSupplier | None = None,
        multiplex: bool = True,
    ) -> None:
        self.service_url = service_url
        self._opts = ClientOptions(
            rpc_timeout_s=rpc_timeout_s,
            operation_timeout_s=operation_timeout_s,
            health_check_interval_s=health_check_interval_s,
            multiplex=multiplex,
        )
        if not service_url:
            raise ValueError("service_url is required, e.g. http://127.0.0.1:6650")
        security = ChannelSecurity(service_url, tls=tls, token=token, token_supplier=token_supplier)
        self._conns = Connections(
            service_url, rpc_timeout_s=rpc_timeout_s, security=security, multiplex=multiplex
        )
        self._producers: set[Producer[Any]] = set()
        self._consumers: set[Consumer[Any]] = set()
        self._registry: SchemaRegistryClient | None = None
        self._closed = False

    @overload
    async def create_producer(
        self,
        topic: str,
        *,
        schema: Schema[T],
        producer_name: str | None = None,
        dispatch_strategy: DispatchStrategy = DispatchStrategy.NON_RELIABLE,
        access_mode: AccessMode = AccessMode.SHARED,
        batching_max_messages: int = 1000,
        batching_max_bytes: int = 1024 * 1024,
        batching_max_publish_delay_ms: float = 100.0,
        max_inflight_batches: int = 5,
        max_pending_messages: int = 20_000,
        max_pending_bytes: int = 2 * 1024 * 1024,
        send_timeout_s: float = 30.0,
        routing_mode: RoutingMode = RoutingMode.ROUND_ROBIN,
        enable_idempotence: bool = True,
        compression: Compression | str = Compression.NONE,
        pack_batches: bool = True,
        enable_chunking: bool = True,
    ) -> Producer[T]: ...

    @overload
    async def create_producer(
        self,
        topic: str,
        *,
        schema: None = None,
        schema_ref: SchemaReference | None = None,
        producer_name: str | None = None,
        dispatch_strategy: DispatchStrategy = DispatchStrategy.NON_RELIABLE,
        access_mode: AccessMode = AccessMode.SHARED,
        batching_max_messages: int = 1000,
        batching_max_bytes: int = 1024 * 1024,
        batching_max_publish_delay_ms: float = 100.0,
        max_inflight_batches: int = 5,
        max_pending_messages: int = 20_000,
        max_pending_bytes: int = 2 * 1024 * 1024,
        send_timeout_s: float = 30.0,
        routing_mode: RoutingMode = RoutingMode.ROUND_ROBIN,
        enable_idempotence: bool = True,
        compression: Compression | str = Compression.NONE,
        pack_batches: bool = True,
        enable_chunking: bool = True,
    ) -> Producer[bytes]: ...

    async def create_producer(
        self,
        topic: str,
        *,
        schema: Schema[Any] | None = None,
        schema_ref: SchemaReference | None = None,
        producer_name: str | None = None,
        dispatch_strategy: DispatchStrategy = DispatchStrategy.NON_RELIABLE,
        access_mode: AccessMode = AccessMode.SHARED,
        batching_max_messages: int = 1000,
        batching_max_bytes: int = 1024 * 1024,
        batching_max_publish_delay_ms: float = 100.0,
        max_inflight_batches: int = 5,
        max_pending_messages: int = 20_000,
        max_pending_bytes: int = 2 * 1024 * 1024,
        send_timeout_s: float = 30.0,
        routing_mode: RoutingMode = RoutingMode.ROUND_ROBIN,
        enable_idempotence: bool = True,
        compression: Compression | str = Compression.NONE,
        pack_batches: bool = True,
        enable_chunking: bool = True,
    ) -> Producer[Any]:
        """Attach a producer to ``topic`` (every partition of it, if partitioned).

        A topic that does not exist yet is created by the broker as a plain topic. The
        producer of partition ``n`` is named ``{producer_name}-{n}``. With
        ``enable_idempotence`` every message carries a sequence id, so a reliable topic's
        broker drops the copies a reconnect resends (give a stable ``producer_name`` to keep
        that across restarts of your process). One name is one producer at the broker: a
        producer of the same name on the same topic that this client still has open is flushed
        and closed first (it then raises ClientClosed saying so).

        ``schema``: a typed schema (:mod:`danube_sdk.schemas`); ``send`` then takes values and
        encodes them. ``schema_ref``: a registered subject for payload bytes. Either way the
        version is resolved through the registry once, here, sent in ``CreateProducer`` (pinned)
        and stamped on every message (``producer.schema``).

        ``compression``: ``none``, ``lz4`` or ``zstd`` (or a :class:`Compression`); consumers
        decompress. With ``pack_batches`` (the default) the messages of a batch that share a
        routing key travel as one record compressed as a whole (they share an offset and are
        told apart by ``Message.batch_index``; see :mod:`danube_sdk.packs`); without it each
        payload is compressed alone. ``enable_chunking``: a payload larger than the
        broker's limit is sent as chunks and reassembled by consumers (else MessageTooLarge).
        """
        self._check_open()
        TopicName.parse(topic)
        if schema is not None and schema_ref is not None:
            raise InvalidArgument("give schema (typed values) or schema_ref (payload bytes), not both")
        opts = ProducerOptions(
            dispatch_strategy=DispatchStrategy(dispatch_strategy),
            access_mode=AccessMode(access_mode),
            batching_max_messages=batching_max_messages,
            batching_max_bytes=batching_max_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            max_inflight_batches=max_inflight_batches,
            max_pending_messages=max_pending_messages,
            max_pending_bytes=max_pending_bytes,
            send_timeout_s=send_timeout_s,
            routing_mode=RoutingMode(routing_mode),
            enable_idempotence=bool(enable_idempotence),
            compression=Compression.parse(compression),
            pack_batches=bool(pack_batches),
            enable_chunking=bool(enable_chunking),
        )
        target = schema if schema is not None else schema_ref
        bound = await self.schemas().bind_producer(target) if target is not None else None
        partitions = await self.topic_partitions(topic) or [topic]
        name = producer_name or f"producer-{uuid.uuid4().hex[:12]}"
        for old in [p for p in self._producers if (p.topic, p.producer_name) == (topic, name)]:
            await old._take_over()
        producer: Producer[Any] = Producer(
            self._conns,
            topic=topic,
            name=name,
            partitions=partitions,
            opts=opts,
            client_opts=self._opts,
            schema=bound,
            encode=schema.encode if schema is not None else None,
        )
        await producer._start()
        producer.on_closed = self._producers.discard
        self._producers.add(producer)
        return producer

    @overload
    async def subscribe(
        self,
        topic: str,
        *,
        subscription: str,
        schema: Schema[T],
        consumer_name: str | None = None,
        sub_type: SubType = SubType.SHARED,
        key_filters: Iterable[str] = (),
        receiver_queue_size: int = 1000,
        ack_batch_size: int = 1000,
        ack_flush_interval_ms: float = 5.0,
        initial_position: InitialPosition = InitialPosition.LATEST,
        max_unacked_messages: int = 0,
        chunked_message_timeout_s: float = 60.0,
        max_pending_chunked_messages: int = 100,
        read_compacted: bool = False,
    ) -> Consumer[T]: ...

    @overload
    async def subscribe(
        self,
        topic: str,
        *,
        subscription: str,
        schema: None = None,
        consumer_name: str | None = None,
        sub_type: SubType = SubType.SHARED,
        key_filters: Iterable[str] = (),
        receiver_queue_size: int = 1000,
        ack_batch_size: int = 1000,
        ack_flush_interval_ms: float = 5.0,
        initial_position: InitialPosition = InitialPosition.LATEST,
        max_unacked_messages: int = 0,
        chunked_message_timeout_s: float = 60.0,
        max_pending_chunked_messages: int = 100,
        read_compacted: bool = False,
    ) -> Consumer[bytes]: ...

    async def subscribe(
        self,
        topic: str,
        *,
        subscription: str,
        schema: Schema[Any] | None = None,
        consumer_name: str | None = None,
        sub_type: SubType = SubType.SHARED,
        key_filters: Iterable[str] = (),
        receiver_queue_size: int = 1000,
        ack_batch_size: int = 1000,
        ack_flush_interval_ms: float = 5.0,
        initial_position: InitialPosition = InitialPosition.LATEST,
        max_unacked_messages: int = 0,
        chunked_message_timeout_s: float = 60.0,
        max_pending_chunked_messages: int = 100,
        read_compacted: bool = False,
    ) -> Consumer[Any]:
        """Subscribe to an existing ``topic`` (all its partitions) as ``subscription``.

        Raises TopicNotFound if the topic does not exist: produce to it first, or create it
        with ``danube-admin topics create``. Subscribing again with the same consumer name
        takes the previous consumer over: one of this client's is closed first (its buffered
        acks sent; it then raises ClientClosed saying so). ``initial_position`` says where a *new*
        subscription of a reliable topic starts (an existing one resumes from its cursor);
        ``max_unacked_messages`` bounds what the broker delivers before acks (0: its default).
        ``schema``: ``msg.value()`` decodes payloads with it (no registry call is made).
        A chunked message with no new chunk for ``chunked_message_timeout_s``, or beyond
        ``max_pending_chunked_messages`` incomplete ones per partition, is dropped (counted in
        ``consumer.chunked_dropped``; its chunks acknowledged).
        ``read_compacted`` (reliable topics): read the topic's compacted view, only the newest
        message of each routing key below its compaction horizon (offsets jump over the rest),
        then everything from the horizon on. It is fixed when the subscription is created: an
        existing subscription keeps the value it was created with, whatever is passed here.
        A non-reliable topic refuses it (FailedPrecondition).
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
            chunked_message_timeout_s=chunked_message_timeout_s,
            max_pending_chunked_messages=max_pending_chunked_messages,
            read_compacted=bool(read_compacted),
        )
        partitions = await self.topic_partitions(topic)
        if not partitions:
            raise TopicNotFound(
                f"topic {topic} does not exist: create it first by producing to it, "
                f"or with `danube-admin topics create {topic}`"
            )
        name = consumer_name or f"consumer-{uuid.uuid4().hex[:12]}"
        same = (topic, subscription, name)
        for old in [c for c in self._consumers if (c.topic, c.subscription, c.consumer_name) == same]:
            await old._take_over()
        consumer: Consumer[Any] = Consumer(
            self._conns,
            topic=topic,
            subscription=subscription,
            name=name,
            partitions=partitions,
            opts=opts,
            client_opts=self._opts,
            decode=schema.decode if schema is not None else None,
        )
        await consumer._start()
        consumer.on_closed = self._consumers.discard
        self._consumers.add(consumer)
        return consumer

    async def create_reader(
        self,
        topic: str,
        *,
        start: StartPosition | str | int | datetime = StartPosition.LATEST,
        reader_name: str | None = None,
        schema: Schema[Any] | None = None,
        receiver_queue_size: int = 1000,
        read_compacted: bool = False,
    ) -> Reader[Any]:
        """Read the reliable ``topic`` from ``start`` without a durable subscription.

        ``start``: ``"earliest"``, ``"latest"`` (default), an offset (``int``; a plain topic
        only: offsets are per partition), a :class:`datetime` or
        ``StartPosition.timestamp(ms)`` (the first message published at or after it). Nothing
        is stored in etcd and retention does not wait for the reader; it follows the live tail
        and continues after a topic move from the next offset it has not received (see
        :mod:`danube_sdk.reader`). A non-reliable topic is refused (FailedPrecondition).
        ``read_compacted``: read the topic's compacted view (only the newest message of each
        routing key below its compaction horizon, then everything from the horizon on); asked
        for again on every re-attach.
        """
        self._check_open()
        TopicName.parse(topic)
        position = StartPosition.of(start)
        partitions = await self.topic_partitions(topic)
        if not partitions:
            raise TopicNotFound(
                f"topic {topic} does not exist: create it first by producing to it, "
                f"or with `danube-admin topics create {topic} --dispatch-strategy reliable`"
            )
        if position.kind == "offset" and len(partitions) > 1:
            raise InvalidArgument(
                f"{topic} has {len(partitions)} partitions and offsets are per partition: read a "
                "partition (its own topic name), or start at earliest, latest or a timestamp"
            )
        name = reader_name or f"reader-{uuid.uuid4().hex[:12]}"
        opts = ConsumerOptions(
            sub_type=SubType.EXCLUSIVE,
            receiver_queue_size=receiver_queue_size,
            max_unacked_messages=receiver_queue_size,
            read_compacted=bool(read_compacted),
        )
        consumer: Consumer[Any] = Consumer(
            self._conns,
            topic=topic,
            subscription=name,
            name=name,
            partitions=partitions,
            opts=opts,
            client_opts=self._opts,
            decode=schema.decode if schema is not None else None,
            reader=position,
        )
        await consumer._start()
        consumer.on_closed = self._consumers.discard
        self._consumers.add(consumer)
        return Reader(consumer)

    async def subscribe_many(
        self,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        subscription: str,
        schema: Schema[Any] | None = None,
        consumer_name: str | None = None,
        sub_type: SubType = SubType.SHARED,
        key_filters: Iterable[str] = (),
        receiver_queue_size: int = 1000,
        ack_batch_size: int = 1000,
        ack_flush_interval_ms: float = 5.0,
        initial_position: InitialPosition = InitialPosition.LATEST,
        max_unacked_messages: int = 0,
        read_compacted: bool = False,
        refresh_interval_s: float = multi_consumer.DEFAULT_REFRESH_INTERVAL_S,
    ) -> multi_consumer.MultiTopicConsumer[Any]:
        """Subscribe to many topics as one consumer: a list (``topics``, each must exist), or every
        topic of one namespace matching ``pattern`` (``/namespace/REGEX``), followed as topics are
        created and deleted (listed every ``refresh_interval_s``). Messages of all topics are
        merged fairly; options as :meth:`subscribe` (``read_compacted`` applies to every topic,
        those found later included). See :mod:`danube_sdk.multi_consumer`.
        """
        self._check_open()
        if not subscription:
            raise ValueError("subscription is required")
        for t in topics if topics is not None and not isinstance(topics, str) else ():
            TopicName.parse(t)
        opts = ConsumerOptions(
            sub_type=SubType(sub_type),
            key_filters=tuple(key_filters),
            receiver_queue_size=receiver_queue_size,
            ack_batch_size=ack_batch_size,
            ack_flush_interval_ms=ack_flush_interval_ms,
            initial_position=InitialPosition(initial_position),
            max_unacked_messages=max_unacked_messages,
            read_compacted=bool(read_compacted),
        )
        consumer = await multi_consumer.create(
            self._conns,
            self._opts,
            topics=topics,
            pattern=pattern,
            subscription=subscription,
            name=consumer_name or f"consumer-{uuid.uuid4().hex[:12]}",
            opts=opts,
            decode=schema.decode if schema is not None else None,
            partitions_of=self.topic_partitions,
            refresh_interval_s=refresh_interval_s,
        )
        consumer.on_closed = self._consumers.discard
        self._consumers.add(consumer)
        return consumer

    def schemas(self) -> SchemaRegistryClient:
        """The schema registry, on the service URL (shares this client's channel and deadlines)."""
        self._check_open()
        if self._registry is None:
            self._registry = SchemaRegistryClient(self._conns)
        return self._registry

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
