"""What every subscription type's router shares: the routing result and the router interface.

A router decides *which consumer gets which messages* of a published batch. It is pure
bookkeeping over the subscription's routable consumers (in attach order: see
:attr:`danube_broker.consumer.Consumer.routable`) and knows nothing
of streams or delivery guarantees, so the non-reliable path (offer to bounded queues, drop or
block on overflow) and a reliable path (track unacked offsets, redeliver) can share it.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from danube_common.pb import DanubeApi_pb2 as pb

#: The message type flowing through dispatch: the protobuf object as received from the producer.
Msg: TypeAlias = pb.StreamMessage


class SubType(enum.Enum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    FAILOVER = "Failover"
    KEY_SHARED = "KeyShared"


class Target(Protocol):
    """A consumer as routers see it."""

    @property
    def name(self) -> str: ...

    @property
    def free(self) -> int:
        """Messages its queue can still take."""
        ...

    def accepts(self, key: str) -> bool:
        """Whether its key filters (KeyShared) let ``key`` through."""
        ...


@dataclass(slots=True)
class Routing:
    #: (consumer, messages for it in publish order); a consumer appears at most once.
    assignments: list[tuple[Target, list[Msg]]] = field(default_factory=list)
    #: Messages that found no room now but have a consumer (only routers that look at free
    #: space produce these; the others leave overflow to the queue that refuses them).
    overflow: list[Msg] = field(default_factory=list)
    #: Messages no consumer can take at all (none routable, or no key filter matches).
    unroutable: int = 0


class Router(abc.ABC):
    @abc.abstractmethod
    def set_consumers(self, consumers: Sequence[Target]) -> None:
        """The routable consumers, in attach order (called whenever that set changes)."""

    @abc.abstractmethod
    def route(self, batch: list[Msg]) -> Routing:
        """Split ``batch`` over the consumers; messages keep their relative order."""


@dataclass(slots=True)
class PublishStream:
    """The order guard of one publish stream (PublishBatches): its batches are stored in the
    order they were sent, or not at all. Once a commit of the topic's log fails after one of the
    stream's batches was admitted, later batches of the stream are refused too (retryable): the
    client then re-sends them all, in order, on a new stream, instead of a later batch being
    stored before an earlier refused one."""

    #: The log's failed-commit count when the stream's last batch was admitted (None: none yet).
    seen_failures: int | None = None
    #: A batch of the stream was refused: every later one is refused too.
    refused: bool = False


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What a publish stored: offsets ``first_offset .. first_offset + count - 1``, unless
    ``offsets`` lists them one per message (some were duplicates of earlier messages)."""

    first_offset: int
    count: int
    offsets: list[int] | None = None
    duplicates: int = 0


#: Told the outcome of a publish made without a task (``publish_now``): the result, or the error
#: the publish would have raised.
PublishDone: TypeAlias = Callable[[PublishResult | None, BaseException | None], None]
