"""The load manager's decisions as spans: each continues the trace of the record that asked for
it (placement and move requests) or links to it (plan and drain moves), says why, and hands its
own context on in the records it writes. One planning pass on the in-memory etcd."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_common.keys import Keys
from danube_common.leadership import Leadership
from danube_common.metadata.memory import MemoryStore
from danube_common.observability import record_context, tracing
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_load_manager.app import LoadManager
from danube_load_manager.config import LoadManagerConfig
from danube_load_manager.decide import (
    DropMoveRequest,
    MarkDrained,
    Move,
    Place,
    Replace,
    Snapshot,
    next_actions,
)
from danube_load_manager.spans import describe
from danube_load_manager.view import ControlView
from tests.support import wait_until
from tests.support.tracing import capture_spans, children, one, traceparent

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PLAN_TP = "00-11111111111111111111111111111111-2222222222222222-01"


def snap(**kw: object) -> Snapshot:
    base: dict[str, object] = {
        "brokers": {},
        "admin_states": {},
        "admin_state_revisions": {},
        "reports": {},
        "owners": {},
    }
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("action", "snapshot", "name", "parent", "links", "attrs"),
    [
        (
            Place("/default/a", "b2", (("b2", 0.1), ("b1", 0.5))),
            snap(placement_traces={"/default/a": TP}),
            "place /default/a",
            TP,
            (),
            {
                "danube.broker.to": "b2",
                "danube.lm.scores": ["b2=0.1000", "b1=0.5000"],
                "danube.lm.action": "place",
            },
        ),
        (
            Replace("/default/a", "b1", 7, "b2"),
            snap(),
            "re-place /default/a",
            "",
            (),
            {"danube.broker.from": "b1", "danube.ownership.epoch": 7, "danube.lm.action": "re-place"},
        ),
        (
            Move("/default/a", "b1", 9, "b3", "requested"),
            snap(move_requests={"/default/a": "b3"}, move_traces={"/default/a": TP}),
            "move /default/a",
            TP,
            (),
            {"danube.lm.reason": "requested", "danube.broker.from": "b1", "danube.broker.to": "b3"},
        ),
        (
            Move("/default/a", "b1", 9, "b3", "plan p1", ("p1", 2)),
            snap(plans={"p1": {"traceparent": PLAN_TP}}, move_traces={"/default/a": TP}),
            "move /default/a",
            "",
            (PLAN_TP,),
            {"danube.plan.id": "p1", "danube.plan.move_index": 2},
        ),
        (
            Move("/default/a", "b1", 9, "b3", "draining broker b1"),
            snap(drain_traces={"b1": TP}),
            "move /default/a",
            "",
            (TP,),
            {"danube.lm.reason": "draining broker b1"},
        ),
        (
            DropMoveRequest("/default/a", "no other active broker"),
            snap(move_traces={"/default/a": TP}),
            "drop move request /default/a",
            TP,
            (),
            {"danube.lm.reason": "no other active broker"},
        ),
        (
            MarkDrained("b1", 5),
            snap(drain_traces={"b1": TP}),
            "mark drained b1",
            TP,
            (),
            {"danube.broker.id": "b1"},
        ),
    ],
)
def test_describe(
    action: object,
    snapshot: Snapshot,
    name: str,
    parent: str,
    links: tuple[str, ...],
    attrs: dict[str, object],
) -> None:
    d = describe(action, snapshot, term=4, candidate_id="lm1")  # type: ignore[arg-type]
    assert (d.name, d.parent, tuple(tp for tp, _ in d.links)) == (name, parent, links)
    assert d.attributes["danube.lm.term"] == 4 and d.attributes["danube.lm.candidate_id"] == "lm1"
    assert {k: d.attributes[k] for k in attrs} == attrs


@pytest.fixture
async def rig(memory_store: MemoryStore) -> AsyncIterator[tuple[Resources, ControlView, LoadManager]]:
    keys = Keys("c")
    res = Resources(memory_store, keys)
    for b in ("b1", "b2"):
        await memory_store.put(keys.broker(b), BrokerRecord(b, f"{b}:1", f"http://{b}:1").to_json())
    view = ControlView(memory_store, keys)
    await view.start()
    manager = LoadManager(LoadManagerConfig(candidate_id="lm1", reconcile_interval_s=0.1), res, view)
    try:
        yield res, view, manager
    finally:
        await view.aclose()


async def lead_of(store: MemoryStore, keys: Keys) -> Leadership:
    key = keys.leader_candidate("load-manager", "lm1")
    term = await store.put(key, {"candidate_id": "lm1"})
    return Leadership("load-manager", "lm1", term, key, "127.0.0.1:1")


async def test_a_pass_continues_the_requests_traces_and_hands_them_on(
    rig: tuple[Resources, ControlView, LoadManager],
) -> None:
    res, view, manager = rig
    store, keys = res.store, res.keys
    placed, moved, planned = (TopicName.parse(f"/default/{n}") for n in ("new", "moved", "planned"))
    await res.assign_if_unowned(moved, "b1")
    await res.assign_if_unowned(planned, "b1")
    lead = await lead_of(store, keys)  # type: ignore[arg-type]
    with capture_spans() as exporter:
        tr = tracing.tracer("test")
        with tr.start_as_current_span("TopicLookup") as lookup:
            await res.store.create(
                keys.unassigned(placed), {"requested_at_ms": 1, **record_context.current()}
            )
        with tr.start_as_current_span("MoveTopic") as admin_move:
            await store.put(keys.move_request(moved), {"to": "b2", **record_context.current()})
        with tr.start_as_current_span("planner cycle", context=None) as cycle:
            plan = {
                "plan_id": "p1",
                "status": "pending",
                "expires_at_ms": 1 << 60,
                "moves": [{"topic": str(planned), "from": "b1", "to": "b2", "status": "pending"}],
                **record_context.current(),
            }
        await store.put(keys.rebalance_plan("p1"), plan)
        await wait_until(
            lambda: (
                str(placed) in view.unassigned and str(moved) in view.move_requests and "p1" in view.plans
            ),
            what="the view to show the requests",
        )
        wrote = await manager._pass(lead, now_s=1000.0)
        assert wrote > 0
    spans = exporter.get_finished_spans()

    place = one(spans, "place /default/new")
    assert children(spans, lookup) == [place]  # type: ignore[arg-type]
    assert place.attributes["danube.lm.applied"] is True and place.attributes["danube.lm.term"] == lead.term
    assert place.attributes["danube.broker.to"] in ("b1", "b2")
    assert len(place.attributes["danube.lm.scores"]) == 2
    owner = await store.get_json(keys.owner(placed))
    assignment = await store.get_json(keys.assignment(owner["broker_id"], placed))
    assert owner["traceparent"] == assignment["traceparent"] == traceparent(place)

    move = one(spans, "move /default/moved")
    assert children(spans, admin_move) == [move]  # type: ignore[arg-type]
    mark = await store.get_json(keys.assignment("b1", moved))
    assert mark["moving_to"] == "b2" and mark["traceparent"] == traceparent(move)

    plan_move = one(spans, "move /default/planned")
    assert plan_move.parent is None, "a plan's move is a trace of its own"
    assert [ln.context.span_id for ln in plan_move.links] == [cycle.get_span_context().span_id]
    assert plan_move.attributes["danube.plan.id"] == "p1"
    mark = await store.get_json(keys.assignment("b1", planned))
    assert mark["traceparent"] == traceparent(plan_move)
    assert {s.name for s in spans} == {
        "TopicLookup",
        "MoveTopic",
        "planner cycle",
        "place /default/new",
        "move /default/moved",
        "move /default/planned",
    }


async def test_no_span_and_no_context_while_tracing_is_off(
    rig: tuple[Resources, ControlView, LoadManager],
) -> None:
    res, view, manager = rig
    store, keys = res.store, res.keys
    topic = TopicName.parse("/default/quiet")
    await store.create(keys.unassigned(topic), {"requested_at_ms": 1, "traceparent": TP})
    await wait_until(lambda: str(topic) in view.unassigned, what="the view to show the request")
    lead = await lead_of(store, keys)  # type: ignore[arg-type]
    assert await manager._pass(lead, now_s=1000.0) > 0
    owner = await store.get_json(keys.owner(topic))
    assert "traceparent" not in owner
    got = await res.get_owner(topic)
    assert isinstance(got, Ownership) and got.broker_id == owner["broker_id"]


def test_a_decision_keeps_the_scores_it_chose_by() -> None:
    brokers = {b: BrokerRecord(b, f"{b}:1", f"http://{b}:1") for b in ("b1", "b2")}
    owners = {"/default/x": Ownership("/default/x", "b1", 5)}
    actions = next_actions(
        snap(brokers=brokers, owners=owners, unassigned=frozenset({"/default/new"})), now_s=0, last_move_s={}
    )
    assert actions == [Place("/default/new", "b2")]
    place = actions[0]
    assert isinstance(place, Place) and [b for b, _ in place.scores] == ["b1", "b2"]
    scores = dict(place.scores)
    assert scores["b2"] < scores["b1"], "the chosen broker is the least loaded"
