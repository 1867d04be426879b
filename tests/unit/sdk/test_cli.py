"""danube-cli: argument parsing, and produce/consume runs against the fake broker."""

from __future__ import annotations

import argparse
import asyncio
import io
import json

import pytest

from danube_common.errors import ConsumerBusy, TopicNotFound, Unavailable
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, InitialPosition, Message, SubType
from danube_sdk.cli.produce_consume import (
    DEFAULT_SERVICE_URL,
    DEFAULT_TOPIC,
    INITIAL_POSITIONS,
    SUB_TYPES,
    build_parser,
    explain,
    format_json,
    format_text,
    generated_payload,
    main,
    parse_attributes,
    run_consume,
    run_produce,
)
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def parse(*argv: str, env: dict[str, str] | None = None) -> argparse.Namespace:
    return build_parser(env or {}).parse_args(list(argv))


def test_produce_defaults() -> None:
    args = parse("produce", "-m", "hi")
    assert (args.service_url, args.topic, args.count, args.rate) == (
        DEFAULT_SERVICE_URL,
        DEFAULT_TOPIC,
        1,
        0.0,
    )
    assert args.attributes == {} and args.key is None and not args.reliable and not args.exclusive


def test_service_url_from_environment() -> None:
    args = parse("consume", "-m", "s", env={"DANUBE_SERVICE_URL": "http://10.0.0.5:6650"})
    assert args.service_url == "http://10.0.0.5:6650"
    args = parse("consume", "-m", "s", "-s", "http://flag:1", env={"DANUBE_SERVICE_URL": "http://env:2"})
    assert args.service_url == "http://flag:1"


def test_produce_options() -> None:
    args = parse(
        "produce",
        *("-t", "/ns/t", "--size", "64", "-c", "500", "--rate", "20", "-a", "a:1,url:http://x:9"),
        *("-k", "k1", "--reliable", "-n", "me", "--exclusive"),
    )
    assert (args.topic, args.size, args.count, args.rate, args.key, args.producer_name) == (
        "/ns/t",
        64,
        500,
        20.0,
        "k1",
        "me",
    )
    assert args.attributes == {"a": "1", "url": "http://x:9"}
    assert args.reliable and args.exclusive and args.message is None


@pytest.mark.parametrize(
    "argv",
    [
        ["produce"],  # no payload source
        ["produce", "-m", "a", "-f", "x"],  # two sources
        ["produce", "-m", "a", "-c", "0"],
        ["produce", "-m", "a", "-a", "novalue"],
        ["consume"],  # subscription is required
        ["consume", "-m", "s", "--sub-type", "round-robin"],
        ["consume", "-m", "s", "-c", "-1"],
        ["consume", "-m", "s", "--output", "xml"],
        ["consume", "-m", "s", "--initial-position", "middle"],
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_consume_options() -> None:
    args = parse(
        "consume", "-m", "s", "-n", "c", "--sub-type", "key-shared", "-c", "5", "--output", "json", "--no-ack"
    )
    assert SUB_TYPES[args.sub_type] is SubType.KEY_SHARED
    assert (args.subscription, args.consumer_name, args.count, args.output, args.no_ack) == (
        "s",
        "c",
        5,
        "json",
        True,
    )
    assert parse("consume", "-m", "s").sub_type == "shared"
    assert INITIAL_POSITIONS[parse("consume", "-m", "s").initial_position] is InitialPosition.LATEST
    args = parse("consume", "-m", "s", "--initial-position", "earliest")
    assert INITIAL_POSITIONS[args.initial_position] is InitialPosition.EARLIEST


def test_redelivered_messages_are_marked() -> None:
    raw = pb.StreamMessage(payload=b"again", redelivery_count=2)
    raw.msg_id.topic_name, raw.msg_id.topic_offset = "/default/t", 7
    msg = Message(raw)
    assert format_text(msg) == "7 - again - (redelivered x2)"
    assert json.loads(format_json(msg))["redelivery_count"] == 2
    raw.redelivery_count = 0
    assert format_text(Message(raw)) == "7 - again -"
    assert json.loads(format_json(Message(raw)))["redelivery_count"] == 0


def test_attributes_parsing() -> None:
    assert parse_attributes("k:v, k2:v2,") == {"k": "v", "k2": "v2"}
    assert parse_attributes("empty:") == {"empty": ""}
    with pytest.raises(argparse.ArgumentTypeError, match="key:value"):
        parse_attributes(":v")


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["produce", "--help"])
    text = capsys.readouterr().out
    assert "danube-cli produce -t /default/orders" in text and "DANUBE_SERVICE_URL" in text


def test_generated_payload_has_the_size() -> None:
    assert len(generated_payload(1)) == 1 and len(generated_payload(1000)) == 1000


def test_unreachable_cluster_is_one_line_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["produce", "-s", "http://127.0.0.1:1", "-m", "x", "--connect-timeout-s", "0.2"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: cannot reach the service at http://127.0.0.1:1")
    assert "danube-local up" in err and "Traceback" not in err


def test_missing_file_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["produce", "-f", "/nonexistent/payload.bin", "--connect-timeout-s", "0.1"])
    assert code == 1
    assert capsys.readouterr().err.startswith("error: No such file or directory")


def test_explain_gives_what_to_do() -> None:
    assert "another -m/--subscription" in explain(ConsumerBusy("busy"), "u")
    assert explain(Unavailable("down"), "http://h:1").endswith(
        "is a cluster running at http://h:1? start one with `danube-local up`"
    )


async def test_produce_prints_ids_and_summary(cluster: FakeCluster) -> None:
    out, err = io.StringIO(), io.StringIO()
    args = parse(
        "produce",
        "-s",
        cluster.service_url,
        "-t",
        "/default/cli",
        "-m",
        "hi",
        "-c",
        "3",
        "-a",
        "x:1",
        "-k",
        "k",
    )
    assert await run_produce(args, out=out, err=err, stop=asyncio.Event()) == 0
    assert out.getvalue().splitlines() == [f"sent /default/cli offset {i}" for i in range(3)]
    assert err.getvalue().startswith("produced 3 messages in ")
    log = cluster.topics["/default/cli"].log
    assert [m.payload for m in log] == [b"hi"] * 3
    assert all(dict(m.attributes) == {"x": "1"} and m.routing_key == "k" for m in log)


async def test_long_produce_prints_only_the_summary(cluster: FakeCluster) -> None:
    out, err = io.StringIO(), io.StringIO()
    args = parse("produce", "-s", cluster.service_url, "-t", "/default/cli", "--size", "16", "-c", "250")
    assert await run_produce(args, out=out, err=err, stop=asyncio.Event()) == 0
    assert out.getvalue() == ""
    assert err.getvalue().splitlines()[-1].startswith("produced 250 messages in ")
    assert cluster.payloads("/default/cli") == [generated_payload(16)] * 250


async def test_consume_prints_messages_as_text_and_json(cluster: FakeCluster) -> None:
    topic = "/default/cli"
    cluster.create_topic(topic)
    outputs = {}
    for fmt in ("text", "json"):
        out, err = io.StringIO(), io.StringIO()
        args = parse(
            "consume", "-s", cluster.service_url, "-t", topic, "-m", f"s-{fmt}", "-c", "2", "--output", fmt
        )
        task = asyncio.create_task(run_consume(args, out=out, err=err, stop=asyncio.Event()))
        await wait_until(
            lambda fmt=fmt: f"s-{fmt}" in cluster.topics[topic].subs, timeout_s=5, what="subscribed"
        )
        async with DanubeClient(cluster.service_url, health_check_interval_s=0) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"plain", key="k1", properties={"a": "1"})
            await producer.send(b"\xff\xfe")
        assert await task == 0
        outputs[fmt] = out.getvalue().splitlines()
        assert "received 2 messages" in err.getvalue()
    assert outputs["text"][0] == "0 k1 plain a=1"
    assert outputs["text"][1] == "1 - \\xff\\xfe -"
    first, second = (json.loads(line) for line in outputs["json"])
    assert first["payload"] == "plain" and first["key"] == "k1" and first["attributes"] == {"a": "1"}
    assert first["offset"] == 2 and first["topic"] == topic
    assert second["payload_base64"] == "//4=" and second["key"] is None
    acked: dict[str, list[int]] = {}
    for r in cluster.ack_batches:
        acked.setdefault(r.subscription_name, []).extend(r.topic_offsets)
    assert acked == {"s-text": [0, 1], "s-json": [2, 3]}


