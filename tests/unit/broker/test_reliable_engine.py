"""The per-subscription reliable engine on a fake log with a hand-moved clock."""

from __future__ import annotations

import asyncio

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.dispatch.reliable.policy import SubscriptionPolicy
from tests.support import wait_until
from tests.unit.broker.fake_log import FakeLog
from tests.unit.broker.reliable_helpers import DeadLetters, make_rig, offsets, publish, take

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- windows and durability
async def test_window_bounds_unacked_messages_and_acks_open_it_again() -> None:
    rig = make_rig()
    c = rig.attach("c", window=3)
    await publish(rig.log, 10)
    await rig.pump()
    assert offsets(take(c)) == [0, 1, 2]
    await rig.pump()
    assert take(c) == [], "a full window is back-pressure: nothing more is sent"
    rig.engine.ack([1])
    await rig.pump()
    assert offsets(take(c)) == [3]
    rig.engine.ack([0, 2, 3])
    await rig.pump()
    assert offsets(take(c)) == [4, 5, 6]
    assert rig.engine.cursor == 3 and rig.engine.backlog() == 6


async def test_only_durable_messages_are_delivered() -> None:
    log = FakeLog(auto_commit=False)
    rig = make_rig(log=log)
    c = rig.attach("c")
    append = asyncio.create_task(publish(log, 3))
    await wait_until(lambda: log.next_offset == 3)
    await rig.pump()
    assert take(c) == [] and not append.done()
    log.commit()
    assert await append == 0
    await rig.pump()
    assert offsets(take(c)) == [0, 1, 2]


async def test_replay_from_disk_when_below_the_tail_cache() -> None:
    log = FakeLog(cache_entries=2)
    rig = make_rig(log=log)
    await publish(log, 6)
    c = rig.attach("c", window=100)
    await rig.pump()
    got = take(c)
    assert offsets(got) == list(range(6))
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(6)]


async def test_no_consumer_means_no_delivery_and_nothing_lost() -> None:
    rig = make_rig(SubType.SHARED)
    await publish(rig.log, 4)
    assert await rig.pump() == 0
    c = rig.attach("late")
    await rig.pump()
    assert offsets(take(c)) == [0, 1, 2, 3]


# ---------------------------------------------------------------- acks
async def test_cursor_advances_over_out_of_order_acks() -> None:
    rig = make_rig()
    rig.attach("c", window=10)
    await publish(rig.log, 5)
    await rig.pump()
    rig.engine.ack([4, 2, 1])
    # The cursor stays; the acked ranges above it changed: the topic is told (they are persisted).
    assert rig.engine.cursor == -1 and rig.cursor_moves == [-1]
    assert rig.engine.acks.persistable() == ((1, 2), (4, 4))
    rig.engine.ack([0])
    assert rig.engine.cursor == 2 and rig.cursor_moves == [-1, 2]
    rig.engine.ack([2, 1])  # nothing new: nothing to tell
    assert rig.cursor_moves == [-1, 2]
    rig.engine.ack([3, 3, 99])
    assert rig.engine.cursor == 4 and rig.engine.unacked_in_flight == 0


async def test_cumulative_ack_acknowledges_everything_before() -> None:
    rig = make_rig(SubType.FAILOVER)
    c = rig.attach("c", window=10)
    await publish(rig.log, 6)
    await rig.pump()
    take(c)
    rig.engine.ack_through(3)
    assert rig.engine.cursor == 3 and sorted(c.unacked) == [4, 5]
    rig.engine.ack([5])
    rig.engine.ack_through(4)
    assert rig.engine.cursor == 5 and not c.unacked


# ---------------------------------------------------------------- nack, timeouts, backoff
async def test_nack_redelivers_the_same_offset_after_the_backoff() -> None:
    policy = SubscriptionPolicy(redelivery_backoff_base_ms=1000, redelivery_backoff_max_ms=3000)
    rig = make_rig(policy=policy)
    c = rig.attach("c")
    await publish(rig.log, 2)
    await rig.pump()
    take(c)
    rig.engine.nack(0)
    await rig.pump()
    assert take(c) == [], "the backoff (1 s) has not passed"
    assert rig.engine.next_deadline() == pytest.approx(rig.clock() + 1.0)
    rig.clock.advance(1.0)
    await rig.pump()
    again = take(c)
    assert offsets(again) == [0] and again[0].redelivery_count == 1
    rig.engine.nack(0)
    rig.clock.advance(1.9)
    await rig.pump()
    assert take(c) == [], "second failure waits base * 2"
    rig.clock.advance(0.1)
    await rig.pump()
    assert [m.redelivery_count for m in take(c)] == [2]
    for _ in range(2):
        rig.engine.nack(0)
        rig.clock.advance(3.0)  # capped at redelivery_backoff_max_ms
        await rig.pump()
        assert offsets(take(c)) == [0]


