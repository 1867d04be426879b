"""Delayed and scheduled delivery: the due time a message carries (``deliver_at_ms``).

``send(..., deliver_after=...)`` and ``send(..., deliver_at=...)`` both become one wall-clock
time, Unix epoch milliseconds, computed here on the producer's clock (as Pulsar's client does;
keep client and broker clocks in sync with NTP). The broker stores it with the message and holds
the message back on shared and key-shared subscriptions of reliable topics until then.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from danube_common.errors import InvalidArgument

#: Far enough for any schedule, small enough for a uint64 of milliseconds.
MAX_DELAY_S = 10 * 365 * 24 * 3600


def deliver_at_ms(
    *, deliver_after: float | timedelta | None, deliver_at: int | datetime | None, now_ms: int
) -> int:
    """The due time to put on the wire (0: deliver at once).

    ``deliver_after``: seconds (or a timedelta) from now, >= 0. ``deliver_at``: epoch milliseconds
    (int) or an aware datetime. A due time in the past means "at once". At most one of the two.
    """
    if deliver_after is None and deliver_at is None:
        return 0
    if deliver_after is not None and deliver_at is not None:
        raise InvalidArgument("give deliver_after or deliver_at, not both")
    if deliver_after is not None:
        after_s = (
            deliver_after.total_seconds() if isinstance(deliver_after, timedelta) else float(deliver_after)
        )
        if not (0 <= after_s <= MAX_DELAY_S):
            raise InvalidArgument(f"deliver_after must be between 0 and {MAX_DELAY_S} seconds, got {after_s}")
        # Rounded up: never earlier than asked.
        return now_ms + math.ceil(after_s * 1000)
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None:
            raise InvalidArgument("deliver_at needs a timezone-aware datetime (e.g. datetime.now(UTC))")
        at_ms = math.ceil(deliver_at.timestamp() * 1000)
    elif isinstance(deliver_at, int) and not isinstance(deliver_at, bool):
        at_ms = deliver_at
    else:
        raise InvalidArgument(
            f"deliver_at must be epoch milliseconds (int) or a datetime, got {deliver_at!r}"
        )
    if at_ms < 0 or at_ms > now_ms + MAX_DELAY_S * 1000:
        raise InvalidArgument(f"deliver_at {at_ms} ms is out of range (0 .. now + {MAX_DELAY_S} s)")
    return at_ms