async def test_consume_stops_cleanly_on_signal(cluster: FakeCluster) -> None:
    cluster.create_topic("/default/cli")
    stop = asyncio.Event()
    out, err = io.StringIO(), io.StringIO()
    args = parse("consume", "-s", cluster.service_url, "-t", "/default/cli", "-m", "s", "--no-ack")
    task = asyncio.create_task(run_consume(args, out=out, err=err, stop=stop))
    await wait_until(lambda: "s" in cluster.topics["/default/cli"].subs, timeout_s=5, what="subscribed")
    stop.set()
    assert await task == 0
    assert "received 0 messages" in err.getvalue()
    assert cluster.calls_of("CloseConsumer")


async def test_consume_unknown_topic_raises_topic_not_found(cluster: FakeCluster) -> None:
    args = parse("consume", "-s", cluster.service_url, "-t", "/default/nothing", "-m", "s")
    with pytest.raises(TopicNotFound) as exc:
        await run_consume(args, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event())
    assert "danube-admin topics create /default/nothing" in explain(exc.value, cluster.service_url)


async def test_produce_reliable_is_idempotent(cluster: FakeCluster) -> None:
    args = parse(
        "produce", "-s", cluster.service_url, "-t", "/default/rel", "-m", "x", "-c", "3", "--reliable"
    )
    assert await run_produce(args, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event()) == 0
    (create,) = cluster.calls_of("CreateProducer")
    assert isinstance(create, pb.ProducerRequest) and create.dispatch_strategy == pb.Reliable
    assert [m.sequence_id for m in cluster.topics["/default/rel"].log] == [1, 2, 3]


async def test_consume_from_earliest_replays(cluster: FakeCluster) -> None:
    topic = "/default/cli"
    cluster.create_topic(topic)
    async with DanubeClient(cluster.service_url, health_check_interval_s=0) as client:
        producer = await client.create_producer(topic)
        await producer.send_many([b"old0", b"old1"])
    out, err = io.StringIO(), io.StringIO()
    args = parse(
        "consume",
        "-s",
        cluster.service_url,
        "-t",
        topic,
        "-m",
        "r",
        "-c",
        "2",
        "--initial-position",
        "earliest",
    )
    assert await run_consume(args, out=out, err=err, stop=asyncio.Event()) == 0
    assert out.getvalue().splitlines() == ["0 - old0 -", "1 - old1 -"]
    (sub,) = cluster.calls_of("Subscribe")
    assert isinstance(sub, pb.ConsumerRequest) and sub.initial_position == pb.ConsumerRequest.Earliest
