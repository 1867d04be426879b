"""Reading a compacted topic (``read_compacted``): the flag reaches every Subscribe (consumers,
partitions, many topics, readers on each attach, the blocking SDK, danube-cli), and the SDK
copes with a view whose offsets have gaps (acks, redelivery after a move, reader re-attach,
chunks, partition merging). The fake broker serves the view (tests/unit/sdk/fake_consumer.py)."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import io
import json
import typing

import pytest

from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import DanubeClient, InitialPosition, StartPosition, SubType
from danube_sdk.cli.produce_consume import build_parser, run_consume
from danube_sdk.options import ClientOptions, ConsumerOptions
from danube_sdk.receive_queue import ReceiveQueue
from danube_sdk.topic_consumer import TopicConsumer
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster
from tests.unit.sdk.fake_consumer import compacted_view

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/prices"


def subscribes(cluster: FakeCluster, broker: int | None = None) -> list[pb.ConsumerRequest]:
    reqs = cluster.calls_of("Subscribe", broker)
    assert all(isinstance(r, pb.ConsumerRequest) for r in reqs)
    return typing.cast("list[pb.ConsumerRequest]", reqs)


def fill(cluster: FakeCluster, topic: str, entries: list[tuple[str | None, bytes]]) -> None:
    for key, payload in entries:
        cluster.append(topic, payload, key=key)


#: Offsets 0..6; compacted below 6 the view is {3: a2, 5: c1} (b's newest is a tombstone,
#: offset 2 has no key); offset 6 is above the horizon.
HISTORY: list[tuple[str | None, bytes]] = [
    ("a", b"a1"),
    ("b", b"b1"),
    (None, b"x"),
    ("a", b"a2"),
    ("b", b""),
    ("c", b"c1"),
    ("a", b"a3"),
]


def test_the_fake_compacts_as_the_broker_is_specified_to() -> None:
    log = [pb.StreamMessage(payload=p, routing_key=k) for k, p in HISTORY]
    assert compacted_view(log, 6) == {3, 5}
    assert compacted_view(log, 7) == {5, 6}

    def chunk(index: int, payload: bytes) -> pb.StreamMessage:
        info = pb.MessageChunk(message_uuid="u", index=index, count=2, total_size=2)
        return pb.StreamMessage(payload=payload, routing_key="k", chunk=info)

    log = [chunk(0, b"1"), pb.StreamMessage(payload=b"o", routing_key="o"), chunk(1, b"2")]
    log.append(pb.StreamMessage(payload=b"o2", routing_key="o"))
    assert compacted_view(log, 4) == {0, 2, 3}, "every chunk of the newest message is kept"


# ---------------------------------------------------------------- options and signatures
def test_read_compacted_is_off_by_default_everywhere() -> None:
    assert ConsumerOptions().read_compacted is False
    methods: list[typing.Any] = [
        DanubeClient.subscribe,
        DanubeClient.subscribe_many,
        DanubeClient.create_reader,
    ]
    methods += typing.get_overloads(DanubeClient.subscribe)
    sigs = [inspect.signature(m) for m in methods]
    assert len(sigs) == 5
    for sig in sigs:
        assert sig.parameters["read_compacted"].default is False
        assert sig.parameters["read_compacted"].kind is inspect.Parameter.KEYWORD_ONLY


# ---------------------------------------------------------------- consumers
async def test_subscribe_sends_read_compacted(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    await client.subscribe(T, subscription="view", read_compacted=True)
    await client.subscribe(T, subscription="all")
    by_sub = {r.subscription: r.read_compacted for r in subscribes(cluster)}
    assert by_sub == {"view": True, "all": False}


async def test_a_compacted_subscription_gets_the_view_and_acks_its_offsets(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    fill(cluster, T, HISTORY[:6])
    cluster.compact(T)
    fill(cluster, T, [*HISTORY[6:], (None, b"y")])  # above the horizon: every message
    view = await client.subscribe(
        T,
        subscription="view",
        read_compacted=True,
        initial_position=InitialPosition.EARLIEST,
        sub_type=SubType.EXCLUSIVE,
    )
    everything = await client.subscribe(T, subscription="all", initial_position=InitialPosition.EARLIEST)
    got = [await view.receive(timeout_s=5) for _ in range(4)]
    assert [(m.offset, m.key, m.payload) for m in got] == [
        (3, "a", b"a2"),
        (5, "c", b"c1"),
        (6, "a", b"a3"),
        (7, None, b"y"),
    ]
    for m in got:
        await view.ack(m)
    await view.flush_acks()
    acked = [o for r in cluster.ack_batches if r.subscription_name == "view" for o in r.topic_offsets]
    assert acked == [3, 5, 6, 7]
    await view.ack_cumulative(got[-1])  # across gaps: everything up to 7
    assert cluster.topics[T].subs["view"].acked >= set(range(8))
    assert [(await everything.receive(timeout_s=5)).offset for _ in range(8)] == list(range(8))


async def test_after_a_move_the_unacked_part_of_the_view_comes_again(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T)
    # Odd offsets share one key; even ones cycle through 7 keys: a view with gaps of all sizes.
    fill(cluster, T, [("odd" if i % 2 else f"k{i % 7}", b"%d" % i) for i in range(40)])
    cluster.compact(T, 30)
    view = sorted(compacted_view(cluster.topics[T].log, 30)) + list(range(30, 40))
    assert len(view) == 18 and view[:8] == [16, 18, 20, 22, 24, 26, 28, 29]
    consumer = await client.subscribe(
        T,
        subscription="s",
        consumer_name="c",
        read_compacted=True,
        initial_position=InitialPosition.EARLIEST,
    )
    first = [await consumer.receive(timeout_s=5) for _ in range(len(view))]
    assert [m.offset for m in first] == view
    acked = first[::2]
    for m in acked:
        await consumer.ack(m)
    await consumer.flush_acks()

    cluster.move(T, 1)
    await wait_until(lambda: subscribes(cluster, 1), timeout_s=5, what="re-subscribe on broker 1")
    cluster.append(T, b"late", key="k9")
    redelivered: list[int] = []
    while 40 not in redelivered:
        m = await consumer.receive(timeout_s=5)
        redelivered.append(m.offset)
        await consumer.ack(m)
    assert redelivered == [m.offset for m in first[1::2]] + [40]
    await consumer.flush_acks()
    assert cluster.topics[T].subs["s"].acked == {*view, 40}
    assert [r.read_compacted for r in subscribes(cluster)] == [True, True]


async def test_every_partition_subscribes_compacted_and_merges_its_view_in_order(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic(T, partitions=3)
    parts = [f"{T}-part-{i}" for i in range(3)]
    for i, part in enumerate(parts):
        fill(cluster, part, [(f"k{j % 3}", b"%d-%d" % (i, j)) for j in range(12)])
        cluster.compact(part, 6 + i)
    consumer = await client.subscribe(
        T, subscription="s", read_compacted=True, initial_position=InitialPosition.EARLIEST
    )
    reqs = subscribes(cluster)
    assert sorted(r.topic_name for r in reqs) == parts
    assert all(r.read_compacted for r in reqs)
    got: dict[str, list[int]] = {p: [] for p in parts}
    for _ in range(sum(12 - (6 + i) + 3 for i in range(3))):
        m = await consumer.receive(timeout_s=5)
        got[m.topic].append(m.offset)
    for i, part in enumerate(parts):
        horizon = 6 + i
        assert got[part] == [horizon - 3, horizon - 2, horizon - 1, *range(horizon, 12)]


async def test_subscribe_many_sends_read_compacted_to_every_topic(
    client: DanubeClient, cluster: FakeCluster
) -> None:
    cluster.create_topic("/default/a")
    cluster.create_topic("/default/b", partitions=2)
    listed = await client.subscribe_many(["/default/a", "/default/b"], subscription="l", read_compacted=True)
    cluster.create_topic("/default/orders-1")
    pattern = await client.subscribe_many(
        pattern="/default/orders-.*", subscription="p", read_compacted=True, refresh_interval_s=0.05
    )
    cluster.create_topic("/default/orders-2")  # found later: subscribed with the same flag
    await wait_until(lambda: len(pattern.topics) == 2, timeout_s=10, what="the new topic")
    reqs = subscribes(cluster)
    assert sorted(r.topic_name for r in reqs) == [
        "/default/a",
        "/default/b-part-0",
        "/default/b-part-1",
        "/default/orders-1",
        "/default/orders-2",
    ]
    assert all(r.read_compacted for r in reqs)
    await listed.close()
    await pattern.close()


# ---------------------------------------------------------------- readers
async def test_a_reader_asks_for_the_view_on_every_attach(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    fill(cluster, T, HISTORY)  # 0..6
    cluster.compact(T, 6)  # view below 6: {3, 5}; then 6
    reader = await client.create_reader(T, start="earliest", read_compacted=True, reader_name="r")
    assert reader.read_compacted
    got = [await reader.receive(timeout_s=5) for _ in range(3)]
    assert [(m.offset, m.payload) for m in got] == [(3, b"a2"), (5, b"c1"), (6, b"a3")]
    assert reader.next_offsets == {T: 7}

    # Stored while the reader's stream is not woken, then compacted: the re-attach (asking for
    # offset 7) lands in the compacted part, where only d's newest (8) is left.
    for key, payload in [("d", b"d1"), ("d", b"d2"), (None, b"y")]:
        cluster.append(T, payload, key=key, notify=False)
    cluster.compact(T)  # horizon 10
    cluster.move(T, 1)
    await wait_until(lambda: subscribes(cluster, 1), timeout_s=5, what="the reader re-attaches")
    cluster.append(T, b"e1", key="e")
    after = [await reader.receive(timeout_s=5) for _ in range(2)]
    assert [(m.offset, m.payload) for m in after] == [(8, b"d2"), (10, b"e1")]
    assert reader.skipped == {}, "the SDK does not count the view's gaps as skipped offsets"

    first, again = subscribes(cluster)
    assert first.read_compacted and first.reader == StartPosition.EARLIEST.to_proto()
    assert again.read_compacted and again.reader == pb.ReaderStart(offset=7)
    await reader.close()


async def test_a_reader_without_the_flag_reads_everything(client: DanubeClient, cluster: FakeCluster) -> None:
    cluster.create_topic(T)
    fill(cluster, T, HISTORY)
    cluster.compact(T)
    reader = await client.create_reader(T, start="earliest")
    assert [(await reader.receive(timeout_s=5)).offset for _ in range(7)] == list(range(7))
    assert not subscribes(cluster)[0].read_compacted
    await reader.close()


async def test_a_reader_takes_a_gappy_view_in_order_and_assembles_chunks_across_gaps() -> None:
    """Pure: frames as a compacted view delivers them (offsets with gaps, a chunked message
    whose chunks are apart), and a re-attach that resends some of them."""
    queue = ReceiveQueue(100, partitions=1)
    part = TopicConsumer(
        None,  # type: ignore[arg-type]  # no calls are made
        topic=T,
        name="r",
        subscription="r",
        opts=ConsumerOptions(read_compacted=True),
        client_opts=ClientOptions(),
        queue=queue,
        reader=StartPosition.EARLIEST,
    )

    def msg(offset: int, chunk: int | None = None) -> pb.StreamMessage:
        m = pb.StreamMessage(msg_id=pb.MsgID(topic_offset=offset), payload=b"%d" % offset, routing_key="k")
        if chunk is not None:
            m.chunk.CopyFrom(pb.MessageChunk(message_uuid="u", index=chunk, count=2, total_size=3))
        return m

    part.reader_next = 0
    await part._on_frame(pb.MessageBatch(messages=[msg(3), msg(7, chunk=0), msg(9)]))
    await part._on_frame(pb.MessageBatch(messages=[msg(9), msg(12, chunk=1), msg(20)]))  # 9 again
    got = queue.take(100)
    assert [m.offset for m in got] == [3, 9, 7, 20]  # the chunked message once complete, at 7
    assert got[2].chunk_offsets == (7, 12) and got[2].payload == b"712"
    assert part.reader_next == 21
    assert part._reader_start() == pb.ReaderStart(offset=21)


# ---------------------------------------------------------------- blocking SDK
async def test_the_blocking_sdk_passes_read_compacted(cluster: FakeCluster) -> None:
    from danube_sdk.sync import DanubeClient as SyncClient

    cluster.create_topic(T)

    def work() -> bool:
        with SyncClient(cluster.service_url, health_check_interval_s=0, rpc_timeout_s=5) as c:
            c.subscribe(T, subscription="s", read_compacted=True)
            c.subscribe_many([T], subscription="m", read_compacted=True)
            reader = c.create_reader(T, start="earliest", read_compacted=True)
            return reader.read_compacted

    # The blocking client runs on its own loop thread; this loop serves the fake meanwhile.
    assert await asyncio.to_thread(work)
    reqs = subscribes(cluster)
    assert len(reqs) == 3 and all(r.read_compacted for r in reqs)
    assert [r.HasField("reader") for r in reqs] == [False, False, True]


# ---------------------------------------------------------------- danube-cli
def parse(*argv: str) -> argparse.Namespace:
    return build_parser({}).parse_args(list(argv))


def test_cli_read_compacted_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("consume", "-m", "s").read_compacted is False
    assert parse("consume", "-m", "s", "--read-compacted").read_compacted is True
    assert parse("consume", "--reader", "--start", "earliest", "--read-compacted").read_compacted is True
    with pytest.raises(SystemExit):
        parse("consume", "--help")
    shown = " ".join(capsys.readouterr().out.split())
    assert "--read-compacted read a reliable topic's compacted view" in shown


@pytest.mark.parametrize("mode", ["subscription", "reader"])
async def test_cli_consumes_the_compacted_view(cluster: FakeCluster, mode: str) -> None:
    cluster.create_topic(T)
    fill(cluster, T, HISTORY)
    cluster.compact(T, 6)
    how = ["-m", "s", "--initial-position", "earliest"] if mode == "subscription" else ["--reader"]
    if mode == "reader":
        how += ["--start", "earliest"]
    args = parse(
        "consume", "-s", cluster.service_url, "-t", T, *how, "--read-compacted", "-c", "3", "--output", "json"
    )
    out, err = io.StringIO(), io.StringIO()
    assert await run_consume(args, out=out, err=err, stop=asyncio.Event()) == 0
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["offset"], d["payload"]) for d in docs] == [(3, "a2"), (5, "c1"), (6, "a3")]
    assert "(compacted view)" in err.getvalue()
    req = subscribes(cluster)[0]
    assert req.read_compacted and req.HasField("reader") == (mode == "reader")
