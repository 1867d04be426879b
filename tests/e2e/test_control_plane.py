"""The control plane on a full local cluster: 3 brokers, 2 load managers, 2 leader replicas.

Placement spreads topics; a topic moved under steady load, or drained off its broker, keeps
every acknowledged reliable message; the unmodified danube-client follows a move; and every
assignment in etcd's history was written under the term of the load manager leading then.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient
from tests.e2e.conftest import cli, interop_python, subprocess_env
from tests.e2e.control_plane import (
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

DRIVER = str(__import__("pathlib").Path(__file__).parent / "interop" / "danube_client_driver.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with full_cluster(tmp_path_factory.mktemp("control-plane")) as c:
        yield c


def admin(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, *args],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip


async def lookup(cluster: LocalCluster, topic: str) -> str:
    import grpc.aio

    async with grpc.aio.insecure_channel(cluster.lookup.addr) as ch:
        resp = await pb_grpc.DiscoveryStub(ch).TopicLookup(pb.TopicLookupRequest(topic=topic), timeout=30)
    return str(resp.broker_url)


async def test_topics_spread_over_brokers_and_admin_shows_owners(cluster: LocalCluster) -> None:
    prefix = unique("spread")
    topics = [f"/default/{prefix}-{i}" for i in range(30)]
    urls = await asyncio.gather(*(lookup(cluster, t) for t in topics))
    assert len(set(urls)) == 3, "every broker got topics"
    async with etcd(cluster) as res:
        own = await owners(res)
        leader = await lm_leader(res)
        assert leader is not None
        counts: dict[str, int] = {}
        for t in topics:
            o = own[t]
            counts[o.broker_id] = counts.get(o.broker_id, 0) + 1
        # Idle brokers: the placement rule evens out the topic counts (idle CPU noise aside).
        assert len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 1, counts
        by = (await res.store.get_json(res.keys.owner(topic_name(topics[0]))))["by"]
        assert by["lm"] == leader[0] and by["term"] == leader[1]

    r = admin(cluster, "-o", "json", "brokers", "list")
    assert r.returncode == 0, r.stderr
    brokers = json.loads(r.stdout)
    assert sorted(b["state"] for b in brokers) == ["active"] * 3
    assert all(b["load"] is not None and b["load"]["cpu_cores"] >= 1 for b in brokers)
    r = admin(cluster, "-o", "json", "leaders", "list")
    assert [x["role"] for x in json.loads(r.stdout)] == ["load-manager"]

    # A partitioned topic created by the admin API is placed by the load manager too (one
    # placement path), before the create returns; admin shows where.
    r = admin(cluster, "-o", "json", "topics", "create", f"/default/{prefix}-parted", "--partitions", "6")
    assert r.returncode == 0, r.stderr
    parts = json.loads(r.stdout)["partition_topics"]
    assert len({p["broker_id"] for p in parts}) == 3 and all(p["broker_id"] for p in parts)
    async with etcd(cluster) as res:
        leader = await lm_leader(res)
        assert leader is not None
        for i in range(6):
            value = await res.store.get_json(res.keys.owner(topic_name(f"/default/{prefix}-parted-part-{i}")))
            assert value["by"] == {"lm": leader[0], "term": leader[1]}, value


async def test_reliable_topic_moved_under_load_keeps_every_acked_message(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('move')}"
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        flow = await start_flow(client, topic, reliable=True)
        await wait_until(lambda: len(flow.received) >= 300, timeout_s=30, what="flow started")
        before = (await owners(res))[topic].broker_id
        r = admin(cluster, "topics", "move", topic)
        assert r.returncode == 0, r.stderr
        moved_at = time.monotonic()

        async def moved() -> bool:
            o = (await owners(res)).get(topic)
            return o is not None and o.broker_id != before and not o.moving_to

        await wait_until(moved, timeout_s=40, what="the topic moved")
        acked_at_move = len(flow.acked)
        await wait_until(lambda: len(flow.acked) >= acked_at_move + 300, timeout_s=30, what="acks resumed")
        await stop_flow(flow)
    pause = flow.longest_ack_gap_s(since=moved_at - 1)
    missing = set(flow.acked) - flow.received
    print(
        f"\nmoved {topic} off broker {before}: {len(flow.acked)} acked, {len(flow.received)} received, "
        f"{len(flow.failed)} failed sends, longest pause in acks {pause * 1000:.0f} ms"
    )
    assert not missing, f"{len(missing)} acknowledged messages never delivered, e.g. {sorted(missing)[:5]}"
    assert not flow.failed


async def test_drain_empties_a_broker_without_losing_a_reliable_message(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('drain')}"
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        flow = await start_flow(client, topic, reliable=True)
        await wait_until(lambda: len(flow.received) >= 200, timeout_s=30, what="flow started")
        victim = (await owners(res))[topic].broker_id
        r = admin(cluster, "brokers", "drain", victim)
        assert r.returncode == 0 and "draining" in r.stdout, r.stderr

        async def drained() -> bool:
            state = await res.store.get_json(res.keys.broker_state(victim))
            still = [t for t, o in (await owners(res)).items() if o.broker_id == victim]
            return state["state"] == "drained" and not still

        await wait_until(drained, timeout_s=90, interval_s=0.2, what=f"broker {victim} drained")
        acked_then = len(flow.acked)
        await wait_until(lambda: len(flow.acked) >= acked_then + 200, timeout_s=30, what="acks resumed")
        await stop_flow(flow)
        r = admin(cluster, "-o", "json", "brokers", "list")
        states = {b["broker_id"]: (b["state"], b["topic_count"]) for b in json.loads(r.stdout)}
        assert states[victim] == ("drained", 0)
        # A drained broker gets no new topics until it is activated again.
        urls = await asyncio.gather(*(lookup(cluster, f"/default/{unique('after-drain')}") for _ in range(6)))
        victim_url = next(b.url for b in cluster.brokers if b.broker_id == victim)
        assert victim_url not in urls
        assert admin(cluster, "brokers", "activate", victim).returncode == 0
    missing = set(flow.acked) - flow.received
    assert not missing, f"{len(missing)} acknowledged messages lost in the drain"
    assert not flow.failed


async def test_danube_client_keeps_producing_across_a_move(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('interop-move')}"
    count = 4000
    proc = await asyncio.create_subprocess_exec(
        interop_python(), DRIVER, "produce", "--service-url", cluster.service_url, "--topic", topic,
        "--count", str(count), "--timeout-s", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=subprocess_env(),
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None and proc.stderr is not None
        while len(lines) < 200:  # wait until it is producing, then move the topic under it
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line, "the danube-client driver exited early"
            lines.append(line)
        async with etcd(cluster) as res:
            before = (await owners(res))[topic].broker_id
            assert admin(cluster, "topics", "move", topic).returncode == 0

            async def moved() -> bool:
                o = (await owners(res)).get(topic)
                return o is not None and o.broker_id != before and not o.moving_to

            await wait_until(moved, timeout_s=40, what="the topic moved")
        out, err_b = await asyncio.wait_for(proc.communicate(), 120)
        lines += out.decode().splitlines()
        err = err_b.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    events = [json.loads(line) for line in lines if line.strip()]
    assert proc.returncode == 0, f"danube-client failed across the move: {events[-1:]} {err[-2000:]}"
    assert events[-1] == {"event": "done", "sent": count}


async def test_every_assignment_was_made_under_the_leading_term(cluster: LocalCluster) -> None:
    async with etcd(cluster) as res:
        checked = await history_check(res)
    assert checked >= 30, "the placements of this module's tests were checked"


async def test_load_manager_executes_a_rebalancing_plan(cluster: LocalCluster) -> None:
    """A plan as the Spark planner writes it: the valid move is made (clients keep flowing), the
    stale one is skipped with its reason, and the outcome of each is recorded in the plan."""
    topic, idle = f"/default/{unique('planned')}", f"/default/{unique('planned-idle')}"
    async with DanubeClient(cluster.service_url) as client, etcd(cluster) as res:
        flow = await start_flow(client, topic, reliable=True)
        await wait_until(lambda: len(flow.received) >= 200, timeout_s=30, what="flow started")
        await lookup(cluster, idle)
        own = await owners(res)
        src = own[topic].broker_id
        dst = next(b.broker_id for b in cluster.brokers if b.broker_id != src)
        stale_from = next(
            b.broker_id for b in cluster.brokers if b.broker_id not in (own[idle].broker_id, dst)
        )
        plan_id = f"{int(time.time() * 1000):013d}-{unique('plan')}"
        doc = {
            "plan_id": plan_id,
            "status": "pending",
            "created_at_ms": int(time.time() * 1000),
            "expires_at_ms": int(time.time() * 1000) + 120_000,
            "moves": [
                {"topic": topic, "from": src, "to": dst, "load": 1.0, "status": "pending", "reason": ""},
                {
                    "topic": idle,
                    "from": stale_from,
                    "to": dst,
                    "load": 0.1,
                    "status": "pending",
                    "reason": "",
                },
            ],
        }
        await res.store.put(res.keys.rebalance_plan(plan_id), doc)

        async def finished() -> dict[str, object] | None:
            d = await res.store.get_json(res.keys.rebalance_plan(plan_id))
            return d if d and d["status"] == "done" else None

        done = await wait_until(finished, timeout_s=60, interval_s=0.1, what="plan executed")
        acked_then = len(flow.acked)
        await wait_until(lambda: len(flow.acked) >= acked_then + 200, timeout_s=30, what="acks resumed")
        await stop_flow(flow)
        assert (await owners(res))[topic].broker_id == dst
    moved, stale = done["moves"]  # type: ignore[index]
    assert moved["status"] == "done" and moved["started_at_ms"] <= moved["finished_at_ms"]
    assert stale["status"] == "skipped" and "now, not" in stale["reason"]
    assert not set(flow.acked) - flow.received and not flow.failed
