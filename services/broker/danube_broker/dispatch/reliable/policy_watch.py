"""One watch per broker on every subscription failure policy, routed to the topics loaded here.

Policies live under their own prefix (``Keys.subscription_policies_prefix()``), apart from the
cursors the broker writes, so the watch sees only admins' policy writes, never an echo of the
broker's own cursor flushes, and the broker holds one etcd watch however many topics it owns.

Ordering: a topic reads its policies at some store revision ``R`` (``SubscriptionStore.load``)
and then :meth:`PolicyWatch.follow` s them from ``R``. Events at or below ``R`` are in what it
read and are not routed to it again (an older value must not overwrite a newer one); events
above ``R`` are. The watch may already have routed events above ``R`` (it runs ahead of a
topic that is still loading): then ``follow`` says so and the topic reads its policies again.

Compaction (:class:`WatchCompacted`): every policy is read again and each followed topic is
handed the whole set of its policies (a deleted policy shows as absent), then the watch resumes
after that read.

The watch starts with the first topic that follows (from that topic's read revision) and is
owned by this object: :meth:`aclose` stops it (the next ``follow`` starts it again); a crash
is reported through ``on_failure``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from danube_common.aio import cancel_and_wait
from danube_common.errors import MetadataUnavailable
from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore, WatchCompacted, WatchEvent
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


class PolicyListener(Protocol):
    def policy_changed(self, subscription: str, stored: dict[str, Any] | None) -> None:
        """One subscription's policy was written (``stored``) or deleted (None)."""

    def policies_reloaded(self, stored: dict[str, dict[str, Any]]) -> None:
        """Every policy of the topic, read again (a subscription absent here has none)."""


@dataclass(slots=True)
class _Route:
    listener: PolicyListener
    #: Events at or below this revision are already in what the listener read.
    read_revision: int


class PolicyWatch:
    def __init__(
        self, store: MetadataStore, keys: Keys, *, on_failure: Callable[[str, BaseException], None]
    ) -> None:
        self._store = store
        self._keys = keys
        self._on_failure = on_failure
        self._routes: dict[TopicName, _Route] = {}
        #: Revision of the last event routed (or of the read the watch started after).
        self.seen_revision = 0
        self._task: asyncio.Task[None] | None = None
        #: Events routed to a listener (tests and debugging).
        self.routed = 0

    @property
    def following(self) -> int:
        return len(self._routes)

    def follow(self, topic: TopicName, listener: PolicyListener, read_revision: int) -> bool:
        """Route ``topic``'s policy events above ``read_revision`` to ``listener``. False: the
        watch already passed ``read_revision`` (events may have been missed): read the
        policies again and call this with the new revision."""
        if self._task is None:
            self.seen_revision = read_revision
            self._task = asyncio.create_task(self._run(read_revision + 1), name="subscription-policy-watch")
            self._task.add_done_callback(self._done)
        if self.seen_revision > read_revision:
            return False
        self._routes[topic] = _Route(listener, read_revision)
        return True

    def unfollow(self, topic: TopicName, listener: PolicyListener) -> None:
        route = self._routes.get(topic)
        if route is not None and route.listener is listener:
            del self._routes[topic]

    def route(self, ev: WatchEvent) -> bool:
        """Hand one event to the topic it concerns (True if some listener took it)."""
        self.seen_revision = max(self.seen_revision, ev.revision)
        parsed = self._keys.parse_subscription_policy(ev.key)
        if parsed is None:
            return False
        topic, sub = parsed
        route = self._routes.get(topic)
        if route is None or ev.revision <= route.read_revision:
            return False
        stored: dict[str, Any] | None = None
        if ev.kind == "put":
            try:
                stored = ev.json()
            except ValueError as exc:
                log.error("ignoring malformed subscription policy %s (%s)", ev.key, exc)
                return False
        route.listener.policy_changed(sub, stored)
        self.routed += 1
        return True

    async def reload(self) -> int:
        """Read every policy again and hand each followed topic its own; returns the revision read."""
        prefix = self._keys.subscription_policies_prefix()
        kvs, revision = await self._store.get_prefix(prefix)
        by_topic: dict[TopicName, dict[str, dict[str, Any]]] = {}
        for kv in kvs:
            parsed = self._keys.parse_subscription_policy(kv.key)
            if parsed is None or parsed[0] not in self._routes:
                continue
            try:
                by_topic.setdefault(parsed[0], {})[parsed[1]] = kv.json()
            except ValueError as exc:
                log.error("ignoring malformed subscription policy %s (%s)", kv.key, exc)
        for topic, route in self._routes.items():
            route.listener.policies_reloaded(by_topic.get(topic, {}))
            route.read_revision = revision
        self.seen_revision = max(self.seen_revision, revision)
        return revision

    async def _run(self, start: int) -> NoReturn:
        prefix = self._keys.subscription_policies_prefix()
        while True:
            try:
                async for ev in self._store.watch_prefix(prefix, start_revision=start):
                    start = ev.revision + 1
                    self.route(ev)
            except WatchCompacted:
                log.warning("the subscription policy watch was compacted; reading every policy again")
                start = await self.reload() + 1
                continue
            raise MetadataUnavailable(f"the subscription policy watch on {prefix} ended unexpectedly")

    def _done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._on_failure("the subscription policy watch", exc)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        err = await cancel_and_wait(task)
        if err is not None:
            raise err
        self._routes.clear()