async def test_nack_with_an_explicit_delay_and_with_zero_delay() -> None:
    rig = make_rig()
    c = rig.attach("c")
    await publish(rig.log, 2)
    await rig.pump()
    take(c)
    rig.engine.nack(1, delay_ms=0)
    await rig.pump()
    assert offsets(take(c)) == [1]
    rig.engine.nack(0, delay_ms=250, reason="busy")
    rig.clock.advance(0.2)
    await rig.pump()
    assert take(c) == []
    rig.clock.advance(0.05)
    await rig.pump()
    assert offsets(take(c)) == [0]


async def test_ack_timeout_redelivers_unacked_messages() -> None:
    policy = SubscriptionPolicy(ack_timeout_ms=5000, redelivery_backoff_base_ms=0)
    rig = make_rig(policy=policy)
    c = rig.attach("c")
    await publish(rig.log, 3)
    await rig.pump()
    take(c)
    rig.engine.ack([1])
    rig.clock.advance(4.9)
    await rig.pump()
    assert take(c) == []
    rig.clock.advance(0.1)
    await rig.pump()
    got = take(c)
    assert offsets(got) == [0, 2] and {m.redelivery_count for m in got} == {1}
    assert rig.engine.ack_timeouts_total == 2


async def test_ack_timeout_zero_never_redelivers() -> None:
    rig = make_rig(policy=SubscriptionPolicy(ack_timeout_ms=0))
    c = rig.attach("c")
    await publish(rig.log, 1)
    await rig.pump()
    take(c)
    rig.clock.advance(10_000)
    await rig.pump()
    assert take(c) == [] and rig.engine.next_deadline() == float("inf")


# ---------------------------------------------------------------- poison
def poison_policy(kind: str, **kw: object) -> SubscriptionPolicy:
    return SubscriptionPolicy(
        max_redeliveries=2,
        redelivery_backoff_base_ms=0,
        poison_policy=kind,
        **kw,  # type: ignore[arg-type]
    )


async def fail_until_poison(rig, c, offset: int = 0) -> int:  # type: ignore[no-untyped-def]
    """Nack ``offset`` each time it arrives until it stops coming; return deliveries seen."""
    seen = 0
    while True:
        await rig.pump()
        got = [m for m in take(c) if m.msg_id.topic_offset == offset]
        if not got:
            return seen
        seen += 1
        rig.engine.nack(offset, reason="cannot parse")


async def test_max_redeliveries_then_drop_acknowledges_and_counts() -> None:
    rig = make_rig(policy=poison_policy("drop"))
    c = rig.attach("c")
    await publish(rig.log, 1)
    assert await fail_until_poison(rig, c) == 3, "1 delivery + max_redeliveries (2)"
    assert rig.engine.dropped_total == 1 and rig.engine.cursor == 0


async def test_max_redeliveries_then_dead_letter_then_ack() -> None:
    sink = DeadLetters()
    sink.fail_times = 1
    rig = make_rig(policy=poison_policy("dead_letter", dead_letter_topic="/default/dlq"), dead_letter=sink)
    c = rig.attach("c")
    await publish(rig.log, 2, key="k")
    await rig.pump()
    take(c)
    rig.engine.ack([1])
    rig.engine.nack(0, reason="cannot parse")
    assert await fail_until_poison(rig, c) == 2
    await wait_until(lambda: rig.engine.cursor == 1, what="original acked after the dead-letter copy")
    [(topic, copy)] = sink.published
    assert topic == "/default/dlq" and copy.payload == b"m0" and copy.routing_key == "k"
    assert not copy.HasField("msg_id") and copy.sequence_id == 0
    assert dict(copy.attributes) == {
        "i": "0",
        "x-original-topic": "/default/rel",
        "x-original-subscription": "s",
        "x-original-offset": "0",
        "x-delivery-attempts": "3",
        "x-failure-reason": "nack: cannot parse",
    }
    assert rig.engine.dead_lettered_total == 1 and rig.engine.dead_letters.failures_total == 1
    await rig.engine.aclose()


