"""The client library (danube_common.leadership.Elector) against in-process replicas.

Replicas are the real servicer and election over one in-memory etcd, on loopback ports;
a fake replica that goes silent after electing stands in for a hung or partitioned one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc.aio
import pytest

from danube_common.errors import InvalidArgument, Unavailable
from danube_common.etcd_server import free_port
from danube_common.grpc_util import bind, new_server
from danube_common.keys import Keys
from danube_common.leadership import Candidacy, Elector, Leadership
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Op
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeLeader_pb2_grpc as lpb_grpc
from danube_leader.election import Elections
from danube_leader.grpc_api import LeaderElectionApi
from tests.support import wait_until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

ROLE = "load-manager"


@dataclass
class Replica:
    addr: str
    elections: Elections
    server: grpc.aio.Server
    stopped: bool = False

    async def stop(self) -> None:
        """Graceful stop: campaigns end with LOST and revoke, then the server stops."""
        if not self.stopped:
            self.stopped = True
            await self.elections.aclose(timeout_s=5)
            await self.server.stop(0)


@contextlib.asynccontextmanager
async def replica(
    store: MemoryStore, keys: Keys, servicer: lpb_grpc.LeaderElectionServicer | None = None
) -> AsyncIterator[Replica]:
    elections = Elections(store, keys, min_ttl_s=1, heartbeat_interval_s=0.1)
    server = new_server()
    lpb_grpc.add_LeaderElectionServicer_to_server(servicer or LeaderElectionApi(elections), server)
    port = bind(server, "127.0.0.1:0")
    await server.start()
    r = Replica(f"127.0.0.1:{port}", elections, server)
    try:
        yield r
    finally:
        await r.stop()


@pytest.fixture
async def elector_factory() -> AsyncIterator[list[Elector]]:
    made: list[Elector] = []
    yield made
    for e in made:
        await e.aclose()


def new_elector(made: list[Elector], *addrs: str, **kw: float) -> Elector:
    e = Elector(list(addrs), rpc_timeout_s=2.0, backoff_base_s=0.02, backoff_cap_s=0.2, **kw)
    made.append(e)
    return e


async def next_lead(c: Candidacy, timeout_s: float = 5.0) -> Leadership:
    async with asyncio.timeout(timeout_s):
        return await anext(c)


async def test_resigning_hands_over_at_once_with_lost_set_first(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    async with replica(memory_store, keys) as r1, replica(memory_store, keys) as r2:
        ca = new_elector(elector_factory, r1.addr).campaign(ROLE, candidate_id="a", ttl_s=30)
        lead_a = await next_lead(ca)
        cb = new_elector(elector_factory, r2.addr).campaign(ROLE, candidate_id="b", ttl_s=30)
        assert (lead_a.role, lead_a.candidate_id, lead_a.replica) == (ROLE, "a", r1.addr)
        await wait_until(lambda: cb.state == "waiting", what="b to wait")
        assert cb.leader is not None and cb.leader.candidate_id == "a" and cb.leader.term == lead_a.term

        fenced = await memory_store.txn([lead_a.fence()], [Op.put("/x", b"a")])
        assert fenced.succeeded
        await ca.aclose()
        assert lead_a.is_lost, "closing sets lost before anything else"
        lead_b = await next_lead(cb)  # well before the 30 s TTL: the lease was revoked
        assert lead_b.term > lead_a.term
        assert not (await memory_store.txn([lead_a.fence()], [Op.put("/x", b"a")])).succeeded


class SilentReplica(lpb_grpc.LeaderElectionServicer):
    """Elects the first candidate with term 1, then never says anything again; refuses any
    later campaign (so only the client itself can end that term)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.calls = 0

    async def Campaign(
        self, request: lpb.CampaignRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[lpb.CampaignEvent]:
        self.calls += 1
        if self.calls > 1:
            raise Unavailable("this fake replica is down")
        yield lpb.CampaignEvent(kind=lpb.CampaignEvent.ELECTED, key="/fake/key", term=1, ttl_s=request.ttl_s)
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.set()


async def test_a_missed_heartbeat_loses_the_term_then_the_next_replica_elects(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    silent = SilentReplica()
    async with replica(memory_store, keys, silent) as fake, replica(memory_store, keys) as real:
        elector = new_elector(elector_factory, fake.addr, real.addr, heartbeat_deadline_s=0.5)
        c = elector.campaign(ROLE, candidate_id="a", ttl_s=5)
        first = await next_lead(c)
        assert first.term == 1 and first.replica == fake.addr
        second = await next_lead(c, timeout_s=10)
        assert first.is_lost, "the old term is lost before the new one is handed out"
        assert silent.cancelled.is_set(), "the client cancelled the silent stream"
        assert second.replica == real.addr and second.term > 1 and not second.is_lost


async def test_a_silent_replica_loses_the_term_after_the_heartbeat_deadline(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    silent = SilentReplica()
    async with replica(memory_store, keys, silent) as fake:
        c = new_elector(elector_factory, fake.addr, heartbeat_deadline_s=0.3).campaign(ROLE, candidate_id="a")
        first = await next_lead(c)
        await wait_until(first.lost.is_set, timeout_s=5, what="the silent term to be lost")
        assert c.current is None
        await wait_until(lambda: silent.calls >= 3, what="campaigning again (refused, with backoff)")
        assert silent.cancelled.is_set()


async def test_a_replica_shutting_down_sends_the_candidate_elsewhere(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    async with replica(memory_store, keys) as r1, replica(memory_store, keys) as r2:
        c = new_elector(elector_factory, r1.addr, r2.addr).campaign(ROLE, candidate_id="a", ttl_s=30)
        first = await next_lead(c)
        assert first.replica == r1.addr
        await r1.stop()  # LOST, lease revoked: the same candidate id is free again at once
        assert first.lost.is_set() or await wait_until(first.lost.is_set, what="lost")
        second = await next_lead(c)
        assert second.replica == r2.addr and second.term > first.term


async def test_unary_calls_fail_over_and_watch_follows_replicas(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with replica(memory_store, keys) as r1, replica(memory_store, keys) as r2:
        observer = new_elector(elector_factory, dead, r1.addr, r2.addr)
        assert await observer.get_leader(ROLE) is None
        assert await observer.list_leaders() == {}

        seen: list[tuple[str, int] | None] = []

        async def watch() -> None:
            async for info in observer.watch_leader(ROLE):
                seen.append((info.candidate_id, info.term) if info else None)

        watcher = asyncio.create_task(watch())
        try:
            await wait_until(lambda: seen == [None], what="the first watch answer")
            ca = new_elector(elector_factory, r2.addr).campaign(ROLE, candidate_id="a", metadata={"k": "v"})
            lead_a = await next_lead(ca)
            await wait_until(lambda: seen[-1] == ("a", lead_a.term), what="a in the watch")
            info = await observer.get_leader(ROLE)
            assert info is not None and info.metadata == {"k": "v"} and info.key == lead_a.key
            assert set(await observer.list_leaders()) == {ROLE}

            await r1.stop()  # the watch was on r1 (the dead address was skipped)
            cb = new_elector(elector_factory, r2.addr).campaign(ROLE, candidate_id="b")
            await wait_until(lambda: cb.state == "waiting", what="b waiting")
            await ca.aclose()
            lead_b = await next_lead(cb)
            await wait_until(lambda: seen[-1] == ("b", lead_b.term), what="b in the watch", timeout_s=10)
            assert seen == [None, ("a", lead_a.term), ("b", lead_b.term)], "no repeats after re-watching"
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def test_a_bad_request_is_raised_not_retried(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    async with replica(memory_store, keys) as r:
        c = new_elector(elector_factory, r.addr).campaign("no/slashes", candidate_id="a")
        with pytest.raises(InvalidArgument, match="role 'no/slashes' is not allowed"):
            await next_lead(c)
        with pytest.raises(InvalidArgument):
            await new_elector(elector_factory, r.addr).get_leader("bad role")


async def test_lead_generator_resigns_when_left(
    memory_store: MemoryStore, keys: Keys, elector_factory: list[Elector]
) -> None:
    async with replica(memory_store, keys) as r:
        elector = new_elector(elector_factory, r.addr)
        async with contextlib.aclosing(elector.lead(ROLE, candidate_id="a", ttl_s=30)) as leads:
            async for lead in leads:
                held = lead
                break
        assert held.is_lost
        await wait_until(
            lambda: memory_store.snapshot() == {}, what="the key to be revoked when the loop was left"
        )
