"""Helpers for the control-plane tests: a full local cluster, etcd reads, and the history check."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from danube_common.keys import Keys
from danube_common.leadership import read_leaders
from danube_common.metadata.etcd import EtcdStore
from danube_common.placement import LOAD_MANAGER_ROLE
from danube_common.records import Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy, SubType
from tests.support import wait_until

#: Short timers so failures are noticed in seconds.
REGISTRATION_TTL_S = 3
LEADERSHIP_TTL_S = 3
ENV = {
    "DANUBE_BROKER_REGISTRATION_TTL_S": str(REGISTRATION_TTL_S),
    "DANUBE_BROKER_LOAD_REPORT_INTERVAL_S": "1",
    "DANUBE_BROKER_MOVE_TIMEOUT_S": "20",
    "DANUBE_LOAD_MANAGER_RECONCILE_INTERVAL_S": "0.5",
    "DANUBE_LOAD_MANAGER_MOVE_COOLDOWN_S": "1",
    "DANUBE_LOAD_MANAGER_LEADER_HEARTBEAT_DEADLINE_S": "2",
    # Placement by topics and message rates only: CPU noise on a shared test machine would make
    # the spread non-deterministic (CPU and memory weights are covered by the unit tests).
    "DANUBE_LOAD_MANAGER_WEIGHTS__CPU": "0",
    "DANUBE_LOAD_MANAGER_WEIGHTS__MEMORY": "0",
    "DANUBE_LEADER_HEARTBEAT_INTERVAL_S": "0.5",
    "DANUBE_LEADER_KEEPALIVE_TIME_S": "1",
    "DANUBE_LEADER_KEEPALIVE_TIMEOUT_S": "1",
}


@contextlib.contextmanager
def full_cluster(workdir: Path, *, brokers: int = 3) -> Iterator[LocalCluster]:
    c = LocalCluster(brokers=brokers, leaders=2, load_managers=2, workdir=workdir, extra_env=ENV)
    c.load_manager_flags = ["--leadership-ttl", str(LEADERSHIP_TTL_S)]
    c.start(timeout_s=90)
    try:
        yield c
    finally:
        c.stop()


@contextlib.asynccontextmanager
async def etcd(cluster: LocalCluster) -> AsyncIterator[Resources]:
    store = EtcdStore([cluster.etcd_endpoint], request_timeout_s=5.0)
    await store.wait_ready(10)
    try:
        yield Resources(store, Keys(cluster.cluster))
    finally:
        await store.aclose()


async def owners(res: Resources) -> dict[str, Ownership]:
    return (await res.list_owners())[0]


async def lm_leader(res: Resources) -> tuple[str, int] | None:
    """(candidate_id, term) of the load-manager leader, from etcd."""
    leader = (await read_leaders(res.store, res.keys)).get(LOAD_MANAGER_ROLE)
    return (leader.candidate_id, leader.term) if leader is not None else None


async def history_check(res: Resources) -> int:
    """Replay every etcd event of the cluster and check that each owner write made by a load
    manager carries the term of the load-manager leader at that revision. Returns the number
    of such writes checked (the caller asserts it is not zero)."""
    keys = res.keys
    _, now = await res.store.get_prefix(keys.leaders_prefix())
    candidates: dict[str, int] = {}  # live election key -> create_revision
    prefix = keys.leader_candidates_prefix(LOAD_MANAGER_ROLE)
    checked = 0
    async for ev in res.store.watch_prefix(keys.root, start_revision=1):
        if ev.key.startswith(prefix):
            if ev.kind == "put":
                candidates.setdefault(ev.key, ev.create_revision or ev.revision)
            else:
                candidates.pop(ev.key, None)
        elif ev.kind == "put" and keys.parse_owner(ev.key) is not None:
            by = (ev.json() or {}).get("by")
            if by is not None:
                leader_term = min(candidates.values()) if candidates else None
                assert by["term"] == leader_term, (
                    f"owner write at revision {ev.revision} by {by} while the leading term was {leader_term}"
                )
                checked += 1
        if ev.revision >= now:
            break
    return checked


@dataclass
class Flow:
    """A producer publishing continuously and a consumer receiving (and acking) on one topic."""

    topic: str
    reliable: bool = True
    acked: dict[int, int] = field(default_factory=dict)  # message index -> offset
    failed: list[int] = field(default_factory=list)
    received: set[int] = field(default_factory=set)
    ack_times: list[float] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def longest_ack_gap_s(self, since: float = 0.0) -> float:
        times = sorted(t for t in self.ack_times if t >= since)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


async def start_flow(client: DanubeClient, topic: str, *, reliable: bool, rate_per_s: float = 500.0) -> Flow:
    flow = Flow(topic, reliable)
    producer = await client.create_producer(
        topic,
        producer_name="flow-producer",
        dispatch_strategy=DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE,
        send_timeout_s=60,
    )
    consumer = await client.subscribe(
        topic, subscription="flow", consumer_name="flow-c", sub_type=SubType.EXCLUSIVE
    )

    def on_done(i: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            flow.failed.append(i)
        else:
            flow.acked[i] = fut.result().offset
            flow.ack_times.append(time.monotonic())

    async def produce() -> None:
        i = 0
        pending: list[asyncio.Future[Any]] = []
        interval = 1.0 / rate_per_s
        while not flow.stop.is_set():
            fut = await producer.send_async(f"m-{i}".encode())
            fut.add_done_callback(lambda f, i=i: on_done(i, f))
            pending.append(fut)
            i += 1
            await asyncio.sleep(interval)
        await asyncio.gather(*pending, return_exceptions=True)
        await producer.close()

    async def consume() -> None:
        while True:
            try:
                msgs = await consumer.receive_many(500, timeout_s=0.5)
            except TimeoutError:
                continue
            for msg in msgs:
                flow.received.add(int(msg.payload.decode().split("-")[1]))
                if reliable:
                    await consumer.ack(msg)

    flow.tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
    return flow


async def stop_flow(flow: Flow, *, drain_s: float = 30.0) -> None:
    """Stop producing, wait (bounded) for every acked message to arrive (non-reliable: the last
    acked one; at most once, earlier ones may be lost in a failover), stop consuming."""
    flow.stop.set()
    await flow.tasks[0]

    def delivered() -> bool:
        if flow.reliable:
            return set(flow.acked) <= flow.received
        return not flow.acked or max(flow.acked) in flow.received

    with contextlib.suppress(AssertionError):  # the test then reports what is missing
        await wait_until(delivered, timeout_s=drain_s, what="delivery")
    flow.tasks[1].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flow.tasks[1]


def topic_name(topic: str) -> TopicName:
    return TopicName.parse(topic)
