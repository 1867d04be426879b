"""Namespace policies: limits and defaults every topic of a namespace inherits.

Stored in the namespace record (``Keys.namespace(ns)``, JSON ``{"policies": {...}}``) by the
admin API; brokers follow them with a watch (:mod:`namespace_view`). A policy that is not set
means "no limit" (or, for a default, the broker's configured default). Values only here: the
names, units and validation of each policy, how a change is merged into the stored set, and
which of them a topic's own policies override (``topic_overrides``).

Units are in the names (``_per_s``, ``_bytes``, ``_s``). Every count must be at least 1 and
every rate above 0: "unlimited" is expressed by leaving the policy unset (or clearing it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from danube_common.errors import InvalidArgument

#: What a topic does when its backlog reaches ``backlog_quota_messages``.
BACKLOG_POLICIES: tuple[str, ...] = ("hold", "refuse", "evict")
DISPATCH_STRATEGIES: tuple[str, ...] = ("non_reliable", "reliable")
DURABILITIES: tuple[str, ...] = ("fsync", "none", "cloud")

_MAX_COUNT = 1_000_000
_MAX_RATE = 1e12
_MAX_BYTES = 1 << 50
_MAX_SECONDS = 100 * 365 * 24 * 3600


@dataclass(frozen=True, slots=True)
class NamespacePolicies:
    """One namespace's policies; None = not set. JSON keys are the field names (those of
    ``danube.admin.v1.NamespacePolicies``); the JSON holds only the fields that are set."""

    #: Admission limits, checked when a producer / consumer / subscription attaches to a topic.
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_subscriptions_per_topic: int | None = None
    #: Topics of the namespace (each partition counts as one), checked when a topic is created.
    max_topics: int | None = None
    #: Largest payload a producer may publish (the broker's own limit applies too).
    max_message_size_bytes: int | None = None
    #: Publish rate per topic: batches over it wait (the producer is slowed, nothing is dropped).
    publish_rate_msgs_per_s: float | None = None
    publish_rate_bytes_per_s: float | None = None
    #: Reliable topics: unacknowledged messages of the slowest subscription, and what happens
    #: when a publish would go over it.
    backlog_quota_messages: int | None = None
    backlog_quota_policy: str | None = None
    #: Reliable topics: unacknowledged messages older than this are acknowledged on each
    #: subscription's behalf (expired, counted).
    message_ttl_s: int | None = None
    #: Reliable topics: deliveries per second per subscription (averaged; the consumers'
    #: window may go out at once, the next deliveries then wait).
    dispatch_rate_msgs_per_s: float | None = None
    #: Reliable topics: retention defaults for topics that do not set their own.
    retention_time_s: int | None = None
    retention_size_bytes: int | None = None
    #: Reliable topics: the owning broker compacts a topic once this many bytes were published
    #: to it since its last compaction (0: never automatically).
    compaction_threshold_bytes: int | None = None
    #: Defaults for topics created from now on without saying (admin ``topics create``).
    default_dispatch_strategy: str | None = None
    default_durability: str | None = None

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> NamespacePolicies:
        """The policies in a stored dict; unknown keys (a newer writer's) are ignored."""
        if not d:
            return cls()
        return cls(**{k: d[k] for k in FIELD_NAMES if k in d and d[k] is not None})

    def is_empty(self) -> bool:
        return not self.to_json()

    # ------------------------------------------------------------------ changes
    def updated(self, changes: dict[str, Any], clear: list[str] | tuple[str, ...] = ()) -> NamespacePolicies:
        """These policies with ``changes`` set and the ``clear`` ed ones unset (validated)."""
        unknown = [n for n in (*changes, *clear) if n not in FIELD_NAMES]
        if unknown:
            raise InvalidArgument(
                f"unknown namespace polic{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}: "
                f"known are {', '.join(FIELD_NAMES)}"
            )
        both = sorted(set(changes) & set(clear))
        if both:
            raise InvalidArgument(f"{', '.join(both)} both set and cleared: choose one")
        out = replace(self, **changes, **dict.fromkeys(clear))
        return out.validate()

    def validate(self) -> NamespacePolicies:
        """Raise InvalidArgument saying what is allowed unless every set policy makes sense."""

        def bounded(name: str, value: float | None, low: float, high: float) -> None:
            if value is not None and not low <= value <= high:
                raise InvalidArgument(
                    f"{name} must be between {low:g} and {high:g}, got {value}; "
                    "to remove the limit, clear the policy"
                )

        for name in ("max_producers_per_topic", "max_consumers_per_topic", "max_subscriptions_per_topic"):
            bounded(name, getattr(self, name), 1, _MAX_COUNT)
        bounded("max_topics", self.max_topics, 1, _MAX_COUNT)
        bounded("max_message_size_bytes", self.max_message_size_bytes, 1, _MAX_BYTES)
        bounded("publish_rate_msgs_per_s", self.publish_rate_msgs_per_s, 1e-3, _MAX_RATE)
        bounded("publish_rate_bytes_per_s", self.publish_rate_bytes_per_s, 1, _MAX_RATE)
        bounded("backlog_quota_messages", self.backlog_quota_messages, 1, _MAX_BYTES)
        bounded("message_ttl_s", self.message_ttl_s, 1, _MAX_SECONDS)
        bounded("dispatch_rate_msgs_per_s", self.dispatch_rate_msgs_per_s, 1e-3, _MAX_RATE)
        bounded("retention_time_s", self.retention_time_s, 0, _MAX_SECONDS)
        bounded("retention_size_bytes", self.retention_size_bytes, 0, _MAX_BYTES)
        bounded("compaction_threshold_bytes", self.compaction_threshold_bytes, 0, _MAX_BYTES)
        _one_of("backlog_quota_policy", self.backlog_quota_policy, BACKLOG_POLICIES)
        _one_of("default_dispatch_strategy", self.default_dispatch_strategy, DISPATCH_STRATEGIES)
        _one_of("default_durability", self.default_durability, DURABILITIES)
        if self.backlog_quota_policy is not None and self.backlog_quota_messages is None:
            raise InvalidArgument(
                "backlog_quota_policy needs backlog_quota_messages (the quota it applies at)"
            )
        return self

    # ------------------------------------------------------------------ what topics see
    @property
    def backlog_policy(self) -> str:
        """The backlog policy in force (``hold`` unless set)."""
        return self.backlog_quota_policy or "hold"

    def topic_defaults(self) -> dict[str, Any]:
        """What a reliable topic's policies fall back to (keys of the topic record's
        ``policies``): retention, the compaction threshold, and durability for a topic whose
        record has none."""
        out: dict[str, Any] = {}
        if self.default_durability is not None:
            out["durability"] = self.default_durability
        if self.retention_time_s is not None:
            out["retention_time_s"] = self.retention_time_s
        if self.retention_size_bytes is not None:
            out["retention_size_bytes"] = self.retention_size_bytes
        if self.compaction_threshold_bytes is not None:
            out["compaction_threshold_bytes"] = self.compaction_threshold_bytes
        return out

    def overridden_by(self, own: NamespacePolicies | None) -> NamespacePolicies:
        """These, with every limit ``own`` (a topic's own policies) sets taking precedence."""
        if own is None:
            return self
        return self.with_topic_overrides(own.to_json())

    def for_topic(
        self, record_policies: dict[str, Any] | None, own: NamespacePolicies | None
    ) -> NamespacePolicies:
        """What one topic's brokers apply: these (its namespace's), over them what its record
        set at creation (retention), over those its own policies (``topics set-policies``)."""
        return self.with_topic_overrides(record_policies).overridden_by(own)

    def only_limits(self) -> NamespacePolicies:
        """InvalidArgument unless every policy set here is one a topic may override."""
        other = [k for k in self.to_json() if k not in TOPIC_NAMES]
        if other:
            raise InvalidArgument(
                f"{', '.join(other)}: only the namespace can set {'these' if len(other) > 1 else 'this'}; "
                f"a topic may override {', '.join(TOPIC_NAMES)}"
            )
        return self

    def with_topic_overrides(self, topic_policies: dict[str, Any] | None) -> NamespacePolicies:
        """The limits (retention, compaction threshold) a topic sees: these, with any its own record's
        ``policies`` (or its own policies) set (same key) taking precedence."""
        if not topic_policies:
            return self
        own = {k: topic_policies[k] for k in TOPIC_NAMES if topic_policies.get(k) is not None}
        return replace(self, **own) if own else self


def _one_of(name: str, value: str | None, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(NamespacePolicies))
#: Policies a topic's own record may override (the rest are defaults for new topics).
LIMIT_NAMES: tuple[str, ...] = (
    "max_producers_per_topic",
    "max_consumers_per_topic",
    "max_subscriptions_per_topic",
    "max_message_size_bytes",
    "publish_rate_msgs_per_s",
    "publish_rate_bytes_per_s",
    "backlog_quota_messages",
    "backlog_quota_policy",
    "message_ttl_s",
    "dispatch_rate_msgs_per_s",
)
#: Reliable topics' retention: a namespace default, a topic's record (set at creation), or
#: the topic's own policies (``topics set-policies``), the later taking precedence.
RETENTION_NAMES: tuple[str, ...] = ("retention_time_s", "retention_size_bytes")
#: Reliable topics' automatic compaction: a namespace default, or the topic's own policies.
COMPACTION_NAMES: tuple[str, ...] = ("compaction_threshold_bytes",)
#: Policies one topic may set over its namespace's (``topics set-policies``).
TOPIC_NAMES: tuple[str, ...] = LIMIT_NAMES + RETENTION_NAMES + COMPACTION_NAMES

#: One line per policy: the admin CLI's help and the docs say the same.
DESCRIPTIONS: dict[str, str] = {
    "max_producers_per_topic": "producers attached to one topic (more: TOO_MANY_PRODUCERS)",
    "max_consumers_per_topic": "consumers of one topic, all subscriptions (more: TOO_MANY_CONSUMERS)",
    "max_subscriptions_per_topic": "subscriptions of one topic (more: TOO_MANY_SUBSCRIPTIONS)",
    "max_topics": "topics in the namespace, each partition counted (more: TOO_MANY_TOPICS)",
    "max_message_size_bytes": "largest payload accepted (larger: MESSAGE_TOO_LARGE)",
    "publish_rate_msgs_per_s": "messages per second per topic; producers over it are slowed (acks delayed)",
    "publish_rate_bytes_per_s": "payload bytes per second per topic; producers over it are slowed",
    "backlog_quota_messages": "reliable topics: unacknowledged messages of the slowest subscription",
    "backlog_quota_policy": "at the quota: hold (producers wait), refuse (QUOTA_EXCEEDED), evict (oldest "
    "unacknowledged messages are skipped)",
    "message_ttl_s": "reliable topics: unacknowledged messages older than this are expired (acknowledged, "
    "counted)",
    "dispatch_rate_msgs_per_s": "reliable topics: deliveries per second per subscription (averaged)",
    "retention_time_s": "reliable topics without their own: keep acknowledged messages this long (with "
    "object storage, there too)",
    "retention_size_bytes": "reliable topics without their own: keep acknowledged messages up to this size "
    "(with object storage, there too)",
    "compaction_threshold_bytes": "reliable topics: compacted by their broker once this many bytes were "
    "published since the last compaction (0: never automatically; `topics compact` compacts now)",
    "default_dispatch_strategy": "new topics created without one: non_reliable or reliable",
    "default_durability": "new reliable topics created without one: fsync, none or cloud",
}
