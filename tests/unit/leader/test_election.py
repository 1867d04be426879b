"""The election against the in-memory etcd: who wins, who waits, and every way a term ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from danube_common.errors import AlreadyExists, InvalidArgument, ResourceExhausted, ServiceShuttingDown
from danube_common.keys import Keys
from danube_common.leadership import LeaderInfo, read_leaders
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Op
from danube_leader.election import Campaign, CampaignUpdate, Elections, UpdateKind
from tests.support import wait_until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

ROLE = "load-manager"


async def next_update(updates: AsyncIterator[CampaignUpdate], *, timeout_s: float = 5.0) -> CampaignUpdate:
    """The next update that is not a heartbeat."""
    async with asyncio.timeout(timeout_s):
        async for u in updates:
            if u.kind is not UpdateKind.HEARTBEAT:
                return u
    raise AssertionError("the campaign stream ended")


@pytest.fixture
async def elections(memory_store: MemoryStore, keys: Keys) -> AsyncIterator[Elections]:
    el = Elections(memory_store, keys, min_ttl_s=1, default_ttl_s=5, heartbeat_interval_s=0.05)
    yield el
    await el.aclose(timeout_s=5)


async def fenced_write(store: MemoryStore, update: CampaignUpdate) -> bool:
    assert update.leader is not None
    res = await store.txn([update.leader.fence()], [Op.put("/fenced", update.key)])
    return res.succeeded


async def test_first_wins_second_waits_then_takes_over_with_a_larger_term(
    elections: Elections, memory_store: MemoryStore, keys: Keys
) -> None:
    a = await elections.start_campaign(ROLE, "a", metadata={"addr": "10.0.0.1:1"})
    ua = a.updates()
    elected_a = await next_update(ua)
    assert elected_a.kind is UpdateKind.ELECTED
    assert elected_a.key == keys.leader_candidate(ROLE, "a") and elected_a.term == a.term > 0
    assert elected_a.leader == LeaderInfo(ROLE, "a", a.term, a.key, {"addr": "10.0.0.1:1"})

    b = await elections.start_campaign(ROLE, "b")
    ub = b.updates()
    waiting = await next_update(ub)
    assert waiting.kind is UpdateKind.WAITING and waiting.term == 0
    assert waiting.leader is not None and waiting.leader.candidate_id == "a"
    assert await fenced_write(memory_store, elected_a)

    a.stop()  # resign: the lease is revoked, b is elected at once
    lost = await next_update(ua)
    assert lost.kind is UpdateKind.LOST and "resigned" in lost.reason and lost.term == a.term
    elected_b = await next_update(ub)
    assert elected_b.kind is UpdateKind.ELECTED and elected_b.term > elected_a.term
    assert await memory_store.get(a.key) is None
    assert not await fenced_write(memory_store, elected_a), "the old term's fence must fail"
    assert await fenced_write(memory_store, elected_b)
    assert (await read_leaders(memory_store, keys))[ROLE].candidate_id == "b"


async def test_a_waiting_candidate_hears_of_each_new_leader(elections: Elections) -> None:
    a, b, c = [await elections.start_campaign(ROLE, cid) for cid in "abc"]
    uc = c.updates()
    assert (await next_update(uc)).leader.candidate_id == "a"  # type: ignore[union-attr]
    a.stop()
    assert (await next_update(uc)).leader.candidate_id == "b"  # type: ignore[union-attr]
    b.stop()
    assert (await next_update(uc)).kind is UpdateKind.ELECTED


@pytest.mark.parametrize("how", ["expire", "revoke", "delete"])
async def test_the_lease_or_key_going_away_ends_the_term(
    elections: Elections, memory_store: MemoryStore, how: str
) -> None:
    a = await elections.start_campaign(ROLE, "a")
    ua = a.updates()
    elected_a = await next_update(ua)
    b = await elections.start_campaign(ROLE, "b")
    ub = b.updates()
    assert (await next_update(ub)).kind is UpdateKind.WAITING

    lease = a.lease.lease_id
    if how == "expire":
        memory_store.expire_lease(lease)
    elif how == "revoke":
        await memory_store.revoke_lease(lease)
    else:
        await memory_store.delete(a.key)

    lost = await next_update(ua)
    assert lost.kind is UpdateKind.LOST and lost.reason
    assert (await next_update(ub)).kind is UpdateKind.ELECTED
    assert not await fenced_write(memory_store, elected_a)
    await a.wait_closed()
    assert await memory_store.keepalive(lease) == 0, "the campaign's lease is gone"


async def test_a_duplicate_candidate_is_refused_until_the_first_one_ends(
    elections: Elections, memory_store: MemoryStore
) -> None:
    a = await elections.start_campaign(ROLE, "a")
    term = a.term
    with pytest.raises(AlreadyExists, match="candidate 'a' already campaigns for role 'load-manager'"):
        await elections.start_campaign(ROLE, "a")
    assert (await memory_store.get(a.key)).create_revision == term  # type: ignore[union-attr]
    a.stop()
    await a.wait_closed()
    again = await elections.start_campaign(ROLE, "a")
    assert again.term > term
    # The same id in another role is another candidate.
    await elections.start_campaign("spark-planner", "a")


async def test_heartbeats_flow_while_nothing_changes(elections: Elections) -> None:
    a = await elections.start_campaign(ROLE, "a")
    ua = a.updates()
    kinds = [(await anext(ua)).kind for _ in range(4)]
    assert kinds[0] is UpdateKind.ELECTED and set(kinds[1:]) == {UpdateKind.HEARTBEAT}
    heartbeat = await anext(ua)
    assert heartbeat.term == a.term, "heartbeats after election carry the term"


async def test_shutdown_ends_campaigns_revokes_and_refuses_new_ones(
    memory_store: MemoryStore, keys: Keys
) -> None:
    el = Elections(memory_store, keys, heartbeat_interval_s=10)
    a = await el.start_campaign(ROLE, "a")
    b = await el.start_campaign(ROLE, "b")
    ua, ub = a.updates(), b.updates()
    await next_update(ua)
    await next_update(ub)
    watch = el.start_watch(ROLE)
    wu = watch.updates()
    assert (await anext(wu)).candidate_id == "a"  # type: ignore[union-attr]

    await el.aclose(timeout_s=5)
    for u in (ua, ub):
        last = await next_update(u)
        assert last.kind is UpdateKind.LOST and "shutting down" in last.reason
    assert (await memory_store.get_prefix(keys.leader_candidates_prefix(ROLE)))[0] == []
    with pytest.raises(ServiceShuttingDown):
        await anext(wu)
    with pytest.raises(ServiceShuttingDown):
        await el.start_campaign(ROLE, "c")
    assert el.campaigns == []


async def test_lost_when_etcd_is_unreachable_for_a_whole_ttl(
    elections: Elections, memory_store: MemoryStore
) -> None:
    a = await elections.start_campaign(ROLE, "a", ttl_s=1)
    ua = a.updates()
    assert (await next_update(ua)).kind is UpdateKind.ELECTED
    memory_store.unavailable = True
    lost = await next_update(ua, timeout_s=10)
    assert lost.kind is UpdateKind.LOST and "lease lost" in lost.reason
    memory_store.unavailable = False


async def test_watch_leader_sees_every_change(elections: Elections) -> None:
    watch = elections.start_watch(ROLE)
    wu = watch.updates()
    assert await anext(wu) is None
    a = await elections.start_campaign(ROLE, "a")
    b = await elections.start_campaign(ROLE, "b")
    first = await anext(wu)
    assert first is not None and first.candidate_id == "a" and first.term == a.term
    a.stop()
    second = await anext(wu)
    assert second is not None and second.candidate_id == "b" and second.term == b.term > first.term
    b.stop()
    assert await anext(wu) is None
    watch.stop()
    with pytest.raises(ServiceShuttingDown):
        await anext(wu)


async def test_get_and_list_leaders(elections: Elections) -> None:
    assert await elections.get_leader(ROLE) is None
    assert await elections.list_leaders() == {}
    a = await elections.start_campaign(ROLE, "a", metadata={"addr": "x:1"})
    await elections.start_campaign(ROLE, "b")
    p = await elections.start_campaign("spark-planner", "p")
    assert await elections.get_leader(ROLE) == LeaderInfo(ROLE, "a", a.term, a.key, {"addr": "x:1"})
    leaders = await elections.list_leaders()
    assert {r: i.candidate_id for r, i in leaders.items()} == {ROLE: "a", "spark-planner": "p"}
    assert leaders["spark-planner"].term == p.term


@pytest.mark.parametrize(
    ("role", "cid", "ttl_s", "match"),
    [
        ("a/b", "x", 0, "role 'a/b' is not allowed"),
        (ROLE, "", 0, "candidate_id '' is not allowed"),
        (ROLE, "x", 100_000, "outside this replica's bounds"),
    ],
)
async def test_bad_requests_are_refused_with_what_is_allowed(
    elections: Elections, memory_store: MemoryStore, role: str, cid: str, ttl_s: int, match: str
) -> None:
    with pytest.raises(InvalidArgument, match=match):
        await elections.start_campaign(role, cid, ttl_s=ttl_s)
    assert memory_store.snapshot() == {}


async def test_the_stream_limit_holds(memory_store: MemoryStore, keys: Keys) -> None:
    el = Elections(memory_store, keys, max_streams=2)
    await el.start_campaign(ROLE, "a")
    el.start_watch(ROLE)
    with pytest.raises(ResourceExhausted, match="maximum of 2 streams"):
        await el.start_campaign(ROLE, "b")
    await el.aclose(timeout_s=5)


async def test_a_failed_start_leaves_no_lease_behind(memory_store: MemoryStore, keys: Keys) -> None:
    class FailingTxn(MemoryStore):
        async def txn(self, *args: object, **kw: object) -> object:  # type: ignore[override]
            raise ServiceShuttingDown("etcd gone")

    store = FailingTxn()
    el = Elections(store, keys)
    with pytest.raises(ServiceShuttingDown):
        await el.start_campaign(ROLE, "a")
    assert store._leases == {}  # granted, then revoked
    assert el.campaigns == []
    await el.aclose()


async def test_campaign_counts_in_campaigns_until_its_loop_ends(elections: Elections) -> None:
    a: Campaign = await elections.start_campaign(ROLE, "a")
    assert elections.campaigns == [a]
    a.stop()
    await wait_until(lambda: elections.campaigns == [], timeout_s=5, what="the campaign to be forgotten")
