"""Topic policies (durability, retention) and subscription policies (redelivery, poison
messages): their names, limits and validation. Values only; :mod:`resources` stores them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from danube_common.errors import InvalidArgument
from danube_common.topic_name import TopicName

#: Reliable topics: when the producer is acknowledged (after fsync; at once; after upload).
DURABILITY_NAMES: tuple[str, ...] = ("fsync", "none", "cloud")
DEFAULT_DURABILITY = "fsync"
#: What happens to a message delivered ``max_redeliveries`` times.
POISON_POLICIES: tuple[str, ...] = ("dead_letter", "drop", "block")
_MAX_SUBSCRIPTION_LEN = 200
_MAX_REDELIVERIES = 1_000_000
_MAX_ACK_TIMEOUT_MS = 7 * 24 * 3600 * 1000
_MAX_BACKOFF_MS = 24 * 3600 * 1000


def topic_policies(
    dispatch_strategy: str,
    *,
    durability: str = "",
    retention_time_s: int = 0,
    retention_size_bytes: int = 0,
    unclean_takeover_after_s: int = 0,
) -> dict[str, Any]:
    """The validated ``policies`` of a new topic record.

    Reliable topics get ``{"durability", "retention_time_s", "retention_size_bytes"}``
    (durability defaults to ``fsync``; retention 0 = delete once every subscription has
    acknowledged). Non-reliable topics keep nothing, so any of these is refused.
    """
    if dispatch_strategy != "reliable":
        asked = {"durability": durability, "retention_time_s": retention_time_s}
        asked["retention_size_bytes"] = retention_size_bytes
        asked["unclean_takeover_after_s"] = unclean_takeover_after_s
        given = [f"{name}={value!r}" for name, value in asked.items() if value]
        if given:
            raise InvalidArgument(
                f"{', '.join(given)}: durability and retention apply to reliable topics only; "
                "create the topic with dispatch strategy reliable, or leave them out"
            )
        return {}
    durability = durability or DEFAULT_DURABILITY
    if durability not in DURABILITY_NAMES:
        raise InvalidArgument(f"unknown durability {durability!r}: use one of {', '.join(DURABILITY_NAMES)}")
    for name, value in (
        ("retention_time_s", retention_time_s),
        ("retention_size_bytes", retention_size_bytes),
        ("unclean_takeover_after_s", unclean_takeover_after_s),
    ):
        if value < 0:
            raise InvalidArgument(
                f"{name} must be 0 (no retention after acknowledgement) or more, got {value}"
            )
    policies: dict[str, Any] = {
        "durability": durability,
        "retention_time_s": int(retention_time_s),
        "retention_size_bytes": int(retention_size_bytes),
    }
    if unclean_takeover_after_s:
        policies["unclean_takeover_after_s"] = int(unclean_takeover_after_s)
    return policies


def validate_subscription_name(sub: str) -> str:
    bad = "/" in sub or sub in (".", "..") or not sub.isprintable() or any(c.isspace() for c in sub)
    if bad or not 0 < len(sub) <= _MAX_SUBSCRIPTION_LEN:
        raise InvalidArgument(
            f"invalid subscription name {sub!r}: use 1-{_MAX_SUBSCRIPTION_LEN} printable characters "
            "without '/' or spaces"
        )
    return sub


@dataclass(frozen=True, slots=True)
class SubscriptionPolicyRecord:
    """A subscription's failure policy as stored at ``Keys.subscription_policy`` (JSON keys are
    the field names of ``danube.admin.v1.SubscriptionPolicy``). Every field is optional: None
    means not set, and the owning broker's configured default applies. The JSON holds only the
    fields that are set; setting a policy replaces the stored one as a whole (fields not given
    are not kept from an earlier policy, they fall back to the broker's defaults)."""

    #: Redeliveries of one message (after its first delivery) before the poison policy
    #: applies: N allows 1 + N deliveries (0: unlimited, the poison policy never applies).
    max_redeliveries: int | None = None
    #: Unacked this long after delivery -> redelivered (0: never).
    ack_timeout_ms: int | None = None
    #: Redelivery delay: base * 2^(attempt-1), capped at max (0/0: redeliver at once).
    redelivery_backoff_base_ms: int | None = None
    redelivery_backoff_max_ms: int | None = None
    #: "dead_letter" | "drop" | "block"
    poison_policy: str | None = None
    #: With dead_letter: the reliable topic poison messages are published to.
    dead_letter_topic: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that are set (an unset field is absent, not null)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionPolicyRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def validate(self, topic: TopicName) -> SubscriptionPolicyRecord:
        """Raise InvalidArgument (saying what is allowed) unless this policy makes sense for
        a subscription of ``topic``; return self. Only the fields that are set are checked."""
        if not self.to_json():
            raise InvalidArgument(
                "the policy sets nothing: pass at least one option "
                f"({', '.join(self.__dataclass_fields__)}); options not given use the broker's defaults"
            )

        def bounded(name: str, value: int | None, high: int) -> None:
            if value is not None and not 0 <= value <= high:
                raise InvalidArgument(f"{name} must be between 0 and {high}, got {value}")

        bounded("max_redeliveries", self.max_redeliveries, _MAX_REDELIVERIES)
        bounded("ack_timeout_ms", self.ack_timeout_ms, _MAX_ACK_TIMEOUT_MS)
        bounded("redelivery_backoff_base_ms", self.redelivery_backoff_base_ms, _MAX_BACKOFF_MS)
        bounded("redelivery_backoff_max_ms", self.redelivery_backoff_max_ms, _MAX_BACKOFF_MS)
        base, cap = self.redelivery_backoff_base_ms, self.redelivery_backoff_max_ms
        if base is not None and cap is not None and cap < base:
            raise InvalidArgument(
                f"redelivery_backoff_max_ms ({cap}) must be at least redelivery_backoff_base_ms ({base})"
            )
        if self.poison_policy is not None and self.poison_policy not in POISON_POLICIES:
            raise InvalidArgument(
                f"poison_policy must be one of {', '.join(POISON_POLICIES)} (or left out for the "
                f"broker's default), got {self.poison_policy!r}"
            )
        if self.poison_policy == "dead_letter" and not self.dead_letter_topic:
            raise InvalidArgument("poison_policy dead_letter needs a dead_letter_topic (/namespace/topic)")
        if self.dead_letter_topic is None:
            return self
        if self.poison_policy is not None and self.poison_policy != "dead_letter":
            raise InvalidArgument(
                f"dead_letter_topic is only used with poison_policy dead_letter (not {self.poison_policy})"
            )
        dlq = TopicName.parse(self.dead_letter_topic)
        if dlq.base == topic.base:
            raise InvalidArgument(
                f"dead_letter_topic {dlq} is the topic itself (or one of its partitions); choose another topic"
            )
        return self
