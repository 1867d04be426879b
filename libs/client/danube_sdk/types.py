"""Value types of the SDK: option enums, message ids and received messages."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

if TYPE_CHECKING:
    from danube_common.pb import DanubeApi_pb2 as pb

T = TypeVar("T")


class SubType(enum.IntEnum):
    """Subscription type; the values are the wire values of ``ConsumerRequest.SubscriptionType``."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class DispatchStrategy(enum.IntEnum):
    """How the broker keeps a topic: in memory (at-most-once) or in its write-ahead log."""

    NON_RELIABLE = 0
    RELIABLE = 1


class InitialPosition(enum.IntEnum):
    """Where a *new* subscription starts (reliable topics); an existing one resumes from its
    acknowledged cursor. The values are the wire values of ``ConsumerRequest.InitialPosition``."""

    #: Only messages published after the subscription is created.
    LATEST = 0
    #: Every message the topic still keeps (replay).
    EARLIEST = 1


class AccessMode(enum.IntEnum):
    """Producer access mode: many producers per topic, or one that excludes all others."""

    SHARED = 0
    EXCLUSIVE = 1


class RoutingMode(enum.Enum):
    """Which partition a message *without a key* goes to.

    Messages with a key always go to partition ``fnv1a64(key) % partitions``.
    """

    #: Cycle through the partitions message by message.
    ROUND_ROBIN = "round_robin"
    #: Pick one partition at random when the producer is created and send everything there.
    SINGLE_PARTITION = "single_partition"


class MessageId(NamedTuple):
    """Where a message landed: the (partition) topic and its offset there, and for a message
    sent in a pack (compression per batch, :mod:`danube_sdk.packs`) its index in the pack."""

    topic: str
    offset: int
    producer_id: int = 0
    batch_index: int | None = None

    def __str__(self) -> str:
        if self.batch_index is None:
            return f"{self.topic}@{self.offset}"
        return f"{self.topic}@{self.offset}:{self.batch_index}"


class Message(Generic[T]):
    """A received message. Fields are decoded from the wire frame on first access.

    ``value()`` is the payload decoded by the consumer's schema (``subscribe(schema=...)``);
    without one it is the payload bytes.
    """

    __slots__ = ("_decode", "_props", "_raw", "_source")

    def __init__(
        self, raw: pb.StreamMessage, source: str = "", decode: Callable[[bytes], Any] | None = None
    ) -> None:
        self._raw = raw
        #: The partition topic this message was received on (acks are routed by it).
        self._source = source or raw.msg_id.topic_name
        self._props: dict[str, str] | None = None
        self._decode = decode

    @property
    def payload(self) -> bytes:
        return self._raw.payload

    def value(self) -> T:
        """The payload decoded by the consumer's schema (decoded on each call; raises
        ``InvalidPayload`` if it does not decode), or the payload bytes without a schema."""
        if self._decode is None:
            return cast(T, self._raw.payload)
        return cast(T, self._decode(self._raw.payload))

    @property
    def schema_id(self) -> int | None:
        """The registry id of the schema the message was written with (None: none)."""
        return self._raw.schema_id if self._raw.HasField("schema_id") else None

    @property
    def schema_version(self) -> int | None:
        """The version of that schema (None: none)."""
        return self._raw.schema_version if self._raw.HasField("schema_version") else None

    @property
    def properties(self) -> dict[str, str]:
        if self._props is None:
            self._props = dict(self._raw.attributes)
        return self._props

    @property
    def key(self) -> str | None:
        """The routing key the producer set, or None."""
        return self._raw.routing_key if self._raw.HasField("routing_key") else None

    @property
    def topic(self) -> str:
        """The topic the message was read from (the partition, for a partitioned topic)."""
        return self._source

    @property
    def message_id(self) -> MessageId:
        mid = self._raw.msg_id
        return MessageId(self._source, mid.topic_offset, mid.producer_id)

    @property
    def offset(self) -> int:
        return self._raw.msg_id.topic_offset

    @property
    def publish_time_ms(self) -> int:
        return self._raw.publish_time

    @property
    def producer_name(self) -> str:
        return self._raw.producer_name

    @property
    def redelivery_count(self) -> int:
        """How many times this message was delivered to this subscription before (0: first
        delivery). Reliable topics redeliver after a nack, an ack timeout or a reconnect."""
        return self._raw.redelivery_count

    @property
    def sequence_id(self) -> int:
        """The producer's sequence number for this message (0: the producer set none)."""
        return self._raw.sequence_id

    @property
    def deliver_at_ms(self) -> int:
        """The due time its producer asked for (epoch ms; 0: none). See ``send(deliver_after=)``."""
        return self._raw.deliver_at_ms

    @property
    def batch_index(self) -> int | None:
        """Its index in the pack it arrived in (a compressing producer packs the messages of
        a batch into one record, :mod:`danube_sdk.packs`), or None: it arrived alone."""
        return None

    @property
    def chunk_offsets(self) -> tuple[int, ...]:
        """Offsets of the chunks a large message arrived in (acked and nacked together); ()
        for a message that was not chunked (see :mod:`danube_sdk.chunking`)."""
        return ()

    @property
    def raw(self) -> pb.StreamMessage:
        """The wire message as delivered (for acks and nacks, which echo its ``msg_id``)."""
        return self._raw

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, offset={self.offset}, key={self.key!r}, "
            f"payload={self.payload[:32]!r}{'...' if len(self.payload) > 32 else ''})"
        )
