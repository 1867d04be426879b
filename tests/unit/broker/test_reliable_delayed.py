"""Delayed and scheduled delivery in the reliable engine (fake log, hand-moved clocks)."""

from __future__ import annotations

import math

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.dispatch.reliable.delayed import due_monotonic, honours_delays
from tests.unit.broker.reliable_helpers import WALL_OFFSET_S, Rig, make_rig, offsets, record, take

pytestmark = pytest.mark.unit


def wall_ms(rig: Rig, after_s: float) -> int:
    """The epoch-ms due time ``after_s`` from the rig's now."""
    return round((rig.clock() + WALL_OFFSET_S + after_s) * 1000)


async def publish_delays(rig: Rig, delays_s: list[float | None]) -> None:
    """One message per entry: delayed by that many seconds, or not delayed (None)."""
    first = rig.log.next_offset
    recs = [
        record(first + i, deliver_at_ms=0 if d is None else wall_ms(rig, d)) for i, d in enumerate(delays_s)
    ]
    await rig.log.append(recs, [1_000] * len(recs))


# ---------------------------------------------------------------- the pure rules
@pytest.mark.parametrize(
    ("deliver_at_ms", "wall_now_s", "mono_now", "due"),
    [
        (0, 100.0, 5.0, None),  # no due time
        (100_000, 100.0, 5.0, None),  # due exactly now
        (99_000, 100.0, 5.0, None),  # due in the past (read late, after a restart)
        (102_500, 100.0, 5.0, 7.5),  # 2.5 s ahead
    ],
)
def test_due_monotonic(deliver_at_ms: int, wall_now_s: float, mono_now: float, due: float | None) -> None:
    got = due_monotonic(deliver_at_ms, wall_now_s=wall_now_s, mono_now=mono_now)
    assert got == (None if due is None else pytest.approx(due))


@pytest.mark.parametrize(
    ("kind", "holds"),
    [
        (SubType.SHARED, True),
        (SubType.KEY_SHARED, True),
        (SubType.EXCLUSIVE, False),
        (SubType.FAILOVER, False),
    ],
)
def test_which_subscriptions_hold_delayed_messages(kind: SubType, holds: bool) -> None:
    assert honours_delays(kind) is holds


# ---------------------------------------------------------------- the engine
@pytest.mark.parametrize("kind", [SubType.SHARED, SubType.KEY_SHARED])
async def test_a_delayed_message_waits_for_its_due_time_and_others_pass(kind: SubType) -> None:
    rig = make_rig(kind)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [None, 5.0, None, None])
    await rig.pump()
    assert offsets(take(c)) == [0, 2, 3], "the messages behind the delayed one are not held"
    assert rig.engine.delayed == 1 and rig.engine.pending_redeliveries == 0
    # The engine's next timer is the due time: the task sleeps until then (no polling).
    assert rig.engine.next_deadline() == pytest.approx(rig.clock() + 5.0)
    rig.clock.advance(4.99)
    await rig.pump()
    assert take(c) == [], "never before the due time"
    rig.clock.advance(0.01)
    await rig.pump()
    got = take(c)
    assert offsets(got) == [1] and got[0].redelivery_count == 0
    assert rig.engine.delayed == 0 and rig.engine.redelivered_total == 0


async def test_due_times_order_delivery_not_offsets() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [3.0, 1.0, 2.0])
    await rig.pump()
    assert take(c) == []
    seen: list[int] = []
    for _ in range(3):
        rig.clock.advance(1.0)
        await rig.pump()
        seen += offsets(take(c))
    assert seen == [1, 2, 0]


async def test_the_cursor_never_passes_an_undelivered_delayed_message() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [None, 60.0, None, None])
    await rig.pump()
    rig.engine.ack(offsets(take(c)))
    assert rig.engine.cursor == 0, "offset 1 is unacknowledged: the persisted cursor stays below it"
    assert rig.engine.backlog() == 1
    rig.clock.advance(60.0)
    await rig.pump()
    rig.engine.ack(offsets(take(c)))
    assert rig.engine.cursor == 3 and rig.engine.backlog() == 0


async def test_a_restarted_engine_reads_the_delayed_message_again_and_still_waits() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [None, 10.0, None])
    await rig.pump()
    rig.engine.ack(offsets(take(c)))
    cursor = rig.engine.cursor
    rig.clock.advance(4.0)
    # A new owner (restart or move): same log, the persisted cursor, the same clocks.
    again = make_rig(SubType.SHARED, log=rig.log, cursor=cursor, clock=rig.clock)
    c2 = again.attach("c2", window=100)
    await again.pump()
    # Acks above the persisted cursor are not kept (at-least-once): offset 2 comes again; offset
    # 1 is still 6 s away.
    assert offsets(take(c2)) == [2]
    assert again.engine.delayed == 1
    again.clock.advance(6.0)
    await again.pump()
    assert offsets(take(c2)) == [1]


