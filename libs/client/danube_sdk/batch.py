"""One publish batch as it moves through a partition producer: open -> ready -> in flight -> done.

A batch owns its wire frame (messages are appended to the frame as they are sent, so
sealing copies nothing) and one future per message. It is finished exactly once, by an
ack, a refusal, a timeout or the producer closing; finishing releases its messages from
the producer's pending count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import grpc
from opentelemetry.trace import Span

from danube_common.errors import MD_ERROR_CODE, DanubeError, error_from_status
from danube_common.observability.tracing import record_failure
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk.types import MessageId

_STATUS_BY_NUMBER = {sc.value[0]: sc for sc in grpc.StatusCode}


class Batch:
    __slots__ = ("bytes", "deadline", "done", "frame", "futures", "groups", "messages", "opened_at", "spans")

    def __init__(self, opened_at: float, deadline: float | None, done: asyncio.Future[None]) -> None:
        self.frame = pb.PublishBatch()
        self.messages = self.frame.messages
        self.futures: list[asyncio.Future[MessageId]] = []
        self.bytes = 0
        self.opened_at = opened_at
        #: Loop time after which unacknowledged messages fail with Timeout (None: never).
        self.deadline = deadline
        #: Resolved when the batch is finished, whatever the outcome (flush waits on it).
        self.done = done
        #: The ``send`` spans of its sampled messages, by index (None: none sampled).
        self.spans: list[tuple[int, Span]] | None = None
        #: How many sent messages each wire message carries once packs were made at sealing
        #: (``danube_sdk.packs``); None: one each.
        self.groups: list[int] | None = None

    @property
    def seq(self) -> int:
        return self.frame.batch_seq

    def __len__(self) -> int:
        return len(self.futures)

    def resolve(self, topic: str, first_offset: int, producer_id: int, offsets: Sequence[int] = ()) -> None:
        """Resolve every message: with ``offsets[i]`` when the ack lists offsets (some messages
        were duplicates stored earlier), else with ``first_offset + i`` (``i`` counting wire
        messages: the messages of a pack share its offset and have their index in it)."""
        if self.groups is not None:
            self._resolve_packed(topic, first_offset, producer_id, offsets)
            return
        if offsets:
            for fut, offset in zip(self.futures, offsets, strict=True):
                if not fut.done():
                    fut.set_result(MessageId(topic, offset, producer_id))
        else:
            for i, fut in enumerate(self.futures):
                if not fut.done():
                    fut.set_result(MessageId(topic, first_offset + i, producer_id))
        self._end_spans(lambda i: offsets[i] if offsets else first_offset + i)

    def _resolve_packed(
        self, topic: str, first_offset: int, producer_id: int, offsets: Sequence[int]
    ) -> None:
        assert self.groups is not None
        owner: list[int] = []  # sent message -> the offset of the wire message holding it
        traced = self.spans is not None
        futures = iter(self.futures)
        for k, count in enumerate(self.groups):
            offset = offsets[k] if offsets else first_offset + k
            if traced:
                owner.extend([offset] * count)
            for index in range(count):
                fut = next(futures)
                if not fut.done():
                    fut.set_result(MessageId(topic, offset, producer_id, index if count > 1 else None))
        self._end_spans(owner.__getitem__)

    def _end_spans(self, offset_of: Callable[[int], int]) -> None:
        """End the ``send`` spans (``offset_of``: a sent message's index -> its offset), then
        finish the batch."""
        if self.spans is not None:
            for i, span in self.spans:
                offset = offset_of(i)
                span.set_attribute("messaging.message.id", str(offset))
                span.set_attribute("messaging.danube.offset", offset)
                span.end()
            self.spans = None
        self._finish()

    def renumber(self, first_sequence: int) -> int:
        """Give the messages fresh sequence ids from ``first_sequence``; return the next free
        one. Only for batches the broker has not stored (never sent, or refused)."""
        for m in self.messages:
            m.sequence_id = first_sequence
            first_sequence += 1
        return first_sequence

    def fail(self, err: BaseException) -> None:
        for fut in self.futures:
            if not fut.done():
                fut.set_exception(err)
        if self.spans is not None:
            for _, span in self.spans:
                record_failure(span, err)
                span.end()
            self.spans = None
        self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def error_from_detail(detail: pb.ErrorDetail) -> DanubeError:
    """The error class a batch refusal (``PublishAck.error``) stands for."""
    status = _STATUS_BY_NUMBER.get(detail.grpc_code, grpc.StatusCode.UNKNOWN)
    return error_from_status(status, detail.message, {MD_ERROR_CODE: detail.code})


def message_bytes(payload: bytes, properties: dict[str, str] | None) -> int:
    """What one message counts towards ``batching_max_bytes`` and ``max_pending_bytes``: its
    payload and its property keys and values."""
    if not properties:
        return len(payload)
    return len(payload) + sum(len(k) + len(v) for k, v in properties.items())


def fail_all(batches: list[Batch], err: BaseException, release: Callable[[int, int], None]) -> None:
    for batch in batches:
        release(len(batch), batch.bytes)
        batch.fail(err)
