"""Dead-lettering poison messages: the copy that is published, and the worker that publishes it.

A poison message under the ``dead_letter`` policy stays pending (it is neither redelivered nor
acknowledged) until its copy is durable on the subscription's ``dead_letter_topic``; only
then is the original acknowledged. A failed publish (topic unreachable, storage error) is
retried with a capped backoff, so a crash or an outage at any point leaves the original
unacknowledged: at worst the dead-letter topic gets the copy twice (at-least-once).

The copy keeps payload, key, attributes, producer name and schema fields, drops the original
``msg_id`` and ``sequence_id`` (it is a new message on another topic), and adds:
``x-original-topic``, ``x-original-subscription``, ``x-original-offset``,
``x-delivery-attempts`` (deliveries to the subscription) and ``x-failure-reason``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Protocol

from danube_broker.dispatch.base import Msg
from danube_broker.dispatch.reliable.pending import Pending
from danube_common.aio import cancel_and_wait
from danube_common.pb import DanubeApi_pb2 as pb

if TYPE_CHECKING:
    from danube_broker.dispatch.reliable.engine import SubscriptionEngine

log = logging.getLogger(__name__)

#: Retry delays of a failing dead-letter publish: first, and cap (seconds).
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0


class DeadLetterSink(Protocol):
    async def publish(self, topic: str, msg: Msg) -> None:
        """Publish ``msg`` to the reliable topic ``topic``; return once it is durable there."""
        ...


def dead_letter_copy(
    msg: Msg, *, topic: str, subscription: str, offset: int, attempts: int, reason: str
) -> Msg:
    out = pb.StreamMessage()
    out.CopyFrom(msg)
    out.ClearField("msg_id")
    out.request_id = 0
    out.sequence_id = 0
    out.redelivery_count = 0
    out.subscription_name = ""
    out.attributes["x-original-topic"] = topic
    out.attributes["x-original-subscription"] = subscription
    out.attributes["x-original-offset"] = str(offset)
    out.attributes["x-delivery-attempts"] = str(attempts)
    out.attributes["x-failure-reason"] = reason or "unknown"
    return out


class DeadLetterWorker:
    """Publishes one subscription's poison messages, in order, one at a time."""

    def __init__(self, engine: SubscriptionEngine, sink: DeadLetterSink | None) -> None:
        self._engine = engine
        self._sink = sink
        self._queue: deque[int] = deque()
        self._task: asyncio.Task[None] | None = None
        self.failures_total = 0

    @property
    def available(self) -> bool:
        return self._sink is not None

    def __len__(self) -> int:
        return len(self._queue)

    def submit(self, p: Pending) -> None:
        self._queue.append(p.offset)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(
                self._run(), name=f"dead-letter-{self._engine.sub.topic_name}-{self._engine.name}"
            )

    def forget_queued(self) -> None:
        """Drop what has not started publishing (seek); one in progress finishes."""
        while len(self._queue) > 1:
            self._queue.pop()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        err = await cancel_and_wait(task)
        if err is not None:
            raise err

    async def _run(self) -> None:
        engine = self._engine
        delay = RETRY_FIRST_S
        while self._queue:
            offset = self._queue[0]
            p = engine.dead_lettering(offset)
            if p is None:
                self._queue.popleft()
                continue
            policy = engine.policy
            topic = policy.dead_letter_topic
            copy = dead_letter_copy(
                p.msg,
                topic=engine.sub.topic_name,
                subscription=engine.name,
                offset=offset,
                attempts=p.deliveries,
                reason=p.reason,
            )
            try:
                if self._sink is None or not topic:
                    raise RuntimeError("no dead-letter topic or publisher")
                await self._sink.publish(topic, copy)
            except Exception as exc:
                self.failures_total += 1
                log.warning(
                    "subscription %s on %s: dead-lettering offset %d to %s failed (%s); retrying in %.1fs",
                    engine.name,
                    engine.sub.topic_name,
                    offset,
                    topic or "(none)",
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = RETRY_FIRST_S
            if self._queue and self._queue[0] == offset:
                self._queue.popleft()
            log.info(
                "subscription %s on %s: offset %d dead-lettered to %s after %d deliveries",
                engine.name,
                engine.sub.topic_name,
                offset,
                topic,
                p.deliveries,
            )
            engine.dead_lettered(offset)
