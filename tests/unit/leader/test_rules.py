"""The election's pure decisions, in tables: who leads, where a campaign stands, bounds."""

from __future__ import annotations

import json

import pytest

from danube_common.errors import InvalidArgument
from danube_common.keys import Keys
from danube_common.leadership import (
    LeaderInfo,
    backoff_delay_s,
    candidate_value,
    fence,
    leader_of,
    leaders_from,
)
from danube_common.metadata.store import Compare, KeyValue, WatchEvent
from danube_leader.election import (
    UpdateKind,
    apply_event,
    campaign_view,
    choose_ttl_s,
    is_candidate_key,
    validate_metadata,
    validate_name,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

K = Keys("c")


def kv(role: str, cid: str, create: int, *, value: bytes | None = None) -> KeyValue:
    body = candidate_value(cid, {"addr": f"{cid}:1"}, 5) if value is None else value
    return KeyValue(K.leader_candidate(role, cid), body, create, create, 1, 7)


@pytest.mark.parametrize(
    ("revisions", "expected"),
    [
        ([], None),
        ([("a", 5)], "a"),
        ([("a", 9), ("b", 5), ("c", 7)], "b"),
        ([("b", 5), ("a", 5)], "a"),  # a tie (keys written in one hand-made txn): key order decides
        ([("z", 1), ("a", 2)], "z"),  # create order, not key order
    ],
)
def test_leader_is_the_lowest_create_revision(revisions: list[tuple[str, int]], expected: str | None) -> None:
    top = leader_of([kv("r", cid, rev) for cid, rev in revisions])
    assert (top.key.rsplit("/", 1)[-1] if top else None) == expected


def test_leaders_from_groups_by_role_and_ignores_other_keys() -> None:
    kvs = [
        kv("lm", "b", 4),
        kv("lm", "a", 9),
        kv("planner", "p", 12),
        KeyValue(K.leader("lm"), b"{}", 1, 1, 1),  # the bare role key is not a candidate
        KeyValue(K.leader_candidate("lm", "x") + "/deeper", b"{}", 2, 2, 1),
        KeyValue("/other/leaders/lm/q", b"{}", 1, 1, 1),
    ]
    got = leaders_from(kvs, K)
    assert set(got) == {"lm", "planner"}
    assert got["lm"] == LeaderInfo("lm", "b", 4, K.leader_candidate("lm", "b"), {"addr": "b:1"})
    assert got["planner"].term == 12


@pytest.mark.parametrize(
    ("value", "candidate_id", "metadata"),
    [
        (candidate_value("x", {"k": "v"}, 3), "x", {"k": "v"}),
        (b"", "x", {}),  # empty value: the key still names the candidate
        (b"not json", "x", {}),
        (json.dumps({"candidate_id": "x", "metadata": {"n": 1}}).encode(), "x", {"n": "1"}),
        (json.dumps(["a list"]).encode(), "x", {}),
    ],
)
def test_leader_info_decodes_what_it_can(value: bytes, candidate_id: str, metadata: dict[str, str]) -> None:
    info = LeaderInfo.from_kv("r", kv("r", "x", 3, value=value))
    assert (info.candidate_id, info.metadata, info.term) == (candidate_id, metadata, 3)


def test_fence_compares_the_create_revision() -> None:
    assert fence("/c/leaders/r/a", 42) == Compare("/c/leaders/r/a", "create", "==", 42)
    assert LeaderInfo("r", "a", 42, "/c/leaders/r/a").fence() == fence("/c/leaders/r/a", 42)
    with pytest.raises(ValueError, match="positive"):
        fence("/k", 0)


MINE = K.leader_candidate("r", "me")


@pytest.mark.parametrize(
    ("live", "kind", "leader"),
    [
        ([("me", 10)], UpdateKind.ELECTED, "me"),
        ([("me", 10), ("other", 12)], UpdateKind.ELECTED, "me"),
        ([("first", 8), ("me", 10)], UpdateKind.WAITING, "first"),
        ([("second", 9), ("first", 8), ("me", 10)], UpdateKind.WAITING, "first"),
        ([("first", 8)], UpdateKind.LOST, None),  # our key is gone
        ([("me", 11)], UpdateKind.LOST, None),  # a different key under our name: not ours
        ([], UpdateKind.LOST, None),
    ],
)
def test_campaign_view(live: list[tuple[str, int]], kind: UpdateKind, leader: str | None) -> None:
    kvs = {k.key: k for k in (kv("r", cid, rev) for cid, rev in live)}
    got_kind, info = campaign_view(kvs, role="r", key=MINE, term=10)
    assert got_kind is kind
    assert (info.candidate_id if info else None) == leader


@pytest.mark.parametrize(
    ("event", "keys_after"),
    [
        (WatchEvent("put", "/p/c", b"{}", 20, 20), {"/p/a", "/p/b", "/p/c"}),
        (WatchEvent("delete", "/p/a", b"", 21), {"/p/b"}),
        (WatchEvent("delete", "/p/zzz", b"", 21), {"/p/a", "/p/b"}),
        (WatchEvent("put", "/p/b", b'{"x":1}', 22, 6), {"/p/a", "/p/b"}),  # an update keeps create
    ],
)
def test_apply_event(event: WatchEvent, keys_after: set[str]) -> None:
    live = {"/p/a": KeyValue("/p/a", b"", 5, 5, 1), "/p/b": KeyValue("/p/b", b"", 6, 6, 1)}
    before = dict(live)
    after = apply_event(live, event)
    assert set(after) == keys_after
    assert live == before, "apply_event returns a new dict"
    if event.kind == "put":
        assert after[event.key].create_revision == event.create_revision


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("/c/leaders/r/a", True),
        ("/c/leaders/r/", False),
        ("/c/leaders/r/a/b", False),
        ("/c/leaders/rr/a", False),
    ],
)
def test_candidate_keys_are_one_segment_deep(key: str, ok: bool) -> None:
    assert is_candidate_key("/c/leaders/r/", key) is ok


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(0, 10), (2, 2), (10, 10), (300, 300), (1, None), (301, None)],
)
def test_ttl_bounds(requested: int, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(InvalidArgument, match=r"2\.\.300 seconds"):
            choose_ttl_s(requested, default_s=10, min_s=2, max_s=300)
    else:
        assert choose_ttl_s(requested, default_s=10, min_s=2, max_s=300) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("load-manager", True),
        ("spark-planner", True),
        ("lm-1@10.0.0.1:6650", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("", False),
        ("a/b", False),
        ("-lead", False),
        ("has space", False),
        ("..", False),
    ],
)
def test_names(name: str, ok: bool) -> None:
    if ok:
        assert validate_name("role", name) == name
    else:
        with pytest.raises(InvalidArgument, match=r"role .* is not allowed: use"):
            validate_name("role", name)


def test_metadata_bounds() -> None:
    assert validate_metadata({"addr": "h:1"}, max_bytes=16) == {"addr": "h:1"}
    with pytest.raises(InvalidArgument, match="at most 8"):
        validate_metadata({"addr": "h:1234"}, max_bytes=8)
    with pytest.raises(InvalidArgument, match="empty key"):
        validate_metadata({"": "x"}, max_bytes=8)


@pytest.mark.parametrize(
    ("attempt", "rand", "expected"),
    [(0, 0.0, 0.05), (0, 1.0, 0.1), (1, 1.0, 0.2), (4, 1.0, 1.6), (5, 1.0, 2.0), (50, 0.0, 1.0)],
)
def test_backoff_is_exponential_capped_and_jittered(attempt: int, rand: float, expected: float) -> None:
    got = backoff_delay_s(attempt, base_s=0.1, cap_s=2.0, rand=lambda: rand)
    assert got == pytest.approx(expected)
