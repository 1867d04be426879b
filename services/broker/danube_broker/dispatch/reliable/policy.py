"""A subscription's failure policy: ack timeout, redelivery backoff, and what to do with poison.

Stored by admins at ``Keys.subscription_policy(topic, sub)`` as JSON of the
``danube.admin.v1.SubscriptionPolicy`` fields; a field missing from the JSON takes the broker's
default (config). The owning broker watches the key and applies a change at once.

- ``max_redeliveries``: failed deliveries (nack or ack timeout) a message may have and still be
  delivered again; one more failure applies ``poison_policy``. 0 = unlimited (never poison).
- ``ack_timeout_ms``: a delivered message not acked this long after delivery counts as failed and
  is redelivered (0 = never).
- redelivery delay after the n-th failure: ``base * 2^(n-1)`` capped at ``max`` (a nack's own
  ``delay_ms`` wins over this).
- ``poison_policy``: ``block`` (Danube's default: stop delivering past the message until it is
  acked, the policy changes, or the subscription seeks past it), ``drop`` (ack it, count it) or
  ``dead_letter`` (publish it to ``dead_letter_topic``, then ack it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

PoisonPolicy = Literal["block", "drop", "dead_letter"]
POISON_POLICIES: tuple[str, ...] = ("block", "drop", "dead_letter")


class PolicyError(ValueError):
    """A stored policy that cannot be applied (the message says which field and why)."""


@dataclass(frozen=True, slots=True)
class SubscriptionPolicy:
    max_redeliveries: int = 0
    ack_timeout_ms: int = 30_000
    redelivery_backoff_base_ms: int = 1_000
    redelivery_backoff_max_ms: int = 60_000
    poison_policy: PoisonPolicy = "block"
    dead_letter_topic: str = ""

    def __post_init__(self) -> None:
        for name in (
            "max_redeliveries",
            "ack_timeout_ms",
            "redelivery_backoff_base_ms",
            "redelivery_backoff_max_ms",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PolicyError(f"{name} must be a non-negative integer, got {value!r}")
        if self.poison_policy not in POISON_POLICIES:
            raise PolicyError(
                f"poison_policy {self.poison_policy!r} is not one of {', '.join(POISON_POLICIES)}"
            )
        if self.poison_policy == "dead_letter" and not self.dead_letter_topic:
            raise PolicyError("poison_policy dead_letter needs a dead_letter_topic (a reliable topic)")

    @property
    def ack_timeout_s(self) -> float:
        """Seconds a delivery may stay unacked (``inf``: no timeout)."""
        return self.ack_timeout_ms / 1000.0 if self.ack_timeout_ms else math.inf

    def backoff_s(self, failures: int) -> float:
        """Delay before redelivering a message that has failed ``failures`` (>= 1) times."""
        base, cap = self.redelivery_backoff_base_ms, self.redelivery_backoff_max_ms
        exponent = max(0, failures - 1)
        # 2**exponent overflows nothing in Python, but stop doubling once past the cap.
        delay_ms = cap if exponent >= 63 or base << exponent > cap else base << exponent
        return delay_ms / 1000.0

    def exhausted(self, failures: int) -> bool:
        """Whether a message that has failed ``failures`` times is poison."""
        return self.max_redeliveries > 0 and failures > self.max_redeliveries

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def merged(self, stored: dict[str, Any] | None) -> SubscriptionPolicy:
        """This policy (the defaults) overridden by the fields present in ``stored``.

        Raises PolicyError for unknown fields or bad values.
        """
        if not stored:
            return self
        if not isinstance(stored, dict):
            raise PolicyError(f"a subscription policy is a JSON object, got {type(stored).__name__}")
        unknown = set(stored) - set(self.__dataclass_fields__)
        if unknown:
            raise PolicyError(
                f"unknown subscription policy field(s) {sorted(unknown)}; "
                f"known: {sorted(self.__dataclass_fields__)}"
            )
        fields = dict(stored)
        if fields.get("poison_policy") == "":
            del fields["poison_policy"]  # proto3 default: "not set"
        return replace(self, **fields)
