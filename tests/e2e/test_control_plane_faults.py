"""Control-plane faults on a full local cluster (3 brokers, 2 load managers, 2 leader replicas):
``kill -9`` of the active load manager and of a broker, and a SIGSTOPped former leader that wakes
up after its term ended. Every assignment in etcd's history carries the term leading then."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator

import grpc.aio
import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient
from tests.e2e.control_plane import (
    LEADERSHIP_TTL_S,
    REGISTRATION_TTL_S,
    etcd,
    full_cluster,
    history_check,
    lm_leader,
    owners,
    start_flow,
    stop_flow,
    topic_name,
)
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

#: Failover may take the lease TTL plus this.
SLACK_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with full_cluster(tmp_path_factory.mktemp("control-plane-faults")) as c:
        yield c


async def lookup(cluster: LocalCluster, topic: str) -> str:
    async with grpc.aio.insecure_channel(cluster.lookup.addr) as ch:
        resp = await pb_grpc.DiscoveryStub(ch).TopicLookup(pb.TopicLookupRequest(topic=topic), timeout=30)
    return str(resp.broker_url)


def lm_service(cluster: LocalCluster, candidate_id: str) -> str:
    return f"load-manager-{candidate_id.removeprefix('lm-')}"


async def test_kill9_active_load_manager_standby_takes_over(cluster: LocalCluster) -> None:
    async with etcd(cluster) as res:
        leader = await wait_until(lambda: lm_leader(res), timeout_s=20, what="a load-manager leader")
        cluster.signal(lm_service(cluster, leader[0]), signal.SIGKILL)
        killed_at = time.monotonic()

        async def standby_leads() -> tuple[str, int] | None:
            now = await lm_leader(res)
            return now if now is not None and now[0] != leader[0] else None

        standby = await wait_until(
            standby_leads, timeout_s=LEADERSHIP_TTL_S + SLACK_S, what="standby elected"
        )
        elected_after = time.monotonic() - killed_at
        assert standby[1] > leader[1], "the new term is larger"
        # ... and it acts: a new topic is placed, written under the standby's term.
        topic = f"/default/{unique('after-lm-kill')}"
        await lookup(cluster, topic)
        by = (await res.store.get_json(res.keys.owner(topic_name(topic))))["by"]
        assert by == {"lm": standby[0], "term": standby[1]}
        acted_after = time.monotonic() - killed_at
    print(
        f"\nstandby {standby[0]} elected {elected_after:.1f}s after kill -9, placed a topic at {acted_after:.1f}s"
    )
    cluster.restart(lm_service(cluster, leader[0]))


async def test_sigstopped_former_leader_is_fenced_when_it_wakes(cluster: LocalCluster) -> None:
    async with etcd(cluster) as res:
        old = await wait_until(lambda: lm_leader(res), timeout_s=20, what="a load-manager leader")
        old_svc = lm_service(cluster, old[0])
        cluster.signal(old_svc, signal.SIGSTOP)
        try:

            async def new_leader() -> tuple[str, int] | None:
                now = await lm_leader(res)
                return now if now is not None and now[0] != old[0] else None

            new = await wait_until(new_leader, timeout_s=LEADERSHIP_TTL_S + 10, what="a new leader")
            # Freeze the new leader too, then leave work that only a leader would do: a placement
            # request. The old leader wakes first, still believing it leads (its view is stale).
            new_svc = lm_service(cluster, new[0])
            cluster.signal(new_svc, signal.SIGSTOP)
            topic = topic_name(f"/default/{unique('fenced')}")
            await res.store.put(res.keys.unassigned(topic), {"requested_at_ms": 1})
            woke_at_rev = (await res.store.get_prefix(res.keys.unassigned_prefix()))[1]
        finally:
            cluster.signal(old_svc, signal.SIGCONT)
        try:
            # Whatever it does now, nothing may land under the old term; once the frozen leader's
            # lease expires the old replica may win a NEW term and place the topic legitimately.
            placed = await wait_until(
                lambda: res.store.get(res.keys.owner(topic)),
                timeout_s=LEADERSHIP_TTL_S + 20,
                what="placement",
            )
            by = placed.json()["by"]
            assert by["term"] not in (old[1],), "a write under the old term landed"
            assert placed.mod_revision > woke_at_rev
        finally:
            cluster.signal(new_svc, signal.SIGCONT)
        stale = [
            kv
            for kv in (await res.store.get_prefix(res.keys.owners_prefix()))[0]
            if (kv.json().get("by") or {}).get("term") == old[1] and kv.mod_revision > woke_at_rev
        ]
        assert not stale, f"owner writes under the old term after it ended: {[kv.key for kv in stale]}"


async def test_kill9_broker_topics_replaced_and_flow_continues(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('broker-kill')}"
    others = [f"/default/{unique('bystander')}" for _ in range(6)]
    await asyncio.gather(*(lookup(cluster, t) for t in others))
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        flow = await start_flow(client, topic, reliable=False)
        await wait_until(lambda: len(flow.received) >= 100, timeout_s=30, what="flow started")
        victim = (await owners(res))[topic].broker_id
        victim_topics = [t for t, o in (await owners(res)).items() if o.broker_id == victim]
        cluster.stop_broker(victim, kill=True)
        killed_at = time.monotonic()

        async def replaced() -> bool:
            own = await owners(res)
            return all(t in own and own[t].broker_id != victim for t in victim_topics)

        await wait_until(
            replaced, timeout_s=REGISTRATION_TTL_S + SLACK_S, interval_s=0.1, what="topics re-placed"
        )
        replaced_after = time.monotonic() - killed_at
        received_then = len(flow.received)
        await wait_until(
            lambda: len(flow.received) >= received_then + 200, timeout_s=30, what="messages flow again"
        )
        resumed_after = time.monotonic() - killed_at
        await stop_flow(flow, drain_s=5)
    print(
        f"\nbroker {victim} killed: its {len(victim_topics)} topic(s) re-placed after {replaced_after:.1f}s, "
        f"messages flowing again after {resumed_after:.1f}s (TTL {REGISTRATION_TTL_S}s)"
    )
    cluster.restart_broker(victim)


async def test_every_assignment_was_made_under_the_leading_term(cluster: LocalCluster) -> None:
    async with etcd(cluster) as res:
        checked = await history_check(res)
    assert checked >= 8
