"""The uploader's spans: one ``upload {topic}`` per object it puts, linked to the messages inside.

The span covers reading the range from the segment file, the object PUT (``s3 PutObject`` or
``local PutObject``, a child) and the descriptor + checkpoint transaction (``etcd Txn``, a child).
It **links** to the trace of each sampled message the object carries (the ``traceparent``
attribute the producer put in the message), at most :data:`MAX_LINKS` of them (the lowest
offsets; ``danube.upload.sampled_messages`` counts them all), so a message's trace leads to the
upload that carried it to object storage: in a trace UI, search for spans linking to it.

The span is a child of the current span when there is one (a broker's Flush during a topic
move, so the move's trace shows its upload), else the root of its own trace. The messages'
frames are decoded for their contexts only while tracing is on. Nothing runs while it is off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry.trace import Link, Span, SpanKind

from danube_common.observability import record_context, tracing
from danube_wal_uploader.disk import Built

_TRACER_NAME = "danube_wal_uploader"
#: Links to message traces per upload span, at most.
MAX_LINKS = 64


def trace_links() -> int:
    """How many message contexts a build should collect now (0 while tracing is off)."""
    return MAX_LINKS if tracing.ENABLED else 0


def message_links(built: Built) -> list[Link]:
    """Links to the sampled messages' traces that ``built`` carries (bounded at the build)."""
    if built.traces is None:
        return []
    return [
        ln
        for offset, tp in built.traces.kept
        if (ln := record_context.link(tp, {"messaging.danube.offset": offset})) is not None
    ]


@contextlib.contextmanager
def uploading(topic: str, built: Built, object_key: str, *, start_ns: int) -> Iterator[Span | None]:
    """``upload {topic}`` (None while tracing is off), started at ``start_ns`` (before the read)."""
    if not tracing.ENABLED:
        yield None
        return
    attrs: dict[str, Any] = {
        "danube.topic": topic,
        "danube.upload.start_offset": built.start,
        "danube.upload.next_offset": built.end,
        "danube.upload.bytes": len(built.data),
        "danube.upload.object_key": object_key,
        "danube.upload.sampled_messages": built.traces.sampled if built.traces is not None else 0,
    }
    with tracing.tracer(_TRACER_NAME).start_as_current_span(
        f"upload {topic}",
        kind=SpanKind.INTERNAL,
        attributes=attrs,
        links=message_links(built),
        start_time=start_ns,
    ) as span:
        yield span


def described(span: Span | None, *, recorded: bool) -> None:
    """Whether the descriptor transaction recorded the upload (False: etcd changed meanwhile;
    the next step plans again)."""
    if span is not None and span.is_recording():
        span.set_attribute("danube.upload.described", recorded)
