"""Delayed and scheduled delivery: when a message with ``deliver_at_ms`` may go out.

A producer may ask that a message be delivered no earlier than a wall-clock time
(``StreamMessage.deliver_at_ms``, Unix epoch milliseconds; the SDK turns ``deliver_after`` into
it). The time is part of the stored message, so a broker that re-reads the log (after a restart,
or as the topic's new owner after a move) honours it again without any other state.

Rules, kept here as pure functions of values:

- Only **shared** and **key-shared** subscriptions hold a message back. Exclusive and failover
  subscriptions promise offset order and cumulative acks (which would acknowledge a message not
  yet delivered), so they deliver every message at once, in order, as Pulsar does.
- A held message is unacknowledged: the subscription's cursor (contiguous acks) cannot pass it,
  so a restart or move re-reads it; messages behind it are delivered meanwhile.
- The engine keeps its timers on the monotonic clock: the due time is converted once, when the
  message is read from the log.
"""

from __future__ import annotations

from danube_broker.dispatch.base import SubType

#: Subscription types that hold delayed messages back until their due time.
DELAYING_TYPES = frozenset({SubType.SHARED, SubType.KEY_SHARED})


def honours_delays(sub_type: SubType) -> bool:
    return sub_type in DELAYING_TYPES


def due_monotonic(deliver_at_ms: int, *, wall_now_s: float, mono_now: float) -> float | None:
    """The monotonic time at which a message due at ``deliver_at_ms`` may be delivered, or None
    when it is due already (or carries no due time)."""
    if deliver_at_ms <= 0:
        return None
    wait_s = deliver_at_ms / 1000.0 - wall_now_s
    if wait_s <= 0:
        return None
    return mono_now + wait_s
