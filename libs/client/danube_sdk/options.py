"""Frozen option records, validated once when a client, producer or consumer is created."""

from __future__ import annotations

from dataclasses import dataclass

from danube_common.compression import Compression
from danube_common.errors import InvalidArgument
from danube_sdk.types import AccessMode, DispatchStrategy, InitialPosition, RoutingMode, SubType

_UINT32_MAX = 2**32 - 1


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise InvalidArgument(what)


@dataclass(frozen=True, slots=True)
class ClientOptions:
    #: Deadline of each unary RPC (lookup, create, subscribe, ack ...).
    rpc_timeout_s: float = 10.0
    #: How long creating a producer or consumer keeps retrying retryable failures.
    operation_timeout_s: float = 30.0
    #: Interval of HealthCheck polls per attached producer/consumer (0: off).
    health_check_interval_s: float = 5.0
    #: One shared publish stream and one shared delivery stream per broker for all producers
    #: and consumers (PublishMux / ConsumeMux); False: a stream per producer and consumer.
    #: Brokers without the mux RPCs get per-topic streams either way.
    multiplex: bool = True

    def __post_init__(self) -> None:
        _require(self.rpc_timeout_s > 0, "rpc_timeout_s must be > 0")
        _require(self.operation_timeout_s > 0, "operation_timeout_s must be > 0")
        _require(self.health_check_interval_s >= 0, "health_check_interval_s must be >= 0")


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    dispatch_strategy: DispatchStrategy = DispatchStrategy.NON_RELIABLE
    access_mode: AccessMode = AccessMode.SHARED
    batching_max_messages: int = 1000
    batching_max_bytes: int = 1024 * 1024
    #: How long a partial batch may wait for the partition's batches in flight to be
    #: acknowledged (an idle partition sends at once; see libs/client/README.md, "Batching").
    batching_max_publish_delay_ms: float = 100.0
    #: Batches written to the broker but not acknowledged yet, per partition. At the cap the
    #: open batch keeps filling until an ack frees a slot, so batches grow with the load
    #: instead of many small batches queueing at the broker (like Kafka's
    #: ``max.in.flight.requests.per.connection``).
    max_inflight_batches: int = 5
    max_pending_messages: int = 20_000
    #: Payload and property bytes sent but not acknowledged, across partitions; ``send_async``
    #: waits beyond it (0: no byte bound). A message larger than this goes alone. What is
    #: pending past what the broker needs to keep its commits full only waits in the client:
    #: at a producer's full rate, its latency grows with this bound and its throughput does
    #: not (docs/benchmarks.md, "Bounded pending bytes"). Raise it for long round trips.
    max_pending_bytes: int = 2 * 1024 * 1024
    #: A message not acknowledged this long after ``send`` fails with Timeout (0: never).
    send_timeout_s: float = 30.0
    routing_mode: RoutingMode = RoutingMode.ROUND_ROBIN
    #: Number every message (``StreamMessage.sequence_id``) so the broker drops resent copies.
    enable_idempotence: bool = True
    #: Payload codec (a payload that does not get smaller is sent uncompressed).
    compression: Compression = Compression.NONE
    #: With compression, pack the messages of a batch that share a routing key into one
    #: record compressed as a whole (:mod:`danube_sdk.packs`); False: compress each alone.
    pack_batches: bool = True
    #: Split a payload larger than the broker's max_message_size_bytes into chunks (else
    #: MessageTooLarge).
    enable_chunking: bool = True

    def __post_init__(self) -> None:
        _require(self.batching_max_messages >= 1, "batching_max_messages must be >= 1")
        _require(self.batching_max_bytes >= 1, "batching_max_bytes must be >= 1")
        _require(self.batching_max_publish_delay_ms >= 0, "batching_max_publish_delay_ms must be >= 0")
        _require(self.max_inflight_batches >= 1, "max_inflight_batches must be >= 1")
        _require(self.max_pending_messages >= 1, "max_pending_messages must be >= 1")
        _require(self.max_pending_bytes >= 0, "max_pending_bytes must be >= 0 (0: no byte bound)")
        _require(self.send_timeout_s >= 0, "send_timeout_s must be >= 0 (0 disables the timeout)")


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    sub_type: SubType = SubType.SHARED
    key_filters: tuple[str, ...] = ()
    #: Messages buffered client-side across all partitions before reading pauses (each
    #: partition may always buffer its share, receiver_queue_size // partitions).
    receiver_queue_size: int = 1000
    #: Acks are sent in one AckBatch per partition when this many are buffered ...
    ack_batch_size: int = 1000
    #: ... or this long after the first buffered ack, whichever comes first.
    ack_flush_interval_ms: float = 5.0
    #: Where a new subscription starts (reliable topics).
    initial_position: InitialPosition = InitialPosition.LATEST
    #: Delivered-but-unacked messages the broker lets this consumer hold (0: broker default).
    max_unacked_messages: int = 0
    #: A chunked message with no new chunk for this long is dropped (and its chunks acked).
    chunked_message_timeout_s: float = 60.0
    #: Incomplete chunked messages held per partition; past it the oldest is dropped.
    max_pending_chunked_messages: int = 100
    #: Read the topic's compacted view (reliable topics; ``ConsumerRequest.read_compacted``):
    #: below its compaction horizon only the newest message of each routing key, so offsets
    #: jump over what compaction left out. A durable subscription keeps the value of the
    #: Subscribe that created it; a reader sends it on every attach.
    read_compacted: bool = False

    def __post_init__(self) -> None:
        _require(self.receiver_queue_size >= 1, "receiver_queue_size must be >= 1")
        _require(
            0 <= self.max_unacked_messages <= _UINT32_MAX,
            f"max_unacked_messages must be between 0 (broker default) and {_UINT32_MAX}",
        )
        _require(self.ack_batch_size >= 1, "ack_batch_size must be >= 1")
        _require(self.ack_flush_interval_ms >= 0, "ack_flush_interval_ms must be >= 0")
        _require(self.chunked_message_timeout_s > 0, "chunked_message_timeout_s must be > 0")
        _require(self.max_pending_chunked_messages >= 1, "max_pending_chunked_messages must be >= 1")
