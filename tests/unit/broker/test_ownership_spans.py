"""A topic move as one trace between two brokers (in-memory etcd, fake logs): the load
manager's move span -> the old owner's ``hand over`` -> the new owner's ``load`` -> its ``open
log``, each broker reading the context from the record the previous step wrote."""

from __future__ import annotations

from typing import Any

import pytest

from danube_broker.handoff import TopicMover
from danube_broker.membership import Membership
from danube_broker.registry import BrokerRegistry
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.observability import record_context, tracing
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.support.tracing import capture_spans, children, one, traceparent
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = "/default/moving"
T = TopicName.parse(TOPIC)


def registry(res: Resources, broker_id: str) -> BrokerRegistry:
    cfg: Any = config(broker_id=broker_id, cursor_flush_interval_ms=1)
    return BrokerRegistry(cfg, res, broker_url=BROKER_URL, clock=Clock(), id_seed=1, open_log=FakeLogs())


async def test_a_move_is_one_trace_across_both_brokers(memory_store: MemoryStore) -> None:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    await memory_store.put(res.keys.broker("b2"), BrokerRecord("b2", "h:2", "http://h:2").to_json())
    old, new = registry(res, "b1"), registry(res, "b2")
    mover = TopicMover(old, res, move_timeout_s=5)
    p = await old.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="reliable")
    batch = [pb.StreamMessage(payload=b"a"), pb.StreamMessage(payload=b"b")]
    await old.publish(p, batch, old.payload_bytes(batch), stream=None)
    own = await res.get_owner(T)
    assert own is not None and own.broker_id == "b1"
    try:
        with capture_spans() as exporter:
            with tracing.tracer("test").start_as_current_span("move /default/moving") as decision:
                marked = await res.mark_moving(own, "b2")
            assert marked is not None
            mark = await memory_store.get_json(res.keys.assignment("b1", T))
            mover.on_move(T, marked, traceparent=record_context.traceparent_of(mark))
            await wait_until(lambda: mover.outcomes.get(TOPIC) == "handed over", what="the hand-over")
            handed = await memory_store.get(res.keys.assignment("b2", T))
            assert handed is not None
            new.on_assigned(T, handed.mod_revision, traceparent=record_context.traceparent_of(handed.json()))
            await wait_until(
                lambda: any(s.name == "load /default/moving" for s in exporter.get_finished_spans()),
                what="the new owner's load span",
            )
            spans = exporter.get_finished_spans()
        hand_over = one(spans, "hand over /default/moving")
        assert children(spans, decision) == [hand_over]  # type: ignore[arg-type]
        assert hand_over.attributes["danube.move.outcome"] == "handed over"
        assert hand_over.attributes["danube.log.next_offset"] == 2
        assert hand_over.attributes["danube.broker.to"] == "b2"
        assert [e.name for e in hand_over.events] == ["sealed", "drained", "unloaded and closed"]
        assert record_context.traceparent_of(handed.json()) == traceparent(hand_over)
        load = one(spans, "load /default/moving")
        assert children(spans, hand_over) == [load]
        assert (
            load.attributes["danube.broker.id"] == "b2"
            and load.attributes["danube.topic.dispatch"] == "reliable"
        )
        opened = one(spans, "open log /default/moving")
        assert children(spans, load) == [opened]
        assert opened.attributes["danube.log.start_offset"] == 2, (
            "the new owner continues where the log ended"
        )
        assert "log stint recorded" in [e.name for e in opened.events]
        assert {s.context.trace_id for s in spans} == {decision.get_span_context().trace_id}
    finally:
        old.close_all("test over")
        new.close_all("test over")
        await old.wait_closed()
        await new.wait_closed()
        await mover.aclose()


async def test_an_assignment_without_a_context_loads_without_a_span(memory_store: MemoryStore) -> None:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    reg = registry(res, "b1")
    m = Membership(res, reg, registration_ttl_s=3)
    await res.assign_if_unowned(T, "b1")
    try:
        with capture_spans() as exporter:
            await m.load_assignments()
            await wait_until(lambda: TOPIC in reg.topics, what="the topic loaded")
            await reg.tasks.wait()
        assert exporter.get_finished_spans() == (), "a load with no traced decision behind it starts no trace"
    finally:
        reg.close_all("test over")
        await reg.wait_closed()
