"""Delayed-delivery send options, topic patterns, and multi-topic consumers (fake broker)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from danube_common.errors import InvalidArgument, TopicNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, MultiTopicConsumer
from danube_sdk.cli import delivery_flags
from danube_sdk.cli.produce_consume import build_parser
from danube_sdk.delivery import MAX_DELAY_S, deliver_at_ms
from danube_sdk.multi_consumer import TopicPattern, changes
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

NOW_MS = 1_800_000_000_000


# ---------------------------------------------------------------- due times
@pytest.mark.parametrize(
    ("after", "at", "want"),
    [
        (None, None, 0),
        (5, None, NOW_MS + 5000),
        (0.0001, None, NOW_MS + 1),  # rounded up: never earlier than asked
        (timedelta(minutes=2), None, NOW_MS + 120_000),
        (None, NOW_MS + 42, NOW_MS + 42),
        (None, NOW_MS - 10_000, NOW_MS - 10_000),  # in the past: at once (the broker decides)
        (None, datetime.fromtimestamp((NOW_MS + 1500) / 1000, UTC), NOW_MS + 1500),
    ],
)
def test_deliver_at_ms(after: object, at: object, want: int) -> None:
    assert deliver_at_ms(deliver_after=after, deliver_at=at, now_ms=NOW_MS) == want  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("after", "at", "says"),
    [
        (1, NOW_MS, "not both"),
        (-1, None, "between 0"),
        (MAX_DELAY_S + 1, None, "between 0"),
        (None, datetime(2030, 1, 1), "timezone-aware"),
        (None, True, "epoch milliseconds"),
        (None, "soon", "epoch milliseconds"),
        (None, -5, "out of range"),
    ],
)
def test_bad_due_times_say_what_is_allowed(after: object, at: object, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        deliver_at_ms(deliver_after=after, deliver_at=at, now_ms=NOW_MS)  # type: ignore[arg-type]


async def test_the_due_time_goes_on_the_wire(client: DanubeClient, cluster: FakeCluster) -> None:
    producer = await client.create_producer("/default/d")
    before = int(datetime.now(UTC).timestamp() * 1000)
    await producer.send(b"later", deliver_after=2.5)
    await producer.send(b"at", deliver_at=NOW_MS)
    await producer.send(b"now")
    later, at, now = cluster.topics["/default/d"].log
    assert before + 2500 <= later.deliver_at_ms <= before + 2500 + 5_000
    assert at.deliver_at_ms == NOW_MS and now.deliver_at_ms == 0
    with pytest.raises(InvalidArgument):
        await producer.send(b"x", deliver_after=1, deliver_at=NOW_MS)


# ---------------------------------------------------------------- patterns
def test_pattern_parsing_and_matching() -> None:
    p = TopicPattern.parse("/my.ns/orders-.*")
    assert p.namespace == "my.ns"
    assert p.matches("/my.ns/orders-eu") and not p.matches("/my.ns/refunds")
    assert not p.matches("/myxns/orders-eu"), "the namespace is literal, not a regex"
    assert not TopicPattern.parse("/ns/orders").matches("/ns/orders-eu"), "the whole name must match"
    # A partition matches through its partitioned topic's name, or its own.
    assert TopicPattern.parse("/ns/orders").matches("/ns/orders-part-1", "/ns/orders")
    assert TopicPattern.parse("/ns/.*-part-0").select(
        [("/ns/a-part-0", "/ns/a"), ("/ns/a-part-1", "/ns/a"), ("/ns/b", "")]
    ) == ["/ns/a-part-0"]


@pytest.mark.parametrize("bad", ["orders-.*", "/ns", "/ns/", "/n s/x", "/ns/(unclosed"])
def test_bad_patterns_say_what_is_allowed(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="invalid topic pattern"):
        TopicPattern.parse(bad)


def test_changes() -> None:
    assert changes(["a", "b"], ["b", "c", "d"]) == (["c", "d"], ["a"])
    assert changes([], []) == ([], [])


# ---------------------------------------------------------------- consumers on the fake cluster
async def test_a_list_consumer_merges_its_topics(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic("/default/a")
    cluster.create_topic("/default/b", partitions=2)
    consumer = await client.subscribe_many(["/default/a", "/default/b"], subscription="s")
    assert isinstance(consumer, MultiTopicConsumer)
    assert consumer.topics == ["/default/a", "/default/b-part-0", "/default/b-part-1"]
    pa, pb_ = await client.create_producer("/default/a"), await client.create_producer("/default/b")
    await pa.send_many([b"a%d" % i for i in range(5)])
    await pb_.send_many([b"b%d" % i for i in range(6)])
    got: list[bytes] = []
    while len(got) < 11:
        for msg in await consumer.receive_many(100, timeout_s=5):
            got.append(msg.payload)
            await consumer.ack(msg)
    assert sorted(got) == sorted([b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(6)])
    await consumer.close()


async def test_a_list_with_an_unknown_topic_is_refused(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic("/default/a")
    with pytest.raises(TopicNotFound, match="/default/nope"):
        await client.subscribe_many(["/default/a", "/default/nope"], subscription="s")
    with pytest.raises(InvalidArgument, match="not both"):
        await client.subscribe_many(["/default/a"], pattern="/default/.*", subscription="s")


async def test_a_pattern_consumer_picks_up_new_topics(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic("/default/orders-1")
    cluster.create_topic("/default/other")
    consumer = await client.subscribe_many(
        pattern="/default/orders-.*", subscription="s", refresh_interval_s=0.05
    )
    assert consumer.topics == ["/default/orders-1"]
    cluster.create_topic("/default/orders-2", partitions=2)
    await wait_until(lambda: len(consumer.topics) == 3, timeout_s=10, what="the new topic's partitions")
    assert consumer.topics == ["/default/orders-1", "/default/orders-2-part-0", "/default/orders-2-part-1"]
    listed = cluster.calls_of("NamespaceTopics")[0]
    assert isinstance(listed, pb.NamespaceTopicsRequest) and listed.namespace == "default"
    producer = await client.create_producer("/default/orders-2")
    await producer.send(b"new")
    msg = await consumer.receive(timeout_s=5)
    assert msg.payload == b"new" and msg.topic.startswith("/default/orders-2-part-")
    await consumer.close()


# ---------------------------------------------------------------- CLI flags
def parse(*argv: str) -> argparse.Namespace:
    return build_parser({}).parse_args(list(argv))


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("5s", 5.0), ("2m", 120.0), ("1h", 3600.0), ("1.5", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert delivery_flags.parse_duration(text) == pytest.approx(seconds)


def test_produce_delivery_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("produce", "-m", "x", "--deliver-after", "5s")
    assert delivery_flags.send_options(args) == {"deliver_after": 5.0}
    args = parse("produce", "-m", "x", "--deliver-at", "2026-11-27T12:00:00Z")
    assert delivery_flags.send_options(args) == {"deliver_at": datetime(2026, 11, 27, 12, tzinfo=UTC)}
    assert delivery_flags.send_options(parse("produce", "-m", "x")) == {}
    for bad in (
        ["--deliver-after", "soon"],
        ["--deliver-at", "tomorrow"],
        ["--deliver-after", "1s", "--deliver-at", "2026-01-01"],
    ):
        with pytest.raises(SystemExit):
            parse("produce", "-m", "x", *bad)
    assert "--deliver-after" in capsys.readouterr().err


def test_consume_topic_flags() -> None:
    args = parse("consume", "-m", "s", "--topics", "/default/a, /default/b")
    assert args.topics == ["/default/a", "/default/b"] and args.pattern is None
    args = parse("consume", "-m", "s", "--pattern", "/default/orders-.*")
    assert args.pattern == "/default/orders-.*" and args.topics is None
    with pytest.raises(SystemExit):
        parse("consume", "-m", "s", "--topics", "/default/a", "--pattern", "/default/.*")


async def test_cli_consumes_a_list_and_produces_with_a_due_time(cluster: FakeCluster) -> None:
    from danube_sdk.cli.produce_consume import run_consume, run_produce

    a, b = "/default/cli-a", "/default/cli-b"
    cluster.create_topic(a)
    cluster.create_topic(b)
    out, err = io.StringIO(), io.StringIO()
    args = parse(
        "consume", "-s", cluster.service_url, "--topics", f"{a},{b}", "-m", "s", "-c", "2", "--output", "json"
    )
    task = asyncio.create_task(run_consume(args, out=out, err=err, stop=asyncio.Event()))
    await wait_until(
        lambda: "s" in cluster.topics[a].subs and "s" in cluster.topics[b].subs, what="subscribed"
    )
    for topic in (a, b):
        produced = parse(
            "produce", "-s", cluster.service_url, "-t", topic, "-m", "hi", "--deliver-after", "1h"
        )
        assert await run_produce(produced, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event()) == 0
    assert await task == 0
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(d["topic"] for d in docs) == [a, b]
    # About an hour ahead (the fake broker does not hold messages back).
    assert all(d["deliver_at_ms"] > time.time() * 1000 + 3_500_000 for d in docs)
    assert f"consuming {a},{b}" in err.getvalue()
