"""The load manager's pure core: scoring and the plan of one pass."""

from __future__ import annotations

import pytest

from danube_common.load import LoadReport, TopicLoad
from danube_common.load_score import BrokerLoad, scores
from danube_common.records import BrokerRecord, Ownership
from danube_load_manager.decide import (
    DropMoveRequest,
    Limits,
    MarkDrained,
    Move,
    Place,
    Replace,
    Snapshot,
    next_actions,
)
from danube_load_manager.scoring import Placer, pick
from tests.support.score_table import CASES, Case

pytestmark = pytest.mark.unit


def brokers(*ids: str, state: str = "active") -> dict[str, BrokerRecord]:
    return {b: BrokerRecord(b, f"{b}:1", f"http://{b}:1", state) for b in ids}


def owners(**placement: str) -> dict[str, Ownership]:
    out = {}
    for i, (topic, broker) in enumerate(sorted(placement.items())):
        name = f"/default/{topic}"
        out[name] = Ownership(name, broker, 100 + i)
    return out


def snap(**kw: object) -> Snapshot:
    base: dict[str, object] = {
        "brokers": brokers("b1", "b2", "b3"),
        "admin_states": {},
        "admin_state_revisions": {},
        "reports": {},
        "owners": {},
    }
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def report(broker: str, *, msg_rate: float = 0.0, cpu: float = 0.0) -> LoadReport:
    return LoadReport.build(
        broker,
        0,
        [TopicLoad("/default/x", msg_rate_in=msg_rate, byte_rate_in=msg_rate * 100)],
        interval_s=5,
        cpu_usage=cpu,
        cpu_cores=2,
        mem_rss_bytes=0,
        mem_total_bytes=0,
        max_topics=10,
    )


# ---------------------------------------------------------------- scoring
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_placer_scores_and_picks_by_the_shared_table(case: Case) -> None:
    counts = {b.broker_id: b.topics for b in case.brokers}
    reports = {b.broker_id: b.report(0) for b in case.brokers}
    placer = Placer(sorted(counts), counts, reports, case.weights)
    assert scores(placer.loads(), case.weights) == pytest.approx(case.expected)
    assert placer.pick() == case.least_loaded()


def test_idle_noise_does_not_outweigh_a_topic() -> None:
    # Thousandths of a core and a few messages per second are noise next to one more topic.
    loads = [BrokerLoad("a", 5, msgs=3, cpu=0.001), BrokerLoad("b", 4, msgs=9, cpu=0.009)]
    assert pick(loads) == "b"
    # Real load does count: b is far busier per core.
    assert pick([BrokerLoad("a", 5, cpu=0.1), BrokerLoad("b", 4, cpu=0.9)]) == "a"


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ([BrokerLoad("a", 5), BrokerLoad("b", 2), BrokerLoad("c", 9)], "b"),
        ([BrokerLoad("a", 2), BrokerLoad("b", 2)], "a"),  # tie: smaller id
        ([BrokerLoad("a", 1, msgs=10_000), BrokerLoad("b", 2, msgs=10)], "b"),  # rates count
        ([BrokerLoad("a", 1, cpu=0.9), BrokerLoad("b", 1, cpu=0.1)], "b"),
        ([BrokerLoad("a", 1, cpu=0.002), BrokerLoad("b", 1, cpu=0.001)], "b"),  # a tie broken by load
        ([], None),
    ],
)
def test_pick_chooses_the_least_loaded(loads: list[BrokerLoad], expected: str | None) -> None:
    assert pick(loads) == expected


def test_placer_spreads_a_burst_of_new_topics_evenly() -> None:
    placer = Placer(["b1", "b2", "b3"], {"b1": 2}, {})
    picks = [placer.pick() for _ in range(10)]
    counts = {b: picks.count(b) for b in ("b1", "b2", "b3")}
    assert counts == {"b1": 2, "b2": 4, "b3": 4}  # b1 started with 2: all end at 4


# ---------------------------------------------------------------- planning
def test_requested_topics_are_placed_on_active_brokers_only() -> None:
    s = snap(
        unassigned=frozenset({"/default/a", "/default/b", "/default/c", "/default/d"}),
        admin_states={"b3": "draining"},
    )
    actions = next_actions(s, now_s=0, last_move_s={})
    places = [a for a in actions if isinstance(a, Place)]
    assert sorted(a.to for a in places) == ["b1", "b1", "b2", "b2"]
    assert actions[len(places) :] == [MarkDrained("b3", 0)]  # draining and empty


