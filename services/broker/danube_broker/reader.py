"""Readers: non-durable, exclusive subscriptions of a reliable topic (pure parts).

A reader reads a reliable topic from a chosen position without a durable subscription:

- its subscription lives in the owning broker's memory only: nothing is written to etcd (no
  subscription record, no cursor), and retention does not wait for it (it is not among the
  persisted cursors);
- a move (without object storage: a drain, :func:`danube_broker.handoff.drained`) waits for a
  reader only while its consumer has a stream: an attached reader acknowledges what it
  receives, so it is waited for until it has received the log's end, as a durable subscription
  is; one without a stream is not waited for (it re-attaches at the new owner, which holds
  only what was published from the move on, and is told the offsets it missed as skipped);
- it is exclusive and goes away with its consumer (closed, or expired after
  ``consumer_reconnect_grace_s`` without a stream);
- a Subscribe naming an existing reader subscription takes its consumer over and *repositions*
  it at the requested start: a client re-attaching (stream broken, topic moved) asks for the
  offset after the last one it received, so it continues without a gap or a duplicate;
- its failure policy has no ack timeout and never poisons: a reader acknowledges what it
  received only to open its window (the client does it), and nothing is ever redelivered
  but what a broken stream took back.

Messages a reader starts before that retention already cut are reported as skipped, exactly as
for a durable subscription (``MessageBatch.skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from danube_broker.dispatch.reliable.log_port import TopicLogPort
from danube_broker.dispatch.reliable.policy import SubscriptionPolicy
from danube_common.pb import DanubeApi_pb2 as pb

if TYPE_CHECKING:
    from danube_broker.subscription import Subscription

StartKind = Literal["earliest", "latest", "offset", "time"]

#: A reader's failure policy: no ack timeout, unlimited redeliveries (never poison).
READER_POLICY = SubscriptionPolicy(max_redeliveries=0, ack_timeout_ms=0)


@dataclass(frozen=True, slots=True)
class ReaderStart:
    """Where a reader starts: the log's first or next offset, an offset, or a publish time (ms)."""

    kind: StartKind = "latest"
    value: int = 0

    @classmethod
    def from_proto(cls, msg: pb.ReaderStart) -> ReaderStart:
        which = msg.WhichOneof("position")
        if which == "earliest":
            return cls("earliest")
        if which == "offset":
            return cls("offset", msg.offset)
        if which == "publish_time_ms":
            return cls("time", msg.publish_time_ms)
        return cls("latest")

    def describe(self) -> str:
        if self.kind == "offset":
            return f"offset {self.value}"
        if self.kind == "time":
            return f"publish time {self.value} ms"
        return self.kind


def reader_attached(sub: Subscription) -> bool:
    """A reader's subscription whose consumer has a delivery stream now."""
    return sub.non_durable and any(c.connected for c in sub.consumers.values())


async def resolve_start(start: ReaderStart, log: TopicLogPort) -> int:
    """The offset ``start`` names in ``log`` (an offset is clamped to what the log keeps)."""
    if start.kind == "earliest":
        return log.first_offset
    if start.kind == "offset":
        # Not raised to first_offset: a reader asking for offsets that are gone is told so
        # (skipped ranges) by its dispatcher, instead of silently starting later.
        return min(start.value, log.next_offset)
    if start.kind == "time":
        return await log.offset_for_time(start.value)
    return log.next_offset
