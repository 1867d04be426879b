"""A producer attached to a topic: identity, access mode and liveness.

Producers attached by the unary CreateProducer have no stream, so liveness is activity: a
send, a health check, or an open PublishBatches stream. A producer idle for longer than
``producer_idle_timeout_s`` is detached, which frees an exclusive slot held by a dead client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from danube_common.errors import DanubeError

if TYPE_CHECKING:
    from danube_broker.schema_gate import ProducerSchema
    from danube_broker.topic import Topic


class Producer:
    def __init__(self, *, producer_id: int, name: str, topic: Topic, exclusive: bool, now: float) -> None:
        self.id = producer_id
        self.name = name
        #: The principal that created it (``danube_common.security.handles.creator_of``); None
        #: with auth off, or for the broker's own dead-letter producer.
        self.creator: str | None = None
        self.topic = topic
        self.exclusive = exclusive
        self.last_activity = now
        #: Open PublishBatches streams bound to this producer (an open stream is activity).
        self.open_streams = 0
        #: Set once the producer is detached; ``detach_error`` says what its streams end with.
        self.detached = asyncio.Event()
        self.detach_error: DanubeError | None = None
        #: The schema version its ``schema_ref`` resolved to (stamped on its messages), if any.
        self.schema: ProducerSchema | None = None
        #: Called once when it is detached (multiplexed streams watch their producers this way
        #: instead of with a task per producer).
        self.detach_watchers: set[Callable[[], None]] = set()

    @property
    def topic_name(self) -> str:
        return self.topic.name

    @property
    def live(self) -> bool:
        return not self.detached.is_set()

    def touch(self, now: float) -> None:
        self.last_activity = now

    def idle_expired(self, now: float, idle_s: float) -> bool:
        return self.live and self.open_streams == 0 and now - self.last_activity > idle_s

    def detach(self, error: DanubeError | None) -> None:
        """Mark detached; streams bound to it end (with ``error`` if given). Idempotent."""
        if not self.detached.is_set():
            self.detach_error = error
            self.detached.set()
            for watcher in list(self.detach_watchers):
                watcher()
