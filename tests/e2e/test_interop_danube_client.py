"""The unmodified PyPI ``danube-client==0.5.0`` against our cluster, through the lookup address.

The real client runs in its own venv as a subprocess (its generated protobufs cannot share a
process with ours); tests/e2e/interop/danube_client_driver.py reports what it saw as JSON.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, SubType
from tests.e2e.conftest import interop_python, subprocess_env
from tests.support import unique

pytestmark = [pytest.mark.e2e]
DRIVER = str(Path(__file__).parent / "interop" / "danube_client_driver.py")


def run_driver(cluster: LocalCluster, *args: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    res = subprocess.run(
        [interop_python(), DRIVER, *args, "--service-url", cluster.service_url],
        capture_output=True, text=True, timeout=timeout_s, env=subprocess_env(),
    )  # fmt: skip
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.returncode == 0, f"danube-client failed: {events[-1:] or res.stderr[-2000:]}"
    return events


def received(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "received"]


def test_danube_client_round_trip_on_new_topic(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('interop-new')}"
    events = run_driver(cluster, "roundtrip", "--topic", topic, "--count", "25")
    got = received(events)
    assert [e["payload"] for e in got] == [f"m{i}" for i in range(25)]
    assert all(e["topic"] == topic for e in got)
    assert [e["attributes"]["i"] for e in got] == [str(i) for i in range(25)]
    offsets = [e["offset"] for e in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == 25


async def test_danube_client_on_existing_topic_made_by_our_sdk(
    cluster: LocalCluster, client: DanubeClient
) -> None:
    topic = f"/default/{unique('interop-existing')}"
    producer = await client.create_producer(topic, producer_name="sdk-producer")
    await producer.send(b"created by the SDK")
    events = await asyncio.to_thread(
        run_driver, cluster, "roundtrip", "--topic", topic, "--count", "10", "--sub-type", "shared"
    )
    assert [e["payload"] for e in received(events)] == [f"m{i}" for i in range(10)]


async def test_danube_client_produces_our_sdk_consumes(cluster: LocalCluster, client: DanubeClient) -> None:
    topic = f"/default/{unique('interop-to-sdk')}"
    # The topic must exist for our consumer: create it with a producer of our own.
    seed = await client.create_producer(topic, producer_name="seed")
    await seed.send(b"seed")
    consumer = await client.subscribe(topic, subscription="sdk-sub", sub_type=SubType.EXCLUSIVE)
    events = await asyncio.to_thread(run_driver, cluster, "produce", "--topic", topic, "--count", "20")
    assert sum(1 for e in events if e["event"] == "sent") == 20
    got = [await consumer.receive(timeout_s=10) for _ in range(20)]
    assert [m.payload for m in got] == [f"m{i}".encode() for i in range(20)]
    assert [m.properties["i"] for m in got] == [str(i) for i in range(20)]
    assert all(m.producer_name == "interop-producer" for m in got)


async def test_our_sdk_produces_danube_client_consumes(cluster: LocalCluster, client: DanubeClient) -> None:
    topic = f"/default/{unique('interop-from-sdk')}"
    producer = await client.create_producer(topic, producer_name="sdk-producer")
    await producer.send(b"creates the topic")
    proc = await asyncio.create_subprocess_exec(
        interop_python(), DRIVER, "consume", "--topic", topic, "--count", "15",
        "--service-url", cluster.service_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=subprocess_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        # Probe until the real client reports its stream attached (no sleeps: its own report).
        async def wait_ready() -> None:
            while True:
                line = await proc.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    raise AssertionError("danube-client consumer exited before it was ready")
                if json.loads(line)["event"] == "ready":
                    return

        ready = asyncio.create_task(wait_ready())
        while not ready.done():
            await producer.send(b"probe", properties={"probe": "1"})
            await asyncio.wait([ready], timeout=0.1)
        await ready
        await producer.send_many([f"s{i}".encode() for i in range(15)], properties={"from": "sdk"})
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert proc.returncode == 0, f"{events[-1:]} {err.decode()[-2000:]}"
    got = received(events)
    assert [e["payload"] for e in got] == [f"s{i}" for i in range(15)]
    assert all(e["attributes"] == {"from": "sdk"} for e in got)


def test_danube_client_partitioned_topic(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('interop-parts')}"
    events = run_driver(cluster, "roundtrip", "--topic", topic, "--count", "12", "--partitions", "3")
    got = received(events)
    assert sorted(e["payload"] for e in got) == sorted(f"m{i}" for i in range(12))
    assert {e["topic"] for e in got} == {f"{topic}-part-{i}" for i in range(3)}


def test_danube_client_reliable_topic_with_acks(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('interop-reliable')}"
    events = run_driver(cluster, "roundtrip", "--topic", topic, "--count", "30", "--reliable")
    got = received(events)
    assert [e["payload"] for e in got] == [f"m{i}" for i in range(30)]
    offsets = [e["offset"] for e in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == 30


def test_danube_client_nack_redelivers_same_offset(cluster: LocalCluster) -> None:
    topic = f"/default/{unique('interop-nack')}"
    events = run_driver(cluster, "roundtrip", "--topic", topic, "--count", "10", "--reliable", "--nack-first")
    nacked = [e for e in events if e["event"] == "nacked"]
    got = received(events)
    assert sorted(e["payload"] for e in got) == sorted(f"m{i}" for i in range(10))
    assert sorted(e["offset"] for e in nacked) == sorted(e["offset"] for e in got), (
        "each nacked message comes back at the same offset"
    )


async def test_danube_client_schema_registry_and_validated_topic(
    cluster: LocalCluster, client: DanubeClient
) -> None:
    """client.schema() works against the lookup, the producer's schema reference binds the topic,
    valid messages arrive stamped with the schema, and an invalid payload is refused."""
    topic, subject = f"/default/{unique('interop-schema')}", unique("people")
    setup = await client.create_producer(topic, producer_name="sdk-setup")  # creates the topic
    await setup.close()
    sub = await client.subscribe(topic, subscription="check", sub_type=SubType.EXCLUSIVE)
    events = await asyncio.to_thread(
        run_driver, cluster, "schema", "--topic", topic, "--subject", subject, "--count", "5"
    )
    registered = next(e for e in events if e["event"] == "registered")
    assert registered["latest_version"] == 1 and registered["versions"] == [1]
    assert registered["latest_subject"] == registered["by_id_subject"] == subject
    assert registered["same_definition"] and registered["breaking_compatible"] is False
    assert any("age" in err for err in registered["breaking_errors"])
    configured = next(e for e in events if e["event"] == "configured")
    assert configured["ok"] and configured["policy"] == "enforce" and configured["payload_validation"]
    assert configured["schema_id"] == registered["schema_id"]
    refused = [e for e in events if e["event"] in ("refused", "accepted-invalid")]
    assert refused and refused[0]["event"] == "refused", refused
    assert "does not match schema subject" in refused[0]["message"]

    got = [await asyncio.wait_for(sub.receive(), 20) for _ in range(5)]
    assert [json.loads(m.payload)["name"] for m in got] == [f"n{i}" for i in range(5)]
    assert {(m.raw.schema_id, m.raw.schema_version) for m in got} == {(registered["schema_id"], 1)}
    with pytest.raises(TimeoutError):  # nothing of the refused batch was stored
        await asyncio.wait_for(sub.receive(), 1.0)
