"""One subscription over many topics: a list, or a regular expression over one namespace.

:class:`MultiTopicConsumer` is a :class:`~danube_sdk.consumer.Consumer` whose partitions are
the topics it subscribes to (a partitioned topic counts as its partitions). Their deliveries are
merged by the consumer's :class:`~danube_sdk.receive_queue.ReceiveQueue`: round-robin, one message
per topic per turn, each topic guaranteed its share of the buffer, so a busy topic cannot starve
a quiet one. Acks, nacks and seeks go to the topic a message came from.

A **pattern** ``/ns/REGEX`` names one namespace literally; ``REGEX`` must match a topic's whole
local name (``re.fullmatch``; a partition matches through its partitioned topic's name or its
own). The consumer lists the namespace's topics with ``Discovery.NamespaceTopics`` on the service
URL (so a plain client with only the service URL and its token can use it) every
``refresh_interval_s``: topics that appear and match are subscribed, topics that are gone are
dropped. Topics found at subscribe time start at the subscription's ``initial_position``; topics
found later start at the earliest message (they were created after the subscription, so all of
their history is new to it).

A topic deleted under a list or pattern consumer drops out (a warning is logged); any other
fatal error of one topic ends the whole consumer, as for a partitioned topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError, InvalidArgument, NotFound, TopicNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.topic_name import validate_namespace
from danube_sdk.connection import Connections
from danube_sdk.consumer import Consumer
from danube_sdk.errors import ClientClosed
from danube_sdk.options import ClientOptions, ConsumerOptions
from danube_sdk.retry import retry_until
from danube_sdk.topic_consumer import TopicConsumer
from danube_sdk.types import InitialPosition

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How often a pattern consumer lists its namespace, by default.
DEFAULT_REFRESH_INTERVAL_S = 2.0


# ---------------------------------------------------------------------- pure rules
@dataclasses.dataclass(frozen=True, slots=True)
class TopicPattern:
    namespace: str
    regex: re.Pattern[str]
    text: str

    @classmethod
    def parse(cls, text: str) -> TopicPattern:
        """``/ns/REGEX`` -> the namespace and the compiled REGEX (InvalidArgument saying why not)."""
        hint = "a pattern looks like /namespace/REGEX, e.g. /default/orders-.*"
        parts = text.split("/", 2) if isinstance(text, str) else []
        if len(parts) != 3 or parts[0] != "" or not parts[2]:
            raise InvalidArgument(f"invalid topic pattern {text!r}: {hint}")
        try:
            ns = validate_namespace(parts[1])
        except DanubeError as exc:
            raise InvalidArgument(f"invalid topic pattern {text!r}: {exc.message}") from None
        try:
            regex = re.compile(parts[2])
        except re.error as exc:
            raise InvalidArgument(f"invalid topic pattern {text!r}: bad regular expression: {exc}") from None
        return cls(ns, regex, text)

    def matches(self, name: str, partition_of: str = "") -> bool:
        """Whether the topic ``name`` (a partition of ``partition_of``, if set) is selected."""
        prefix = f"/{self.namespace}/"
        for candidate in (partition_of, name):
            if candidate.startswith(prefix) and self.regex.fullmatch(candidate[len(prefix) :]):
                return True
        return False

    def select(self, topics: Iterable[tuple[str, str]]) -> list[str]:
        """The names to subscribe to among (name, partition_of) entries, sorted."""
        return sorted(name for name, of in topics if self.matches(name, of))


def changes(current: Iterable[str], wanted: Iterable[str]) -> tuple[list[str], list[str]]:
    """(topics to add, topics to drop), each sorted."""
    have, want = set(current), set(wanted)
    return sorted(want - have), sorted(have - want)


async def namespace_topics(conns: Connections, namespace: str) -> list[tuple[str, str]]:
    """``Discovery.NamespaceTopics`` on the service URL: (name, partition_of) per topic."""
    stub = conns.stubs(conns.service_url).discovery
    req = pb.NamespaceTopicsRequest(request_id=conns.next_request_id(), namespace=namespace)
    resp = await conns.call_service(stub.NamespaceTopics(req, timeout=conns.rpc_timeout_s))
    return [(t.name, t.partition_of) for t in resp.topics]


# ---------------------------------------------------------------------- the consumer
class MultiTopicConsumer(Consumer[T]):
    """A consumer of many topics (create with ``DanubeClient.subscribe_many``).

    ``topics``: the topics subscribed to now (partition names). ``pattern``: the pattern, or
    None for a fixed list. Everything else is as :class:`Consumer`.
    """

    def __init__(
        self,
        conns: Connections,
        *,
        label: str,
        subscription: str,
        name: str,
        topics: list[str],
        opts: ConsumerOptions,
        client_opts: ClientOptions,
        decode: Callable[[bytes], Any] | None = None,
        pattern: TopicPattern | None = None,
        refresh_interval_s: float = DEFAULT_REFRESH_INTERVAL_S,
    ) -> None:
        super().__init__(
            conns,
            topic=label,
            subscription=subscription,
            name=name,
            partitions=topics,
            opts=opts,
            client_opts=client_opts,
            decode=decode,
        )
        self.pattern = pattern
        self._conns = conns
        self._decode_fn = decode
        self._refresh_s = refresh_interval_s
        #: Topics whose consumer failed because they are gone: dropped by the watch task.
        self._gone: set[str] = set()
        self._rescan = asyncio.Event()
        self._watch_task: asyncio.Task[None] | None = None
        #: Topics found after subscribing start here (see the module doc).
        self._later_opts = dataclasses.replace(opts, initial_position=InitialPosition.EARLIEST)
        for part in self._parts.values():
            part.on_fatal = self._part_failed

    @property
    def topics(self) -> list[str]:
        """The topics (partitions) this consumer is subscribed to now."""
        return sorted(self._parts)

    async def _start(self) -> None:
        await super()._start()
        self._watch_task = asyncio.create_task(self._watch(), name=f"danube-topics {self.topic}")
        self._watch_task.add_done_callback(self._watch_ended)

    def _watch_ended(self, task: asyncio.Task[None]) -> None:
        """The watch task only ends by cancellation; a crash ends the consumer loudly."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("consumer %s (%s): following its topics failed: %r", self.consumer_name, self.topic, exc)
        self._queue.fail(ClientClosed(f"consumer {self.consumer_name} on {self.topic} stopped: {exc!r}"))

    # ---- membership
    def _part_failed(self, part: TopicConsumer, err: DanubeError) -> bool:
        """A topic's consumer gave up. A deleted topic drops out; anything else ends the consumer."""
        if not isinstance(err, NotFound):
            return False
        log.warning("topic %s of consumer %s is gone (%s); dropping it", part.topic, self.consumer_name, err)
        self._gone.add(part.topic)
        self._rescan.set()
        return True

    async def _watch(self) -> None:
        """Owned by this consumer (cancelled by close): drop gone topics; follow the pattern."""
        while True:
            if self.pattern is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._refresh_s):
                        await self._rescan.wait()
            else:
                await self._rescan.wait()
            self._rescan.clear()
            gone, self._gone = self._gone, set()
            for topic in sorted(gone):
                await self._drop(topic)
            if self.pattern is not None:
                try:
                    await self.refresh()
                except DanubeError as exc:
                    log.warning("listing topics for pattern %s failed: %s", self.pattern.text, exc)

    async def refresh(self) -> tuple[list[str], list[str]]:
        """List the namespace now and follow it (pattern consumers); return (added, dropped)."""
        if self.pattern is None:
            return [], []
        listed = await namespace_topics(self._conns, self.pattern.namespace)
        add, drop = changes(self._parts, self.pattern.select(listed))
        for topic in drop:
            await self._drop(topic)
        added = [t for t in add if await self._add(t)]
        return added, drop

    async def _add(self, topic: str) -> bool:
        if self._closed is not None or topic in self._parts:
            return False
        part = TopicConsumer(
            self._conns,
            topic=topic,
            name=self.consumer_name,
            subscription=self.subscription,
            opts=self._later_opts,
            client_opts=self._client_opts,
            queue=self._queue,
            decode=self._decode_fn,
        )
        part.on_fatal = self._part_failed
        self._parts[topic] = part  # closed with the consumer even if closing interrupts this
        self._resized()
        try:
            await retry_until(
                part.subscribe,
                timeout_s=self._client_opts.operation_timeout_s,
                what=f"subscribing {self.subscription} to {topic}",
            )
        except DanubeError as exc:
            log.warning("consumer %s could not subscribe to %s: %s", self.consumer_name, topic, exc)
            await self._drop(topic)
            return False
        part.start()
        log.info("consumer %s (%s) subscribed to %s", self.consumer_name, self.topic, topic)
        return True

    async def _drop(self, topic: str) -> None:
        part = self._parts.pop(topic, None)
        if part is None:
            return
        self._resized()
        with contextlib.suppress(DanubeError):
            await part.aclose(unsubscribe=False)
        self._queue.purge(topic)
        log.info("consumer %s (%s) dropped topic %s", self.consumer_name, self.topic, topic)

    def _resized(self) -> None:
        self.partitions = sorted(self._parts)
        self._queue.set_partitions(len(self._parts))

    async def _close(self, why: ClientClosed, unsubscribe: bool) -> None:
        task, self._watch_task = self._watch_task, None
        exc = await cancel_and_wait(task)
        if exc is not None:
            raise exc
        await super()._close(why, unsubscribe)


