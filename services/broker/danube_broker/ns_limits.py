"""Namespace policies applied to the topics this broker owns.

Each loaded topic whose namespace (or own record) sets any limit carries a :class:`TopicLimits`
in ``Topic.limits``; a topic with none carries None, so the hot path pays one attribute check
per batch (``registry.publish``). :class:`NamespaceLimits` keeps them current: it computes a
topic's limits when the topic is loaded or its record adopted, and again for every loaded topic
of a namespace whose policies the :class:`~danube_common.namespace_view.NamespaceView` saw
change (so a change reaches running topics within the watch's latency), also handing reliable
topics their new retention defaults.

Where each limit is enforced:

- producers / consumers / subscriptions per topic: when one attaches (``check_*``), with the
  counts the topic has then; an attached one is never detached by a lower limit;
- message size: per batch, before anything of it is stored (``MESSAGE_TOO_LARGE``);
- publish rate (msg/s, bytes/s): a batch over the rate *waits* before it enters the topic, so
  its ack is delayed and, with the publish stream's bounded pipeline, the broker stops reading
  the producer's batches: back-pressure, nothing dropped. The rate is a GCRA (virtual
  scheduling) with ``RATE_BURST_S`` of tolerance;
- backlog quota (reliable topics): when a batch would take the slowest subscription's backlog
  over the quota: ``hold`` waits (polling the backlog every ``HOLD_POLL_S``) until consumers
  acknowledged enough; ``refuse`` answers ``QUOTA_EXCEEDED`` (nothing stored); ``evict``
  acknowledges the oldest unacknowledged messages of the subscriptions over it (counted in
  ``TopicLimits.evicted``);
- message TTL (reliable topics): :meth:`NamespaceLimits.run_expiry`, one loop per broker, every
  ``EXPIRY_INTERVAL_S`` acknowledges on each subscription's behalf the messages published more
  than the TTL ago (``TopicLimits.expired``; metric ``danube_broker_policy_messages``);
- dispatch rate (reliable topics): each subscription's engine gets a delivery gate
  (:class:`DispatchRate`, a GCRA charged with what the engine delivered); while it is shut the
  engine holds deliveries back and looks again after its hold interval (50 ms). A delivery step
  may send the consumers' whole free window at once; the rate holds on average.

Ordering: batches that must wait pass one gate per topic (a FIFO lock) in arrival order, and a
batch arriving while others wait queues behind them, so waits never reorder a producer's
batches. From the gate to the topic's log there is no suspension point: they enter the log in
gate order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from danube_broker.dispatch.base import Msg
from danube_common.errors import (
    DanubeError,
    MessageTooLarge,
    QuotaExceeded,
    TooManyConsumers,
    TooManyProducers,
    TooManySubscriptions,
)
from danube_common.namespace_policies import NamespacePolicies
from danube_common.packing import message_count

if TYPE_CHECKING:
    from danube_broker.config import BrokerConfig
    from danube_broker.dispatch.reliable.engine import SubscriptionEngine
    from danube_broker.metrics import BrokerEvents
    from danube_broker.topic import Topic
    from danube_common.namespace_view import NamespaceView

log = logging.getLogger(__name__)

#: Tolerance of the publish rate: a burst of up to this much time's worth passes at once.
RATE_BURST_S = 0.1
#: How often a batch held by a full backlog (policy ``hold``) looks at the backlog again.
HOLD_POLL_S = 0.02
#: How often the message TTL is applied.
EXPIRY_INTERVAL_S = 1.0


def gcra(tat: float, now: float, cost_s: float, burst_s: float) -> tuple[float, float]:
    """Generic cell rate algorithm (virtual scheduling): the theoretical arrival time after a
    batch costing ``cost_s`` (its size divided by the rate) arriving at ``now``, and how long
    the batch waits before it goes on: until the rate has room for the whole batch, less
    ``burst_s`` of tolerance. Over time batches average the rate."""
    new_tat = max(tat, now) + cost_s
    return new_tat, max(0.0, new_tat - now - burst_s)


class PublishRate:
    """A topic's publish rate limit (either bound may be None)."""

    __slots__ = ("_clock", "_tat", "bytes_per_s", "msgs_per_s")

    def __init__(
        self,
        msgs_per_s: float | None,
        bytes_per_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.msgs_per_s = msgs_per_s
        self.bytes_per_s = bytes_per_s
        self._tat = 0.0
        self._clock = clock

    def reserve(self, msgs: int, nbytes: int) -> float:
        """Admit a batch now; return how long it must wait before going on."""
        cost = 0.0
        if self.msgs_per_s:
            cost = msgs / self.msgs_per_s
        if self.bytes_per_s:
            cost = max(cost, nbytes / self.bytes_per_s)
        self._tat, delay = gcra(self._tat, self._clock(), cost, RATE_BURST_S)
        return delay


class DispatchRate:
    """A subscription's delivery gate: how many messages the rate allows to go out now. What
    the engine delivered is charged after the fact (from ``delivered_total``), so a step that
    sent more than allowed (key-shared routing looks past the bound) delays the next ones."""

    __slots__ = ("_clock", "_engine", "_last", "_seen", "_tat", "msgs_per_s")

    def __init__(
        self, msgs_per_s: float, engine: SubscriptionEngine, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.msgs_per_s = msgs_per_s
        self._engine = engine
        self._seen = engine.delivered_total
        self._tat = 0.0
        self._clock = clock
        self._last = clock()

    def __call__(self) -> int:
        now = self._clock()
        total = self._engine.delivered_total
        if total != self._seen:
            # Delivered by the step this gate last bounded: charged at that step's time.
            self._tat, _ = gcra(self._tat, self._last, (total - self._seen) / self.msgs_per_s, RATE_BURST_S)
            self._seen = total
        self._last = now
        return dispatch_allowance(self._tat, now, self.msgs_per_s, RATE_BURST_S)


def dispatch_allowance(tat: float, now: float, msgs_per_s: float, burst_s: float) -> int:
    """Messages that may go out at ``now`` given the theoretical arrival time ``tat`` of what
    went out before: the burst's worth once caught up (at least one), else what fits in the
    tolerance left."""
    room_s = now + burst_s - max(tat, now)
    allowed = int(room_s * msgs_per_s + 1e-9)  # 0.1 s x 50/s is 5, not 4.999
    if tat <= now:
        return max(1, allowed)
    return max(0, allowed)


class TopicLimits:
    """The limits in force on one topic (mutable: :meth:`apply` takes new policies in place,
    keeping the gate and the rate's state, so batches already waiting keep their order)."""

    def __init__(
        self,
        policies: NamespacePolicies,
        *,
        broker_max_message_bytes: int,
        events: BrokerEvents | None = None,
    ) -> None:
        self.policies = NamespacePolicies()
        self._events = events
        self._broker_max = broker_max_message_bytes
        self.max_message_bytes = broker_max_message_bytes
        self.rate: PublishRate | None = None
        self._gate = asyncio.Lock()
        #: Batches at the gate (holding it or queued for it): while any is, every batch queues.
        self._at_gate = 0
        #: Messages acknowledged on the subscriptions' behalf by the ``evict`` backlog policy,
        #: and by the message TTL.
        self.evicted = 0
        self.expired = 0
        #: Batches that waited for the publish rate, or for room in the backlog.
        self.rate_waits = 0
        self.backlog_waits = 0
        self.apply(policies)

    def apply(self, policies: NamespacePolicies) -> None:
        self.policies = policies
        p = policies
        self.max_message_bytes = min(self._broker_max, p.max_message_size_bytes or self._broker_max)
        if p.publish_rate_msgs_per_s is None and p.publish_rate_bytes_per_s is None:
            self.rate = None
        elif self.rate is None:
            self.rate = PublishRate(p.publish_rate_msgs_per_s, p.publish_rate_bytes_per_s)
        else:
            self.rate.msgs_per_s = p.publish_rate_msgs_per_s
            self.rate.bytes_per_s = p.publish_rate_bytes_per_s

    @property
    def busy(self) -> bool:
        """Batches are waiting at the gate (the limits object must stay until they passed)."""
        return self._at_gate > 0

    # ------------------------------------------------------------------ admission
    def check_producer(self, topic: Topic) -> None:
        cap = self.policies.max_producers_per_topic
        if cap is not None and len(topic.producers) >= cap:
            raise TooManyProducers(
                f"topic {topic.name} already has {len(topic.producers)} producer(s), the most its namespace "
                f"allows (max_producers_per_topic={cap}); close one, or ask an administrator to raise the limit"
            )

    def check_consumer(self, topic: Topic, subscription: str) -> None:
        p = self.policies
        cap = p.max_subscriptions_per_topic
        if cap is not None and subscription not in topic.subscriptions and len(topic.subscriptions) >= cap:
            raise TooManySubscriptions(
                f"topic {topic.name} already has {len(topic.subscriptions)} subscription(s), the most its "
                f"namespace allows (max_subscriptions_per_topic={cap}); join an existing subscription "
                "or unsubscribe one"
            )
        cap = p.max_consumers_per_topic
        if cap is not None:
            consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
            if consumers >= cap:
                raise TooManyConsumers(
                    f"topic {topic.name} already has {consumers} consumer(s), the most its namespace allows "
                    f"(max_consumers_per_topic={cap}); close one, or ask an administrator to raise the limit"
                )

    # ------------------------------------------------------------------ publish
    async def admit(self, topic: Topic, msgs: list[Msg], nbytes: int) -> None:
        """Let a batch in: size check, then (in arrival order) backlog quota and publish rate."""
        cap = self.max_message_bytes
        if cap < self._broker_max:
            self._check_sizes(topic, msgs, cap)
        quota = self.policies.backlog_quota_messages if topic.is_reliable else None
        rate = self.rate
        if quota is None and rate is None and not self._at_gate:
            return
        self._at_gate += 1
        try:
            await self._pass_gate(topic, quota, rate, msgs, nbytes)
        finally:
            self._at_gate -= 1

    async def _pass_gate(
        self, topic: Topic, quota: int | None, rate: PublishRate | None, msgs: list[Msg], nbytes: int
    ) -> None:
        """The backlog quota counts stored records (a pack is one, as in the backlog); the
        publish rate counts the messages sent (a pack's ``batch_size``)."""
        async with self._gate:
            if quota is not None:
                await self._backlog_room(topic, quota, len(msgs))
            if rate is not None:
                delay = rate.reserve(message_count(msgs), nbytes)
                if delay > 0:
                    self.rate_waits += 1
                    if self._events is not None:
                        self._events.policy_wait("rate")
                    await asyncio.sleep(delay)
            topic.check_accepting()

    @staticmethod
    def _check_sizes(topic: Topic, msgs: Iterable[Msg], cap: int) -> None:
        for i, m in enumerate(msgs):
            if len(m.payload) > cap:
                raise MessageTooLarge(
                    f"message {i} of the batch has a {len(m.payload)}-byte payload; namespace "
                    f"{topic.topic_name.namespace} accepts at most {cap} bytes (max_message_size_bytes)"
                )

    async def _backlog_room(self, topic: Topic, quota: int, incoming: int) -> None:
        policy = self.policies.backlog_policy
        room = max(0, quota - incoming)
        if _worst_backlog(topic) <= room:
            return
        if policy == "refuse":
            raise QuotaExceeded(
                f"topic {topic.name} has {_worst_backlog(topic)} unacknowledged message(s) on its slowest "
                f"subscription; its namespace allows {quota} (backlog_quota_messages, policy refuse): the "
                "batch was not stored; retry once consumers have acknowledged more"
            )
        if policy == "evict":
            evicted = _evict(topic, room)
            self.evicted += evicted
            if self._events is not None:
                self._events.policy_messages("evicted", evicted)
            return
        self.backlog_waits += 1
        if self._events is not None:
            self._events.policy_wait("backlog")
        while _worst_backlog(topic) > room:
            topic.check_accepting()
            await asyncio.sleep(HOLD_POLL_S)

    # ------------------------------------------------------------------ dispatch and TTL
    def gate_subscriptions(self, topic: Topic) -> None:
        """Give every subscription engine of ``topic`` the dispatch rate's gate (or none)."""
        rate = self.policies.dispatch_rate_msgs_per_s
        for sub in topic.subscriptions.values():
            engine = sub.engine
            if engine is None:
                continue
            gate = engine.delivery_gate
            if rate is None:
                if gate is not None:
                    engine.set_delivery_gate(None)
            elif isinstance(gate, DispatchRate):
                gate.msgs_per_s = rate
            else:
                engine.set_delivery_gate(DispatchRate(rate, engine))

    async def expire(self, topic: Topic, now_ms: int) -> int:
        """Acknowledge, on each subscription's behalf, what was published more than the TTL
        before ``now_ms``; return how many messages that expired."""
        ttl = self.policies.message_ttl_s
        rt = topic.reliable
        if ttl is None or rt is None:
            return 0
        first_fresh = await rt.log.offset_for_time(now_ms - ttl * 1000)
        expired = 0
        for sub in list(topic.subscriptions.values()):
            engine = sub.engine
            if engine is None or sub.non_durable or engine.cursor >= first_fresh - 1:
                continue  # a reader holds no backlog: nothing of it expires
            before = engine.backlog()
            engine.ack_through(first_fresh - 1)
            expired += max(0, before - engine.backlog())
        if expired:
            self.expired += expired
            if self._events is not None:
                self._events.policy_messages("expired", expired)
            log.info(
                "topic %s: %d unacknowledged message(s) expired (message_ttl_s=%d)", topic.name, expired, ttl
            )
        return expired


def _worst_backlog(topic: Topic) -> int:
    """The largest backlog of a durable subscription (readers hold nothing back)."""
    return max((s.backlog() for s in topic.subscriptions.values() if not s.non_durable), default=0)


def _evict(topic: Topic, room: int) -> int:
    """Acknowledge the oldest unacknowledged messages of every subscription whose backlog is
    over ``room``; return how many messages that skipped."""
    skipped = 0
    for sub in topic.subscriptions.values():
        engine = sub.engine
        if engine is None or sub.non_durable:
            continue
        before = engine.backlog()
        if before <= room:
            continue
        engine.ack_through(engine.log.next_offset - 1 - room)
        after = engine.backlog()
        skipped += before - after
        log.info(
            "topic %s subscription %s: backlog quota reached, %d oldest unacknowledged message(s) evicted",
            topic.name,
            sub.name,
            before - after,
        )
    return skipped


class NamespaceLimits:
    """Keeps ``Topic.limits`` of the loaded topics in step with their namespaces' policies."""

    def __init__(
        self,
        view: NamespaceView,
        topics: dict[str, Topic],
        cfg: BrokerConfig,
        *,
        events: BrokerEvents | None = None,
    ) -> None:
        self._view = view
        self._topics = topics
        self._cfg = cfg
        self._events = events
        #: The loaded topics with a message TTL (the expiry loop walks only these).
        self._with_ttl: dict[str, Topic] = {}

    @property
    def view(self) -> NamespaceView:
        """The watch-fed namespace policies these limits follow."""
        return self._view

    def policies_of(self, topic: Topic) -> NamespacePolicies:
        record = topic.record
        return self._view.get(topic.topic_name.namespace).for_topic(
            record.policies if record is not None else None, self._view.of_topic(topic.name)
        )

    def refresh(self, topic: Topic) -> None:
        """Compute ``topic.limits`` (and a reliable topic's retention defaults) anew."""
        policies = self.policies_of(topic)
        limits = topic.limits
        if limits is not None:
            limits.apply(policies)
            limits.gate_subscriptions(topic)
            if not _any_limit(policies) and not limits.busy:
                topic.limits = None
        elif _any_limit(policies):
            topic.limits = limits = TopicLimits(
                policies, broker_max_message_bytes=self._cfg.max_message_size_bytes, events=self._events
            )
            limits.gate_subscriptions(topic)
        limits = topic.limits
        if limits is not None and limits.policies.message_ttl_s is not None:
            self._with_ttl[topic.name] = topic
        elif self._with_ttl.get(topic.name) is topic:
            del self._with_ttl[topic.name]
        self._retention(topic, policies)

    def _retention(self, topic: Topic, policies: NamespacePolicies) -> None:
        """A reliable topic's retention: its own policies', else its record's, else its
        namespace's, else the broker's defaults; its compaction threshold likewise (no record
        sets one)."""
        rt = topic.reliable
        if rt is None:
            return
        time_s, size = policies.retention_time_s, policies.retention_size_bytes
        now = (
            max(0, int(time_s if time_s is not None else self._cfg.retention_time_s)),
            max(0, int(size if size is not None else self._cfg.retention_size_bytes)),
        )
        if now != (rt.policies.retention_time_s, rt.policies.retention_size_bytes):
            rt.policies = replace(rt.policies, retention_time_s=now[0], retention_size_bytes=now[1])
            rt.retention_changed()
            log.info("topic %s: retention now %ds / %d bytes (policies)", topic.name, now[0], now[1])
        threshold = policies.compaction_threshold_bytes
        compact_at = max(0, int(threshold if threshold is not None else self._cfg.compaction_threshold_bytes))
        if compact_at != rt.policies.compaction_threshold_bytes:
            rt.set_compaction_threshold(compact_at)
            log.info("topic %s: compaction threshold now %d bytes (policies)", topic.name, compact_at)

    def namespaces_changed(self, namespaces: set[str]) -> None:
        """The view saw these namespaces' policies change: refresh their loaded topics."""
        for topic in list(self._topics.values()):
            if topic.topic_name.namespace in namespaces:
                self.refresh(topic)
        log.info("namespace policies changed: %s", ", ".join(sorted(namespaces)))

    def subscribed(self, topic: Topic) -> None:
        """A consumer attached (maybe to a new subscription): gate it if the rate says so."""
        limits = topic.limits
        if limits is not None and limits.policies.dispatch_rate_msgs_per_s is not None:
            limits.gate_subscriptions(topic)

    async def run_expiry(self, interval_s: float = EXPIRY_INTERVAL_S) -> None:
        """Forever: apply the message TTL of every loaded topic that has one (an idle broker
        whose namespaces set no TTL walks nothing)."""
        while True:
            await asyncio.sleep(interval_s)
            now_ms = int(time.time() * 1000)
            for name, topic in list(self._with_ttl.items()):
                if topic.closed or self._topics.get(name) is not topic:
                    if self._with_ttl.get(name) is topic:
                        del self._with_ttl[name]  # unloaded (a reload refreshes its successor)
                    continue
                limits = topic.limits
                if limits is None or limits.policies.message_ttl_s is None:
                    continue
                try:
                    await limits.expire(topic, now_ms)
                except DanubeError as exc:
                    log.warning("topic %s: applying the message TTL failed (%s); retrying", topic.name, exc)

    def max_message_bytes(self, topic: Topic) -> int:
        limits = topic.limits
        return limits.max_message_bytes if limits is not None else self._cfg.max_message_size_bytes


def _any_limit(p: NamespacePolicies) -> bool:
    return any(
        v is not None
        for v in (
            p.max_producers_per_topic,
            p.max_consumers_per_topic,
            p.max_subscriptions_per_topic,
            p.max_message_size_bytes,
            p.publish_rate_msgs_per_s,
            p.publish_rate_bytes_per_s,
            p.backlog_quota_messages,
            p.message_ttl_s,
            p.dispatch_rate_msgs_per_s,
        )
    )