async def test_max_redeliveries_then_block_stops_delivery_until_the_policy_changes() -> None:
    rig = make_rig(policy=poison_policy("block"))
    c = rig.attach("c", window=10)
    await publish(rig.log, 1)
    assert await fail_until_poison(rig, c) == 3
    await publish(rig.log, 2)
    await rig.pump()
    assert take(c) == [] and rig.engine.blocked_at == 0, "nothing past the blocked message"
    rig.engine.set_policy(poison_policy("drop"))
    await rig.pump()
    assert offsets(take(c)) == [1, 2] and rig.engine.cursor == 0 and rig.engine.dropped_total == 1


async def test_blocked_message_acked_late_unblocks() -> None:
    rig = make_rig(policy=poison_policy("block"))
    c = rig.attach("c")
    await publish(rig.log, 1)
    await fail_until_poison(rig, c)
    await publish(rig.log, 1)
    await rig.pump()
    assert take(c) == [] and rig.engine.blocked_at == 0
    rig.engine.ack([0])
    await rig.pump()
    assert rig.engine.blocked_at is None and offsets(take(c)) == [1]


async def test_raising_max_redeliveries_releases_a_blocked_message() -> None:
    rig = make_rig(policy=poison_policy("block"))
    c = rig.attach("c")
    await publish(rig.log, 1)
    await fail_until_poison(rig, c)
    rig.engine.set_policy(SubscriptionPolicy(max_redeliveries=10, redelivery_backoff_base_ms=0))
    await rig.pump()
    assert [m.redelivery_count for m in take(c)] == [3]


# ---------------------------------------------------------------- disconnects
async def test_disconnect_redelivers_at_once_without_charging_a_failure() -> None:
    rig = make_rig(SubType.SHARED, policy=SubscriptionPolicy(max_redeliveries=1, poison_policy="drop"))
    a = rig.attach("a", window=2)
    b = rig.attach("b", window=10)
    await publish(rig.log, 4)
    await rig.pump()
    sent_to_a = offsets(take(a))
    assert len(sent_to_a) == 2 and len(take(b)) == 2
    session = a._session
    assert session is not None
    a.stream_closed(session, rig.clock())
    await rig.pump()
    moved = take(b)
    assert offsets(moved) == sent_to_a and {m.redelivery_count for m in moved} == {1}
    # a lone consumer that keeps reconnecting: the messages come back every time, never dropped
    for attempt in range(2, 5):
        session = b._session
        assert session is not None
        b.stream_closed(session, rig.clock())
        b.open_stream()
        await rig.pump()
        got = take(b)
        assert len(got) == 4 and max(m.redelivery_count for m in got) == attempt
    assert rig.engine.dropped_total == 0


async def test_messages_queued_but_never_sent_are_not_counted_as_redelivered() -> None:
    rig = make_rig(SubType.FAILOVER)
    a = rig.attach("a", window=3)
    b = rig.attach("b", window=3)
    await publish(rig.log, 3)
    await rig.pump()
    assert [m.msg_id.topic_offset for m in a.queue.take(1)] == [0]  # only 0 went out
    rig.sub.detach(a, rig.clock())
    a.close()
    rig.sub.consumers_changed()
    await rig.pump()
    got = take(b)
    assert [(m.msg_id.topic_offset, m.redelivery_count) for m in got] == [(0, 1), (1, 0), (2, 0)]


# ---------------------------------------------------------------- key shared
async def test_key_shared_keeps_per_key_order_across_a_redelivery() -> None:
    rig = make_rig(SubType.KEY_SHARED)
    a = rig.attach("a", window=100)
    for i in range(12):
        await publish(rig.log, 1, key=f"k{i % 3}")
    await rig.pump()
    take(a)
    b = rig.attach("b", window=100)
    session = a._session
    assert session is not None
    a.stream_closed(session, rig.clock())  # all of a's unacked go to b, in offset order
    await publish(rig.log, 6, key="k0")
    await rig.pump()
    got = take(b)
    by_key: dict[str, list[int]] = {}
    for m in got:
        by_key.setdefault(m.routing_key, []).append(m.msg_id.topic_offset)
    assert sorted(o for v in by_key.values() for o in v) == list(range(18))
    for key, offs in by_key.items():
        assert offs == sorted(offs), f"key {key} out of order: {offs}"


async def test_key_shared_full_consumer_does_not_stall_other_keys() -> None:
    rig = make_rig(SubType.KEY_SHARED)
    a = rig.attach("a", window=1, filters=("a*",))
    b = rig.attach("b", window=100, filters=("b*",))
    for i in range(10):
        await publish(rig.log, 1, key="a" if i < 5 else "b")
    await rig.pump()
    assert offsets(take(a)) == [0]
    assert offsets(take(b)) == [5, 6, 7, 8, 9]


