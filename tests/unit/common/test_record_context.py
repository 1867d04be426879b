"""Trace context through etcd records: written only under a sampled span, read back as the
parent (or link) of the next span; records without it read as before. Also the local object
store's child spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.objstore.errors import ObjectNotFound
from danube_common.objstore.local import LocalObjectStore
from danube_common.observability import record_context, tracing
from danube_common.placement import Resolver
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support.tracing import capture_spans, children, one, traceparent

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOPIC = TopicName.parse("/default/t")
SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def test_nothing_is_carried_while_tracing_is_off_or_nothing_sampled_is_current() -> None:
    assert record_context.current() == {}
    with capture_spans(sampler=ALWAYS_OFF), tracing.tracer("t").start_as_current_span("unsampled"):
        assert record_context.current() == {}
    with capture_spans():
        assert record_context.current() == {}, "no current span"


def test_a_record_carries_the_current_span_and_parents_the_next_one() -> None:
    with capture_spans() as exporter:
        with tracing.tracer("t").start_as_current_span("writer") as writer:
            record = {"to": "b2", **record_context.current()}
        assert record["traceparent"] == traceparent(writer)  # type: ignore[arg-type]
        parent = record_context.parent(record_context.traceparent_of(record))
        assert parent is not None
        with tracing.tracer("t").start_as_current_span("reader", context=parent):
            pass
    spans = exporter.get_finished_spans()
    assert children(spans, one(spans, "writer")) == [one(spans, "reader")]


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"traceparent": SAMPLED}, SAMPLED),
        ({"to": ""}, ""),
        ({"traceparent": 7}, ""),
        (None, ""),
        (["traceparent"], ""),
    ],
)
def test_traceparent_of_a_record(record: object, expected: str) -> None:
    assert record_context.traceparent_of(record) == expected


@pytest.mark.parametrize("tp", ["", UNSAMPLED, "00-bad-bad-01", "garbage"])
def test_no_parent_nor_link_for_an_unsampled_or_malformed_context(tp: str) -> None:
    assert record_context.parent(tp) is None
    assert record_context.link(tp) is None


def test_a_link_names_the_recorded_span() -> None:
    ln = record_context.link(SAMPLED, {"danube.plan.id": "p1"})
    assert ln is not None
    assert (ln.context.trace_id, ln.context.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )
    assert ln.attributes == {"danube.plan.id": "p1"}


async def test_ownership_records_carry_the_callers_context(memory_store: MemoryStore) -> None:
    res = Resources(memory_store, Keys("c"))
    keys = res.keys
    await memory_store.put(keys.broker("b2"), BrokerRecord("b2", "h:2", "http://h:2").to_json())
    own = await res.assign_if_unowned(TOPIC, "b1")  # tracing off: records as before
    assert "traceparent" not in (await memory_store.get_json(keys.owner(TOPIC)))
    with capture_spans():
        with tracing.tracer("t").start_as_current_span("move") as move:
            marked = await res.mark_moving(own, "b2")
        assert marked is not None
        mark = await memory_store.get_json(keys.assignment("b1", TOPIC))
        assert mark["moving_to"] == "b2" and mark["traceparent"] == traceparent(move)  # type: ignore[arg-type]
        got = await res.get_owner(TOPIC)
        assert got == Ownership(str(TOPIC), "b1", marked.epoch, "b2"), "readers ignore the field"
        with tracing.tracer("t").start_as_current_span("hand over") as hand:
            assert await res.hand_over(marked)
        new = await memory_store.get_json(keys.assignment("b2", TOPIC))
        assert new["traceparent"] == traceparent(hand)  # type: ignore[arg-type]
        assert (await memory_store.get_json(keys.owner(TOPIC)))["traceparent"] == new["traceparent"]


async def test_a_placement_request_carries_the_lookups_context(memory_store: MemoryStore) -> None:
    res = Resources(memory_store, Keys("c"))
    await res.create_namespace("default")
    resolver = Resolver(res, view=None, wait_s=0.1)  # type: ignore[arg-type]
    with capture_spans(), tracing.tracer("t").start_as_current_span("TopicLookup") as lookup:
        await resolver._request(TOPIC)
    request = await memory_store.get_json(res.keys.unassigned(TOPIC))
    assert request["traceparent"] == traceparent(lookup)  # type: ignore[arg-type]
    assert request["requested_at_ms"] > 0


async def test_local_object_store_calls_are_child_spans_under_a_sampled_span(tmp_path: Path) -> None:
    store = await LocalObjectStore.open(tmp_path, prefix="p/")
    try:
        with capture_spans() as exporter:
            await store.put("a/1", b"x")  # no current span
            with tracing.tracer("t").start_as_current_span("upload"):
                await store.put("a/2", b"y")
                assert [o.key for o in await store.list("a/")] == ["a/1", "a/2"]
                with pytest.raises(ObjectNotFound):
                    await store.get("a/3")
        spans = exporter.get_finished_spans()
        under = children(spans, one(spans, "upload"))
        assert [s.name for s in under] == ["local PutObject", "local ListObjects", "local GetObject"]
        assert len(spans) == 4, "nothing outside the sampled span"
        assert under[0].kind == SpanKind.CLIENT and under[0].attributes["danube.objstore.key"] == "p/a/2"
        assert under[2].status.status_code == StatusCode.ERROR
    finally:
        await store.aclose()
    assert trace.get_current_span() is trace.INVALID_SPAN
