"""Routing per subscription type, on stub consumers (no queues, no streams, no gRPC)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from danube_broker.dispatch.exclusive import ExclusiveRouter
from danube_broker.dispatch.failover import FailoverRouter
from danube_broker.dispatch.key_shared import KeySharedRouter, compile_key_filters
from danube_broker.dispatch.shared import SharedRouter
from tests.unit.broker.helpers import StubConsumer, index, msgs

pytestmark = pytest.mark.unit


def spread(routing) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    return {c.name: [index(m) for m in ms] for c, ms in routing.assignments}


# ---------------------------------------------------------------- shared
def test_shared_round_robin_is_exact_per_message() -> None:
    r = SharedRouter()
    r.set_consumers([StubConsumer("a"), StubConsumer("b"), StubConsumer("c")])
    assert spread(r.route(msgs(7))) == {"a": [0, 3, 6], "b": [1, 4], "c": [2, 5]}
    # The turn carries over to the next batch: 7 messages later it is b's turn.
    assert spread(r.route(msgs(4, start=7))) == {"b": [7, 10], "c": [8], "a": [9]}


def test_shared_skips_full_consumers_and_overflows_only_when_all_are_full() -> None:
    a, b, c = StubConsumer("a", free=1), StubConsumer("b", free=0), StubConsumer("c", free=2)
    r = SharedRouter()
    r.set_consumers([a, b, c])
    routing = r.route(msgs(5))
    assert spread(routing) == {"a": [0], "c": [1, 2]}
    assert [index(m) for m in routing.overflow] == [3, 4]
    assert routing.unroutable == 0


def test_shared_without_consumers_is_unroutable() -> None:
    r = SharedRouter()
    r.set_consumers([])
    routing = r.route(msgs(3))
    assert routing.unroutable == 3 and not routing.assignments


def test_shared_keeps_turn_valid_when_consumers_leave() -> None:
    r = SharedRouter()
    a, b, c = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    r.set_consumers([a, b, c])
    r.route(msgs(2))  # next turn: c (index 2)
    r.set_consumers([a, b])
    assert spread(r.route(msgs(2))) == {"a": [0], "b": [1]}


# ---------------------------------------------------------------- exclusive / failover
def test_exclusive_routes_all_to_its_consumer() -> None:
    r = ExclusiveRouter()
    r.set_consumers([StubConsumer("only")])
    assert spread(r.route(msgs(3))) == {"only": [0, 1, 2]}
    r.set_consumers([])
    assert r.route(msgs(3)).unroutable == 3


def test_failover_sends_to_the_first_connected_and_promotes_the_next() -> None:
    a, b, c = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    r = FailoverRouter()
    r.set_consumers([a, b, c])
    assert spread(r.route(msgs(3))) == {"a": [0, 1, 2]}
    r.set_consumers([b, c])  # a disconnected
    assert r.active is b
    assert spread(r.route(msgs(2, start=3))) == {"b": [3, 4]}
    r.set_consumers([])
    assert r.route(msgs(1)).unroutable == 1


# ---------------------------------------------------------------- key shared
def key_msgs(keys: list[str], rounds: int = 3) -> list:  # type: ignore[type-arg]
    out = []
    i = 0
    for _ in range(rounds):
        for k in keys:
            out.extend(msgs(1, start=i, key=k))
            i += 1
    return out


def test_key_shared_keeps_each_key_on_one_consumer_and_spreads_keys() -> None:
    r = KeySharedRouter()
    cs = [StubConsumer(f"c{i}") for i in range(3)]
    r.set_consumers(cs)
    keys = [f"key-{k}" for k in range(60)]
    owner: dict[str, set[str]] = defaultdict(set)
    for batch in (key_msgs(keys), key_msgs(list(reversed(keys)))):
        for c, ms in r.route(batch).assignments:
            for m in ms:
                owner[m.routing_key].add(c.name)
    assert set(owner) == set(keys)
    assert all(len(v) == 1 for v in owner.values())
    per_consumer = Counter(next(iter(v)) for v in owner.values())
    assert set(per_consumer) == {"c0", "c1", "c2"}
    assert min(per_consumer.values()) >= 8, per_consumer  # 60 keys: no consumer starved


def test_key_shared_keeps_per_key_order() -> None:
    r = KeySharedRouter()
    r.set_consumers([StubConsumer("a"), StubConsumer("b")])
    routing = r.route(key_msgs(["x", "y", "z"], rounds=4))
    for _, ms in routing.assignments:
        for key in {m.routing_key for m in ms}:
            idx = [index(m) for m in ms if m.routing_key == key]
            assert idx == sorted(idx)


def test_key_shared_falls_back_to_producer_name() -> None:
    r = KeySharedRouter()
    r.set_consumers([StubConsumer(f"c{i}") for i in range(4)])
    batch = msgs(5, producer="p1") + msgs(5, start=5, producer="p2")
    owners = {m.producer_name: c.name for c, ms in r.route(batch).assignments for m in ms}
    assert owners["p1"] == r.owner_of("p1").name and owners["p2"] == r.owner_of("p2").name  # type: ignore[union-attr]


def test_key_shared_filters_are_respected_and_unmatched_keys_dropped() -> None:
    orders = StubConsumer("orders", filters=("order-*",))
    users = StubConsumer("users", filters=("user-?", "admin"))
    r = KeySharedRouter()
    r.set_consumers([orders, users])
    batch = key_msgs(["order-1", "order-22", "user-7", "admin", "user-77", "other"], rounds=1)
    routing = r.route(batch)
    got = {c.name: sorted(m.routing_key for m in ms) for c, ms in routing.assignments}
    assert got == {"orders": ["order-1", "order-22"], "users": ["admin", "user-7"]}
    assert routing.unroutable == 2  # "user-77" and "other" match no filter


def test_key_shared_unfiltered_consumer_takes_keys_filtered_ones_refuse() -> None:
    r = KeySharedRouter()
    r.set_consumers([StubConsumer("picky", filters=("a*",)), StubConsumer("any")])
    routing = r.route(key_msgs([f"b{i}" for i in range(20)], rounds=1))
    assert {c.name for c, _ in routing.assignments} == {"any"}
    assert routing.unroutable == 0


def test_key_shared_ring_is_stable_when_a_consumer_leaves() -> None:
    a, b, c = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    r = KeySharedRouter()
    r.set_consumers([a, b, c])
    keys = [f"k{i}" for i in range(200)]
    before = {k: r.owner_of(k).name for k in keys}  # type: ignore[union-attr]
    r.set_consumers([a, b])
    after = {k: r.owner_of(k).name for k in keys}  # type: ignore[union-attr]
    # Only c's keys move (consistent hashing).
    assert all(after[k] == before[k] for k in keys if before[k] != "c")
    assert all(after[k] in ("a", "b") for k in keys)


def test_key_filter_compilation() -> None:
    assert compile_key_filters([]) is None
    rx = compile_key_filters(["a*", "b?c", "[xy]z"])
    assert rx is not None
    assert [bool(rx.match(k)) for k in ("abc", "bxc", "yz", "bxxc", "za")] == [True, True, True, False, False]


def chunked(n: int, *, uuid: str, start: int = 0) -> list[Any]:
    """``n`` chunks of one large message (indexes 0 .. n-1), numbered from ``start``."""
    out = msgs(n, start=start)
    for i, m in enumerate(out):
        c = m.chunk
        c.message_uuid, c.index, c.count, c.total_size = uuid, i, n, n
    return out


def test_shared_keeps_the_chunks_of_a_message_on_one_consumer_across_batches() -> None:
    r = SharedRouter()
    r.set_consumers([StubConsumer("a"), StubConsumer("b"), StubConsumer("c")])
    big = chunked(5, uuid="m1", start=1)
    # small 0, chunks 1-2 of m1, small 3: m1 goes to whoever takes its first chunk (b).
    first = msgs(1) + big[:2] + msgs(1, start=3)
    assert spread(r.route(first)) == {"a": [0], "b": [1, 2], "c": [3]}
    # The rest of m1 follows to b in a later batch; plain messages go on round robin.
    second = msgs(1, start=10) + big[2:] + msgs(2, start=11)
    assert spread(r.route(second)) == {"a": [10], "b": [3, 4, 5, 11], "c": [12]}  # chunks take no turn
    assert not r._chunk_owners  # the last chunk forgets the owner


def test_shared_holds_a_chunk_back_while_its_consumer_is_full() -> None:
    a, b = StubConsumer("a"), StubConsumer("b")
    r = SharedRouter()
    r.set_consumers([a, b])
    big = chunked(3, uuid="m2")
    assert spread(r.route(big[:1])) == {"a": [0]}
    a.free = 0
    routing = r.route(big[1:] + msgs(1, start=7))
    assert routing.assignments == [] and [index(m) for m in routing.overflow] == [1, 2, 7]
    a.free = 10
    assert spread(r.route(routing.overflow)) == {"a": [1, 2], "b": [7]}


def test_shared_gives_orphan_chunks_a_new_owner_when_theirs_left() -> None:
    a, b, c = StubConsumer("a"), StubConsumer("b"), StubConsumer("c")
    r = SharedRouter()
    r.set_consumers([a, b, c])
    big = chunked(4, uuid="m3")
    assert spread(r.route(big[:2])) == {"a": [0, 1]}  # one message's first chunk: a owns it
    r.set_consumers([b, c])  # a left (its chunks are redelivered by the subscription)
    assert spread(r.route(big[2:])) == {"c": [2, 3]}  # the turn was c's; both stay together