async def create(
    conns: Connections,
    client_opts: ClientOptions,
    *,
    topics: Sequence[str] | None,
    pattern: str | None,
    subscription: str,
    name: str,
    opts: ConsumerOptions,
    decode: Callable[[bytes], Any] | None,
    partitions_of: Callable[[str], Any],
    refresh_interval_s: float,
) -> MultiTopicConsumer[Any]:
    """Resolve the topics (list: each must exist; pattern: what matches now, maybe none) and
    start the consumer. ``partitions_of``: the client's ``topic_partitions``."""
    if (topics is None) == (pattern is None):
        raise InvalidArgument("give topics (a list) or pattern (/namespace/REGEX), not both")
    if refresh_interval_s <= 0:
        raise InvalidArgument(f"refresh_interval_s must be > 0, got {refresh_interval_s}")
    compiled = None
    if pattern is not None:
        compiled = TopicPattern.parse(pattern)
        label = pattern
        names = compiled.select(
            await retry_until(
                lambda: namespace_topics(conns, compiled.namespace),
                timeout_s=client_opts.operation_timeout_s,
                what=f"listing the topics of namespace {compiled.namespace}",
            )
        )
    else:
        assert topics is not None
        if isinstance(topics, str) or not topics:
            raise InvalidArgument("topics must be a non-empty list of topic names")
        label = ",".join(topics)
        names = []
        for t in dict.fromkeys(topics):
            parts = await partitions_of(t)
            if not parts:
                raise TopicNotFound(
                    f"topic {t} does not exist: create it first by producing to it, "
                    f"or with `danube-admin topics create {t}`"
                )
            names += [p for p in parts if p not in names]
    consumer: MultiTopicConsumer[Any] = MultiTopicConsumer(
        conns,
        label=label,
        subscription=subscription,
        name=name,
        topics=names,
        opts=opts,
        client_opts=client_opts,
        decode=decode,
        pattern=compiled,
        refresh_interval_s=refresh_interval_s,
    )
    await consumer._start()
    return consumer