def test_an_already_owned_request_is_not_placed_again() -> None:
    s = snap(unassigned=frozenset({"/default/a"}), owners=owners(a="b1"))
    assert next_actions(s, now_s=0, last_move_s={}) == []


def test_a_dead_brokers_topics_are_replaced_fenced_on_their_epoch() -> None:
    s = snap(brokers=brokers("b1", "b2"), owners=owners(a="gone", b="gone", c="b1"))
    actions = next_actions(s, now_s=0, last_move_s={})
    assert actions == [
        Replace("/default/a", "gone", 100, "b2"),
        Replace("/default/b", "gone", 101, "b1"),
    ]


def test_nothing_is_replaced_without_an_active_broker() -> None:
    s = snap(brokers=brokers("b1", state="draining"), owners=owners(a="gone"))
    assert next_actions(s, now_s=0, last_move_s={}) == []


def test_drain_moves_topics_within_the_budget_then_marks_drained() -> None:
    s = snap(
        owners=owners(a="b1", b="b1", c="b1", d="b2"),
        admin_states={"b1": "draining"},
        admin_state_revisions={"b1": 7},
    )
    actions = next_actions(s, now_s=0, last_move_s={}, limits=Limits(max_moves_in_flight=2))
    assert [type(a) for a in actions] == [Move, Move]
    assert all(a.owner == "b1" and a.to != "b1" for a in actions)  # type: ignore[union-attr]
    empty = snap(admin_states={"b1": "draining"}, admin_state_revisions={"b1": 7}, owners=owners(d="b2"))
    assert next_actions(empty, now_s=0, last_move_s={}) == [MarkDrained("b1", 7)]


def test_moves_in_flight_count_against_the_budget() -> None:
    own = owners(a="b1", b="b1")
    own["/default/a"] = Ownership("/default/a", "b1", 100, moving_to="b2")
    s = snap(owners=own, admin_states={"b1": "draining"})
    assert next_actions(s, now_s=0, last_move_s={}, limits=Limits(max_moves_in_flight=1)) == []
    actions = next_actions(s, now_s=0, last_move_s={}, limits=Limits(max_moves_in_flight=2))
    assert [a.topic for a in actions] == ["/default/b"]  # type: ignore[union-attr]


def test_move_requests_named_target_best_target_and_refusals() -> None:
    s = snap(
        owners=owners(a="b1", b="b1", c="b1", e="b2"),
        move_requests={
            "/default/a": "b3",
            "/default/b": "",
            "/default/c": "b1",
            "/default/d": "b2",
            "/default/e": "nope",
        },
    )
    actions = next_actions(s, now_s=0, last_move_s={})
    assert Move("/default/a", "b1", 100, "b3", "requested") in actions
    moves = {a.topic: a for a in actions if isinstance(a, Move)}
    assert moves["/default/b"].to in ("b2", "b3")
    drops = {a.topic for a in actions if isinstance(a, DropMoveRequest)}
    assert drops == {"/default/c", "/default/d", "/default/e"}


def test_cooldown_holds_back_a_recently_moved_topic() -> None:
    s = snap(owners=owners(a="b1"), move_requests={"/default/a": "b2"})
    limits = Limits(move_cooldown_s=10)
    assert next_actions(s, now_s=105, last_move_s={"/default/a": 100}, limits=limits) == []
    assert len(next_actions(s, now_s=111, last_move_s={"/default/a": 100}, limits=limits)) == 1


def test_a_broker_shutting_down_gets_no_new_topics() -> None:
    regs = brokers("b1", "b2")
    regs["b2"] = BrokerRecord("b2", "b2:1", "http://b2:1", "draining")
    s = snap(brokers=regs, unassigned=frozenset({"/default/a", "/default/b"}))
    assert {a.to for a in next_actions(s, now_s=0, last_move_s={})} == {"b1"}  # type: ignore[union-attr]


