"""Partitioned topics, producer access modes and bad input, end to end."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from danube_common.errors import InvalidTopicName, MessageTooLarge, ProducerBusy, TopicNotFound
from danube_local.cluster import LocalCluster
from danube_sdk import AccessMode, DanubeClient, SubType
from tests.e2e.conftest import MAX_MESSAGE_SIZE_BYTES, cli, subprocess_env
from tests.support import unique

pytestmark = [pytest.mark.e2e]


def admin(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli("danube-admin"), "--admin-url", cluster.admin_url, *args],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip


async def test_partitioned_topic_round_trip(cluster: LocalCluster, client: DanubeClient) -> None:
    topic = f"/default/{unique('parts')}"
    res = admin(cluster, "topics", "create", topic, "--partitions", "4")
    assert res.returncode == 0, res.stderr
    listing = admin(cluster, "--output", "json", "topics", "describe", topic)
    assert listing.returncode == 0, listing.stderr
    info = json.loads(listing.stdout)
    owners = {p["broker_id"] for p in info["partition_topics"]}
    assert len(info["partition_topics"]) == 4
    assert len(owners) == 2, f"partitions should spread over both brokers: {info}"

    consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
    producer = await client.create_producer(topic)
    await producer.send_many([f"rr-{i}".encode() for i in range(40)])
    keyed = [await producer.send(f"k-{i}".encode(), key="same-key") for i in range(5)]

    got = []
    for _ in range(45):
        m = await consumer.receive(timeout_s=15)
        await consumer.ack(m)
        got.append(m)
    assert sorted(m.payload for m in got if m.payload.startswith(b"rr-")) == sorted(
        f"rr-{i}".encode() for i in range(40)
    )
    rr_topics = Counter(m.message_id.topic for m in got if m.payload.startswith(b"rr-"))
    assert set(rr_topics) == {f"{topic}-part-{i}" for i in range(4)}
    assert len({k.topic for k in keyed}) == 1, "one key always lands on one partition"


async def test_exclusive_producer_refuses_second(client: DanubeClient) -> None:
    topic = f"/default/{unique('exprod')}"
    p1 = await client.create_producer(topic, producer_name="p1", access_mode=AccessMode.EXCLUSIVE)
    with pytest.raises(ProducerBusy):
        await client.create_producer(topic, producer_name="p2", access_mode=AccessMode.EXCLUSIVE)
    with pytest.raises(ProducerBusy):
        await client.create_producer(topic, producer_name="p3")
    await p1.send(b"still works")
    await p1.close()
    p2 = await client.create_producer(topic, producer_name="p2", access_mode=AccessMode.EXCLUSIVE)
    await p2.send(b"after release")


@pytest.mark.parametrize(
    "bad", ["no-slash", "/default", "/default/a/b", "/default/sp ace", "//t", "/default/"]
)
async def test_malformed_topic_names_get_clear_errors(client: DanubeClient, bad: str) -> None:
    with pytest.raises(InvalidTopicName) as err:
        await client.create_producer(bad)
    assert "/namespace/topic" in str(err.value) or "topic part" in str(err.value)


def test_malformed_topic_name_in_cli(cluster: LocalCluster) -> None:
    res = subprocess.run(
        [cli("danube-cli"), "produce", "-s", cluster.service_url, "-t", "not a topic", "-m", "x"],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )  # fmt: skip
    assert res.returncode == 1
    assert "error:" in res.stderr and "Traceback" not in res.stderr
    assert "/namespace/topic" in res.stderr


async def test_oversized_message_is_refused_and_producer_goes_on(client: DanubeClient) -> None:
    topic = f"/default/{unique('big')}"
    producer = await client.create_producer(topic, enable_chunking=False)  # else it is sent in chunks
    consumer = await client.subscribe(topic, subscription="s", sub_type=SubType.EXCLUSIVE)
    with pytest.raises(MessageTooLarge) as err:
        await producer.send(b"x" * (MAX_MESSAGE_SIZE_BYTES + 1))
    assert str(MAX_MESSAGE_SIZE_BYTES) in str(err.value)
    ok = await producer.send(b"small")
    msg = await consumer.receive(timeout_s=10)
    assert msg.payload == b"small" and msg.message_id.offset == ok.offset


async def test_consumer_on_unknown_topic_is_told_to_create_it(client: DanubeClient) -> None:
    with pytest.raises(TopicNotFound) as err:
        await client.subscribe(f"/default/{unique('nothing')}", subscription="s")
    assert "create" in str(err.value)