async def test_a_message_read_after_its_due_time_goes_at_once() -> None:
    rig = make_rig(SubType.SHARED)
    await publish_delays(rig, [1.0, None])
    rig.clock.advance(2.0)
    c = rig.attach("c", window=100)
    await rig.pump()
    assert offsets(take(c)) == [0, 1]
    assert rig.engine.delayed == 0


@pytest.mark.parametrize("kind", [SubType.EXCLUSIVE, SubType.FAILOVER])
async def test_exclusive_and_failover_deliver_in_order_at_once(kind: SubType) -> None:
    rig = make_rig(kind)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [None, 30.0, None])
    await rig.pump()
    got = take(c)
    assert offsets(got) == [0, 1, 2]
    assert got[1].deliver_at_ms == wall_ms(rig, 30.0), "the due time travels with the message"


async def test_a_nacked_delayed_message_is_redelivered_like_any_other() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [1.0])
    rig.clock.advance(1.0)
    await rig.pump()
    assert offsets(take(c)) == [0]
    rig.engine.nack(0, delay_ms=0)
    await rig.pump()
    got = take(c)
    assert offsets(got) == [0] and got[0].redelivery_count == 1


async def test_reading_pauses_at_max_delayed_until_the_earliest_is_due() -> None:
    rig = make_rig(SubType.SHARED, max_delayed=2, read_batch=1)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [5.0, 5.0, None, None])
    await rig.pump()
    assert take(c) == [] and rig.engine.delayed == 2 and rig.engine.read_pos == 2, "back-pressure"
    rig.clock.advance(5.0)
    await rig.pump()
    assert offsets(take(c)) == [0, 1, 2, 3]


async def test_delayed_messages_do_not_count_against_max_pending() -> None:
    rig = make_rig(SubType.SHARED, max_pending=2, read_batch=1)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [9.0, 9.0, 9.0, None])
    await rig.pump()
    assert offsets(take(c)) == [3] and rig.engine.delayed == 3


async def test_seek_forgets_held_messages_and_reads_them_again() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [5.0, 5.0])
    await rig.pump()
    assert rig.engine.delayed == 2
    rig.engine.seek(1)
    assert rig.engine.delayed == 0
    await rig.pump()
    assert rig.engine.delayed == 1 and take(c) == []
    rig.clock.advance(5.0)
    await rig.pump()
    assert offsets(take(c)) == [1]


async def test_no_timer_when_nothing_is_delayed() -> None:
    rig = make_rig(SubType.SHARED)
    c = rig.attach("c", window=100)
    await publish_delays(rig, [None, None])
    await rig.pump()
    rig.engine.ack(offsets(take(c)))  # no ack-timeout timers either
    assert math.isinf(rig.engine.next_deadline())


@pytest.mark.parametrize("seed", range(8))
async def test_random_operations_keep_the_books_and_never_deliver_early(seed: int) -> None:
    """Publishes (delayed or not), clock steps, acks, nacks and seeks in random order: the
    DELAYED count matches the records, nothing is delivered before its due time, and in the
    end every message is delivered and acknowledged."""
    import random

    from danube_broker.dispatch.reliable.pending import State

    rng = random.Random(seed)
    rig = make_rig(SubType.SHARED, max_delayed=5, read_batch=4, max_pending=8)
    c = rig.attach("c", window=6)
    held: list[int] = []
    for _ in range(300):
        op = rng.random()
        if op < 0.35:
            await publish_delays(rig, [rng.choice([None, 0.5, 1.0, 3.0])])
        elif op < 0.55:
            rig.clock.advance(rng.choice([0.1, 0.5, 1.0]))
        elif op < 0.8 and held:
            rig.engine.ack([held.pop(rng.randrange(len(held)))])
        elif op < 0.9 and held:
            rig.engine.nack(held.pop(rng.randrange(len(held))), delay_ms=rng.choice([0, 500]))
        elif op < 0.93:
            rig.engine.seek(rng.randrange(rig.log.next_offset + 1))
            held.clear()
        await rig.pump()
        now_ms = (rig.clock() + WALL_OFFSET_S) * 1000
        for m in take(c):
            assert m.deliver_at_ms <= now_ms + 1e-6, "delivered before its due time"
            held.append(m.msg_id.topic_offset)
        records = list(rig.engine.pending.values())
        assert rig.engine.delayed == sum(p.state is State.DELAYED for p in records)
    # Drain: time passes, everything delivered is acknowledged.
    for _ in range(200):
        rig.clock.advance(5.0)
        rig.engine.ack(held)
        held.clear()
        await rig.pump()
        held += offsets(take(c))
        if rig.engine.cursor == rig.log.next_offset - 1:
            break
    assert rig.engine.cursor == rig.log.next_offset - 1 and rig.engine.delayed == 0