def test_a_broker_shutting_down_hands_its_topics_over_while_it_serves_them() -> None:
    """Lame duck: a graceful stop moves the broker's topics away (not marked drained after)."""
    regs = brokers("b1", "b2")
    regs["b2"] = BrokerRecord("b2", "b2:1", "http://b2:1", "draining")
    s = snap(brokers=regs, owners=owners(a="b2", b="b2", c="b1"))
    moves = next_actions(s, now_s=0, last_move_s={})
    assert sorted((m.topic, m.to) for m in moves if isinstance(m, Move)) == [
        ("/default/a", "b1"),
        ("/default/b", "b1"),
    ]
    emptied = snap(brokers=regs, owners=owners(c="b1"))
    assert next_actions(emptied, now_s=0, last_move_s={}) == [], "no MarkDrained: it is not admin-drained"


def test_load_reports_steer_placement() -> None:
    s = snap(
        unassigned=frozenset({"/default/new"}),
        reports={
            "b1": report("b1", msg_rate=5000, cpu=1.5),
            "b2": report("b2", msg_rate=10),
            "b3": report("b3", msg_rate=4000),
        },
    )
    assert next_actions(s, now_s=0, last_move_s={}) == [Place("/default/new", "b2")]


def test_load_report_json_round_trip_and_truncation() -> None:
    topics = [TopicLoad(f"/default/t{i}", msg_rate_in=i, byte_rate_in=i * 10, backlog=i) for i in range(5)]
    r = LoadReport.build(
        "b1",
        1,
        topics,
        interval_s=5,
        cpu_usage=0.5,
        cpu_cores=2,
        mem_rss_bytes=1,
        mem_total_bytes=2,
        max_topics=2,
    )
    assert (
        r.topic_count == 5
        and r.topics_truncated
        and [t.topic for t in r.topics] == ["/default/t4", "/default/t3"]
    )
    assert r.backlog == 10 and r.msg_rate_in == 10
    back = LoadReport.from_json(r.to_json())
    assert back == r


# ---------------------------------------------------------------- counts kept by the view
def kept(s: Snapshot) -> Snapshot:
    """``s`` with the counts a view keeps next to its owners (what the view hands a pass)."""
    counts: dict[str, int] = {}
    for o in s.owners.values():
        counts[o.broker_id] = counts.get(o.broker_id, 0) + 1
    moving = frozenset(n for n, o in s.owners.items() if o.moving_to)
    return Snapshot(**{**{f: getattr(s, f) for f in Snapshot.__slots__}, "counts": counts, "moving": moving})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "s",
    [
        snap(owners=owners(a="b1", b="b9", c="b2"), unassigned=frozenset({"/default/n"})),  # b9 is dead
        snap(owners=owners(a="b1", b="b1", c="b2"), admin_states={"b1": "draining"}),
        snap(
            owners={
                **owners(a="b1", c="b2"),
                "/default/m": Ownership("/default/m", "b1", 7, moving_to="b2"),
            },
            move_requests={"/default/a": ""},
        ),
    ],
    ids=["orphans", "drain", "moving"],
)
def test_counts_kept_by_the_view_decide_as_a_walk_of_every_owner_does(s: Snapshot) -> None:
    assert next_actions(kept(s), now_s=0.0, last_move_s={}) == next_actions(s, now_s=0.0, last_move_s={})


async def test_the_view_keeps_topic_counts_and_moves_with_its_owners() -> None:
    from danube_common.keys import Keys
    from danube_common.metadata.memory import MemoryStore
    from danube_common.resources import Resources
    from danube_common.topic_name import TopicName
    from danube_load_manager.view import ControlView
    from tests.support import wait_until

    store = MemoryStore()
    res = Resources(store, Keys("c"))
    view = ControlView(store, res.keys)
    await view.start()
    try:
        a, b = TopicName("default", "a"), TopicName("default", "b")
        await res.assign_if_unowned(a, "1")
        held = await res.assign_if_unowned(b, "1")
        await res.store.put(res.keys.owner(a), {"broker_id": "1", "moving_to": "2", "assigned_at_ms": 0})
        await wait_until(lambda: bool(view.moving), timeout_s=5)
        assert (view.topic_counts, view.moving) == ({"1": 2}, {str(a)})
        await res.store.put(res.keys.owner(a), {"broker_id": "2", "assigned_at_ms": 0})
        assert await res.release(held)
        await wait_until(lambda: str(b) not in view.owners, timeout_s=5)
        assert (view.topic_counts, view.moving) == ({"2": 1}, set())
    finally:
        await view.aclose()
