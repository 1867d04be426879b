"""The real `danube-admin` console script against an in-process lookup service and real etcd."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from danube_common.config import EtcdConfig
from danube_common.etcd_server import EtcdProcess, free_port
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.records import BrokerRecord
from danube_common.topic_name import TopicName
from danube_lookup.app import running
from danube_lookup.config import LookupConfig
from tests.unit.lookup.fake_stats import register, stats_broker

pytestmark = pytest.mark.integration

ADMIN = Path(sys.executable).parent / "danube-admin"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
async def admin_url(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[str]:
    cfg = LookupConfig(
        listen_addr="127.0.0.1:0",
        admin_listen_addr="127.0.0.1:0",
        etcd=EtcdConfig(endpoints=[etcd_server.endpoint], cluster=cluster_name),
    )
    async with running(cfg) as info:
        yield info.admin_url


async def cli(*args: str, url: str | None = None) -> Result:
    """Run danube-admin without blocking the event loop that serves the in-process lookup."""
    env = {k: v for k, v in os.environ.items() if k != "DANUBE_ADMIN_URL"}
    argv = [str(ADMIN), *(("--admin-url", url) if url else ()), *args]
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def test_namespaces(admin_url: str) -> None:
    r = await cli("namespaces", "create", "analytics", url=admin_url)
    assert (r.code, r.out.strip()) == (0, "created namespace analytics"), r.err
    r = await cli("namespaces", "list", url=admin_url)
    assert r.code == 0 and r.out.split() == ["NAMESPACE", "analytics", "default"]
    r = await cli("namespaces", "list", "--output", "json", url=admin_url)
    assert r.json() == [{"name": "analytics"}, {"name": "default"}]
    r = await cli("namespaces", "create", "analytics", url=admin_url)
    assert r.code == 1 and "error: namespace 'analytics' already exists" in r.err
    r = await cli("-o", "json", "namespaces", "delete", "analytics", url=admin_url)
    assert r.code == 0 and r.json() == {"name": "analytics", "deleted": True}
    r = await cli("namespaces", "delete", "analytics", url=admin_url)
    assert r.code == 1 and "does not exist" in r.err and "hint: list namespaces" in r.err


async def test_topics_with_partitions(admin_url: str, etcd_store: EtcdStore, keys: Keys) -> None:
    for b in ("b1", "b2"):
        lease = await etcd_store.grant_lease(30)
        rec = BrokerRecord(b, f"127.0.0.1:{free_port()}", f"http://{b}:1", "active", 1)
        await etcd_store.put(keys.broker(b), rec.to_json(), lease=lease)

    r = await cli(
        "topics",
        "create",
        "/default/orders",
        "--partitions",
        "3",
        "--dispatch-strategy",
        "reliable",
        url=admin_url,
    )
    assert r.code == 0, r.err
    assert r.out.startswith("created topic /default/orders with 3 partitions")
    r = await cli("topics", "create", "/default/plain", url=admin_url)
    assert r.code == 0, r.err

    r = await cli("topics", "list", url=admin_url)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["TOPIC", "DISPATCH", "PARTITIONS", "BROKER", "DURABILITY"]
    assert lines[1].split()[:3] == ["/default/orders", "reliable", "3"]
    assert lines[1].split()[-1] == "fsync"  # the default durability of a reliable topic
    assert [ln.split()[0] for ln in lines[2:5]] == [f"/default/orders-part-{i}" for i in range(3)]
    assert lines[5].split()[0] == "/default/plain"

    r = await cli("topics", "list", "--namespace", "default", "-o", "json", url=admin_url)
    topics = r.json()
    assert [t["name"] for t in topics] == ["/default/orders", "/default/plain"]
    parts = topics[0]["partition_topics"]
    assert topics[0]["partitions"] == 3 and len(parts) == 3
    assert {p["broker_id"] for p in parts} == {"b1", "b2"}  # spread over both brokers

    r = await cli("topics", "describe", "/default/orders", url=admin_url)
    assert r.code == 0 and "dispatch_strategy  reliable" in r.out and "/default/orders-part-2" in r.out
    r = await cli("--output", "json", "topics", "describe", "/default/orders", url=admin_url)
    assert r.json()["name"] == "/default/orders" and r.json()["subscriptions"] == []

    r = await cli("brokers", "list", "-o", "json", url=admin_url)
    assert sorted((b["broker_id"], b["topic_count"]) for b in r.json()) == [("b1", 2), ("b2", 2)]
    r = await cli("brokers", "list", url=admin_url)
    assert r.code == 0 and r.out.splitlines()[0].split()[:4] == ["BROKER_ID", "URL", "STATE", "TOPICS"]

    r = await cli("topics", "delete", "/default/orders", url=admin_url)
    assert r.code == 0 and "/default/orders-part-0" in r.out
    r = await cli("-o", "json", "topics", "delete", "/default/plain", url=admin_url)
    assert r.json() == {"deleted": ["/default/plain"]}
    r = await cli("topics", "list", url=admin_url)
    assert r.out.strip() == "(none)"
    r = await cli("topics", "describe", "/default/orders", url=admin_url)
    assert r.code == 1 and "error: topic /default/orders does not exist" in r.err


async def test_broker_states_leaders_and_move_requests(
    admin_url: str, etcd_store: EtcdStore, keys: Keys
) -> None:
    """drain/activate record the admin state the load manager acts on; brokers list shows it with
    the latest load report; topics move records a request; leaders list reads the election keys."""
    for b in ("b1", "b2"):
        await etcd_store.put(
            keys.broker(b), BrokerRecord(b, f"{b}:1", f"http://{b}:1", "active", 1).to_json()
        )
    await etcd_store.put(
        keys.load("b1"),
        {
            "broker_id": "b1",
            "at_ms": 5,
            "cpu_usage": 0.5,
            "cpu_cores": 2,
            "msg_rate_in": 1234.0,
            "backlog": 7,
        },
    )
    r = await cli("brokers", "drain", "b1", url=admin_url)
    assert r.code == 0 and "b1 is draining" in r.out, r.err
    assert (await etcd_store.get_json(keys.broker_state("b1")))["state"] == "draining"
    r = await cli("-o", "json", "brokers", "list", url=admin_url)
    by_id = {b["broker_id"]: b for b in r.json()}
    assert by_id["b1"]["state"] == "draining" and by_id["b2"]["state"] == "active"
    assert by_id["b1"]["load"]["msg_rate_in"] == 1234.0 and by_id["b1"]["load"]["backlog"] == 7
    assert by_id["b2"]["load"] is None
    r = await cli("brokers", "activate", "b1", url=admin_url)
    assert r.code == 0 and (await etcd_store.get_json(keys.broker_state("b1")))["state"] == "active"
    r = await cli("brokers", "drain", "nope", url=admin_url)
    assert r.code == 1 and "not registered" in r.err and "brokers list" in r.err

    t = TopicName.parse("/default/movable")
    await etcd_store.put(keys.topic(t), {"name": str(t), "dispatch_strategy": "non_reliable"})
    await etcd_store.put(keys.owner(t), {"broker_id": "b1"})
    r = await cli("topics", "move", str(t), "--to", "b2", url=admin_url)
    assert r.code == 0 and "from broker b1 to b2" in r.out, r.err
    assert (await etcd_store.get_json(keys.move_request(t)))["to"] == "b2"
    r = await cli("topics", "move", str(t), "--to", "b1", url=admin_url)
    assert r.code == 1 and "already on broker b1" in r.err
    r = await cli("topics", "move", str(t), "--to", "ghost", url=admin_url)
    assert r.code == 1 and "not registered" in r.err

    await etcd_store.put(
        keys.leader_candidate("load-manager", "lm-a"), {"candidate_id": "lm-a", "metadata": {}}
    )
    await etcd_store.put(
        keys.leader_candidate("load-manager", "lm-b"), {"candidate_id": "lm-b", "metadata": {}}
    )
    r = await cli("-o", "json", "leaders", "list", url=admin_url)
    leaders = r.json()
    assert [(x["role"], x["candidate_id"]) for x in leaders] == [("load-manager", "lm-a")]  # the oldest key
    assert (
        leaders[0]["term"]
        == (await etcd_store.get(keys.leader_candidate("load-manager", "lm-a"))).create_revision
    )


async def test_bad_topic_name(admin_url: str) -> None:
    r = await cli("topics", "create", "orders", url=admin_url)
    assert r.code == 1
    assert r.err.startswith("error: invalid topic name 'orders': topic names look like /namespace/topic")
    assert "Traceback" not in r.err and "[INVALID_TOPIC_NAME]" not in r.err


async def test_non_empty_namespace(admin_url: str) -> None:
    await cli("namespaces", "create", "busy", url=admin_url)
    await cli("topics", "create", "/busy/t", url=admin_url)
    r = await cli("namespaces", "delete", "busy", url=admin_url)
    assert r.code == 1 and "still has 1 topic(s)" in r.err
    assert "hint: list its topics with `danube-admin topics list --namespace busy`" in r.err


async def test_unreachable_admin_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = await cli("namespaces", "list", url=url)
    assert r.code == 1
    assert f"error: cannot reach the admin API at {url}" in r.err
    assert f"hint: is the lookup service running at {url}? start a cluster with `danube-local up`" in r.err
    assert "Traceback" not in r.err


async def test_usage_error_exits_2() -> None:
    r = await cli("topics", "create")
    assert r.code == 2 and "usage:" in r.err


# ---------------------------------------------------------------------------- reliable topics


async def test_reliable_topic_create_describe_and_refusal(admin_url: str) -> None:
    r = await cli(
        *("topics", "create", "/default/ledger", "--dispatch-strategy", "reliable"),
        *("--durability", "cloud", "--retention-time-s", "86400", "--retention-size-bytes", "1048576"),
        url=admin_url,
    )
    assert r.code == 0, r.err
    r = await cli("topics", "describe", "/default/ledger", url=admin_url)
    assert r.code == 0, r.err
    assert "durability         cloud" in r.out
    assert "retention          up to 86400 s / 1048576 bytes" in r.out
    r = await cli("-o", "json", "topics", "describe", "/default/ledger", url=admin_url)
    doc = r.json()
    assert (doc["durability"], doc["retention_time_s"], doc["retention_size_bytes"]) == (
        "cloud",
        86400,
        1048576,
    )

    r = await cli("topics", "create", "/default/fast", "--durability", "fsync", url=admin_url)
    assert r.code == 1 and "reliable topics only" in r.err and "Traceback" not in r.err


async def test_subscription_policy_commands(admin_url: str, etcd_store: EtcdStore, keys: Keys) -> None:
    r = await cli("topics", "create", "/default/jobs", "--dispatch-strategy", "reliable", url=admin_url)
    assert r.code == 0, r.err
    r = await cli("subscriptions", "get-policy", "/default/jobs", "-s", "workers", url=admin_url)
    assert (r.code, r.out.strip()) == (0, "subscription workers on /default/jobs: defaults (broker config)")

    r = await cli(
        *("subscriptions", "set-policy", "/default/jobs", "-s", "workers", "--max-redeliveries", "4"),
        *("--ack-timeout-ms", "20000", "--backoff-base-ms", "100", "--backoff-max-ms", "5000"),
        *("--poison-policy", "dead_letter", "--dead-letter-topic", "/default/jobs-dlq"),
        url=admin_url,
    )
    assert r.code == 0, r.err
    assert r.out.startswith("set the policy of subscription workers on /default/jobs")
    r = await cli(
        "-o", "json", "subscriptions", "get-policy", "/default/jobs", "-s", "workers", url=admin_url
    )
    assert r.json() == {
        "topic": "/default/jobs",
        "subscription": "workers",
        "policy": {
            "max_redeliveries": 4,
            "ack_timeout_ms": 20000,
            "redelivery_backoff_base_ms": 100,
            "redelivery_backoff_max_ms": 5000,
            "poison_policy": "dead_letter",
            "dead_letter_topic": "/default/jobs-dlq",
        },
    }

    r = await cli(
        "subscriptions",
        "set-policy",
        "/default/jobs",
        "-s",
        "workers",
        "--poison-policy",
        "dead_letter",
        url=admin_url,
    )
    assert r.code == 1 and "error: poison_policy dead_letter needs a dead_letter_topic" in r.err
    r = await cli("subscriptions", "set-policy", "/default/jobs", "-s", "workers", url=admin_url)
    assert r.code == 1 and "pass at least one option" in r.err and "Traceback" not in r.err
    r = await cli("subscriptions", "get-policy", "/default/nope", "-s", "w", url=admin_url)
    assert r.code == 1 and "does not exist" in r.err and "hint: list topics" in r.err

    # Options not given use the broker's defaults: nothing of the earlier policy is kept, and
    # nothing is stored for them (an ack timeout of 0 would switch redelivery off).
    r = await cli(
        *("subscriptions", "set-policy", "/default/jobs", "-s", "workers", "--max-redeliveries", "5"),
        url=admin_url,
    )
    assert (r.code, r.err) == (0, ""), r.err
    kv = await etcd_store.get(keys.subscription_policy(TopicName("default", "jobs"), "workers"))
    assert kv is not None and kv.json() == {"max_redeliveries": 5}
    r = await cli("subscriptions", "get-policy", "/default/jobs", "-s", "workers", url=admin_url)
    assert r.code == 0, r.err
    rows = [ln.split(maxsplit=1) for ln in r.out.splitlines()[2:]]
    assert rows == [
        ["max_redeliveries", "5"],
        ["ack_timeout_ms", "(broker default)"],
        ["redelivery_backoff_base_ms", "(broker default)"],
        ["redelivery_backoff_max_ms", "(broker default)"],
        ["poison_policy", "(broker default)"],
        ["dead_letter_topic", "(broker default)"],
    ]


async def test_topic_stats_command(admin_url: str, etcd_store: EtcdStore, keys: Keys) -> None:
    async with stats_broker("b1") as b1:
        await register(etcd_store, keys, "b1", b1.addr)
        r = await cli(
            "topics", "create", "/default/metered", "--dispatch-strategy", "reliable", url=admin_url
        )
        assert r.code == 0, r.err
        b1.sample("/default/metered")
        r = await cli("topics", "stats", "/default/metered", url=admin_url)
        assert r.code == 0, r.err
        assert "broker             b1" in r.out and "offsets kept       10 .. 109" in r.out
        rows = {ln.split()[0]: ln.split() for ln in r.out.splitlines() if ln.startswith(("billing", "fresh"))}
        assert rows["billing"] == [
            "billing",
            "exclusive",
            "1",
            "7",
            "102",
            "3",
            "105",
            "4",
            "1",
            "0",
            "9.5/s",
        ]
        r = await cli("-o", "json", "topics", "stats", "/default/metered", url=admin_url)
        assert r.json()["subscriptions"][0]["dead_lettered_total"] == 1

    r = await cli("topics", "stats", "/default/metered", url=admin_url)  # the broker is gone now
    assert r.code == 1 and "error: broker b1 (owner of /default/metered)" in r.err and "unreachable" in r.err
    assert "hint: see which brokers are registered" in r.err
    r = await cli("topics", "stats", "/default/ghost", url=admin_url)
    assert r.code == 1 and "error: topic /default/ghost does not exist" in r.err
