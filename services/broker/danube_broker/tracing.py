"""The broker's part of a message's trace: it continues the context the producer put in the
message (:mod:`danube_common.observability.messages`).

For each message that carries a sampled context:

- ``publish {topic}`` (SERVER, child of the producer's ``send``): from the batch's arrival to
  its acknowledgement (durable for reliable topics), with the offset it got;
- ``wal commit`` (child of ``publish``; reliable topics): the group commit that made it durable,
  with a ``fsync`` child for the sync itself; one commit round is shared by many batches, so
  its spans carry the round's size;
- ``deliver {topic}`` (PRODUCER, child of the producer's ``send``): each time a consumer is
  sent the message (first delivery, redeliveries, and after a topic move: the context travels
  in the message, on any broker).

Nothing here runs unless tracing is on (:data:`tracing.ENABLED`) and a message of the batch is
sampled; an unsampled message costs one attribute lookup.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from danube_broker.dispatch.base import Msg
from danube_broker.wal.model import COMMIT_OBSERVER, CommitRound
from danube_common.observability import tracing
from danube_common.observability.messages import TRACEPARENT, messaging_attributes, sampled_parent

_TRACER_NAME = "danube_broker"


def _sampled(msgs: Sequence[Msg]) -> list[int]:
    """Indexes of the messages that carry a sampled context. This runs for every message of
    every batch while tracing is on: a membership test first (the cheapest look into a
    protobuf map), the flags only for messages that carry a context at all."""
    carrying = [i for i, m in enumerate(msgs) if TRACEPARENT in m.attributes]
    if not carrying:
        return carrying
    return [i for i in carrying if msgs[i].attributes[TRACEPARENT][-1:] in _SAMPLED_FLAGS]


#: The last hex digit of a W3C traceparent whose "sampled" bit (flags & 1) is set.
_SAMPLED_FLAGS = frozenset("13579bdf")


class PublishSpans:
    """The ``publish`` spans of one batch's sampled messages."""

    def __init__(self, topic: str, producer: str, msgs: Sequence[Msg], sampled: list[int]) -> None:
        self.spans: list[tuple[int, Span]] = []
        for i in sampled:
            parent = sampled_parent(msgs[i].attributes)
            if parent is None:
                continue
            span = tracing.tracer(_TRACER_NAME).start_span(
                f"publish {topic}",
                context=parent,
                kind=SpanKind.SERVER,
                attributes=messaging_attributes(
                    "receive",
                    topic,
                    {
                        "messaging.client.id": producer,
                        "messaging.batch.message_count": len(msgs),
                        "messaging.message.body.size": len(msgs[i].payload),
                    },
                ),
            )
            self.spans.append((i, span))

    def committed(self, rnd: CommitRound) -> None:
        """The commit round that made the batch durable: a ``wal commit`` child (and its
        ``fsync``) under every publish span."""
        for _, parent in self.spans:
            ctx = trace.set_span_in_context(parent)
            commit = tracing.tracer(_TRACER_NAME).start_span(
                "wal commit",
                context=ctx,
                start_time=rnd.start_ns,
                attributes={
                    "danube.wal.durability": rnd.durability,
                    "danube.wal.round.records": rnd.records,
                    "danube.wal.round.bytes": rnd.bytes,
                    "danube.wal.round.batches": rnd.batches,
                    "danube.wal.round.topics": rnd.logs,
                },
            )
            if rnd.fsync_s > 0:
                fsync_start = max(rnd.start_ns, rnd.end_ns - int(rnd.fsync_s * 1e9))
                tracing.tracer(_TRACER_NAME).start_span(
                    "fsync", context=trace.set_span_in_context(commit), start_time=fsync_start
                ).end(end_time=rnd.end_ns)
            commit.end(end_time=rnd.end_ns)

    def finished(self, offsets: Sequence[int] | None, first_offset: int) -> None:
        for i, span in self.spans:
            offset = offsets[i] if offsets else first_offset + i
            span.set_attribute("messaging.message.id", str(offset))
            span.set_attribute("messaging.danube.offset", offset)
            span.end()

    def failed(self, exc: BaseException) -> None:
        for _, span in self.spans:
            tracing.record_failure(span, exc)
            span.end()


@contextmanager
def publishing(topic: str, producer: str, msgs: Sequence[Msg]) -> Iterator[PublishSpans | None]:
    """Spans for the batch being published (None when tracing is off or nothing is sampled);
    the WAL reports its commit round to them while the block runs. The caller ends them with
    :meth:`PublishSpans.finished` / :meth:`PublishSpans.failed`."""
    if not tracing.ENABLED:
        yield None
        return
    sampled = _sampled(msgs)
    if not sampled:
        yield None
        return
    spans = PublishSpans(topic, producer, msgs, sampled)
    token = COMMIT_OBSERVER.set(spans.committed)
    try:
        yield spans
    finally:
        COMMIT_OBSERVER.reset(token)


def start_deliveries(topic: str, subscription: str, consumer: str, msgs: Sequence[Msg]) -> list[Span] | None:
    """``deliver`` spans for the sampled messages of a frame about to go to ``consumer``
    (None when there are none); end them with :func:`end_all` once the frame is written."""
    if not tracing.ENABLED:
        return None
    sampled = _sampled(msgs)
    if not sampled:
        return None
    spans: list[Span] = []
    for i in sampled:
        m = msgs[i]
        parent = sampled_parent(m.attributes)
        if parent is None:
            continue
        spans.append(
            tracing.tracer(_TRACER_NAME).start_span(
                f"deliver {topic}",
                context=parent,
                kind=SpanKind.PRODUCER,
                attributes=messaging_attributes(
                    "deliver",
                    topic,
                    {
                        "messaging.consumer.group.name": subscription,
                        "messaging.client.id": consumer,
                        "messaging.message.id": str(m.msg_id.topic_offset),
                        "messaging.danube.offset": m.msg_id.topic_offset,
                        "messaging.danube.redelivery_count": m.redelivery_count,
                        "messaging.batch.message_count": len(msgs),
                    },
                ),
            )
        )
    return spans or None


def end_all(spans: list[Span] | None) -> None:
    if spans:
        for span in spans:
            span.end()
