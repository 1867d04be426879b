"""The fault-test workload and history checker against a real local cluster, without faults.

Four producers and four consumers (one on an exclusive subscription, three sharing another)
run over two reliable topics on a two-broker cluster until thousands of sends are acked; a
fresh reader then reads each topic from the earliest offset, and the checker must find nothing
wrong. This is the baseline that gives a fault test's verdict its meaning: the workload, the
recorder and the checker agree with a healthy cluster.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from danube_local.cluster import LocalCluster
from tests.fault.history import History, check
from tests.fault.workload import Workload, final_read
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

#: Acked sends to wait for: ~3 s at 4 producers x 250 msg/s (over 1000 per topic).
TARGET_ACKED = 3_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(brokers=2, workdir=tmp_path, extra_env={"DANUBE_BROKER_REGISTRATION_TTL_S": "3"})
    c.start(timeout_s=60)
    try:
        yield c
    finally:
        c.stop()


async def create_reliable_topic(cluster: LocalCluster, topic: str) -> None:
    """Reliable, and keeping an hour of history: the default retention would delete what every
    subscription acknowledged, and the final read (a new subscription) would miss it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "danube_sdk.cli.admin", "--admin-url", cluster.admin_url,
        "topics", "create", topic, "--dispatch-strategy", "reliable", "--retention-time-s", "3600",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode == 0, f"creating {topic} failed: {out.decode()} {err.decode()}"


async def test_workload_without_faults_gives_a_clean_verdict(cluster: LocalCluster) -> None:
    topics = [f"/default/{unique('history')}" for _ in range(2)]
    for topic in topics:
        await create_reliable_topic(cluster, topic)
    history = History()
    workload = Workload(
        cluster.service_url,
        topics,
        history=history,
        producers=4,
        consumers=4,
        rate_per_producer_s=250,
        payload_bytes=100,
    )

    await workload.start()
    try:
        await wait_until(
            lambda: sum(workload.acked_per_topic().values()) >= TARGET_ACKED,
            timeout_s=40,
            interval_s=0.1,
            what=f"{TARGET_ACKED} acknowledged sends",
        )
    finally:
        caught_up = await workload.stop(catch_up_timeout_s=30)
    assert workload.errors == []
    assert caught_up, f"consumers did not receive every acked message: {workload.lagging()}"

    acked = workload.acked_per_topic()
    admin_addr = cluster.lookup.admin_addr
    read = [
        final_read(cluster.service_url, t, expect_at_least=acked[t], timeout_s=30, admin_addr=admin_addr)
        for t in topics
    ]
    reads = dict(zip(topics, await asyncio.gather(*read), strict=True))
    verdict = check(history, final_reads=reads)
    print("\n" + verdict.summary())

    assert verdict.ok, verdict.summary()
    c = verdict.counts
    assert c.sends_ok >= TARGET_ACKED
    assert c.sends_ok == c.sends_invoked, "no send should fail or time out without faults"
    # every acked message reached both subscriptions (at least once each) and the final read
    assert c.deliveries >= 2 * c.sends_ok
    assert sum(c.final_read.values()) == c.sends_ok
    assert all(c.final_read[topic] >= 1000 for topic in topics)