async def test_key_shared_unmatched_key_waits_for_a_consumer_that_accepts_it() -> None:
    rig = make_rig(SubType.KEY_SHARED)
    a = rig.attach("a", filters=("a*",))
    await publish(rig.log, 1, key="zzz")
    await publish(rig.log, 1, key="a1")
    await rig.pump()
    assert offsets(take(a)) == [1]
    z = rig.attach("z", filters=("z*",))
    await rig.pump()
    assert offsets(take(z)) == [0]


# ---------------------------------------------------------------- seek and restore
async def test_seek_back_replays_and_seek_forward_acks() -> None:
    rig = make_rig()
    c = rig.attach("c", window=100)
    await publish(rig.log, 10)
    await rig.pump()
    take(c)
    rig.engine.ack(range(6))
    assert rig.engine.seek(2) == 2 and rig.engine.cursor == 1
    await rig.pump()
    assert offsets(take(c)) == list(range(2, 10))
    assert rig.engine.seek(8) == 8 and rig.engine.cursor == 7
    await rig.pump()
    assert offsets(take(c)) == [8, 9]
    assert rig.engine.seek(1_000) == 10 and rig.engine.seek(-5 + 0) == 0


async def test_seek_by_publish_time() -> None:
    rig = make_rig()
    c = rig.attach("c", window=100)
    for t in (100, 200, 300, 400):
        await publish(rig.log, 1, t_ms=t)
    assert await rig.engine.seek_to_time(250) == 2
    await rig.pump()
    assert offsets(take(c)) == [2, 3]


async def test_restored_cursor_resumes_after_it_and_skips_nothing() -> None:
    log = FakeLog()
    await publish(log, 5)
    rig = make_rig(log=log, cursor=2)
    c = rig.attach("c")
    await rig.pump()
    assert offsets(take(c)) == [3, 4]


async def test_the_loop_wakes_on_new_data_and_on_timers() -> None:
    rig = make_rig(policy=SubscriptionPolicy(redelivery_backoff_base_ms=1000))
    c = rig.attach("c")
    rig.engine.start()
    try:
        await publish(rig.log, 2)
        rig.engine.notify()
        await wait_until(lambda: len(c.queue) == 2, what="delivery after notify")
        take(c)
        rig.engine.nack(1)
        rig.clock.advance(1.0)
        rig.engine.notify()
        await wait_until(lambda: len(c.queue) == 1, what="redelivery after the backoff")
    finally:
        await rig.engine.aclose()


async def test_a_replaced_stream_gets_what_the_old_stream_had_sent() -> None:
    rig = make_rig()
    c = rig.attach("c", window=5)
    await publish(rig.log, 3)
    await rig.pump()
    assert offsets(c.queue.take(2)) == [0, 1]  # sent on the old stream, maybe lost with it
    c.open_stream()  # the client came back before the old stream's end was noticed
    await rig.pump()
    got = take(c)
    assert [(m.msg_id.topic_offset, m.redelivery_count) for m in got] == [(0, 1), (1, 1), (2, 0)]


async def test_a_failing_disk_read_stalls_the_subscription_then_it_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from danube_broker.dispatch.reliable import engine as engine_module
    from danube_common.errors import CorruptData

    monkeypatch.setattr(engine_module, "READ_RETRY_FIRST_S", 0.01)
    log = FakeLog(cache_entries=0)
    log.read_failures.append(CorruptData("bad frame at offset 0"))
    rig = make_rig(log=log)
    c = rig.attach("c")
    await publish(log, 2)
    rig.engine.start()
    try:
        await wait_until(lambda: len(c.queue) == 2, what="delivery after the read is retried")
        assert rig.engine.task is not None and not rig.engine.task.done()
    finally:
        await rig.engine.aclose()


async def test_a_read_of_only_acked_messages_does_not_stall_the_loop() -> None:
    """A new owner's subscription reads history whose acks the client re-sent after the move:
    that read delivers nothing, and the loop must read on, not wait for a wake-up that may
    never come (the producer may be done)."""
    log = FakeLog()
    await publish(log, 10)
    rig = make_rig(log=log, read_batch=4)
    c = rig.attach("c", window=100)
    rig.engine.ack(range(6))  # acks re-sent by the client before the history could be read
    rig.engine.start()
    try:
        await wait_until(lambda: len(c.queue) == 4, what="the unacked rest delivered without a notify")
        assert offsets(take(c)) == [6, 7, 8, 9]
    finally:
        await rig.engine.aclose()
