"""Readers, the pure parts: start positions, the CLI's --reader/--start, dropping duplicates
after a re-attach; and the blocking SDK's loop thread (no network)."""

from __future__ import annotations

import argparse
import asyncio
import threading
from datetime import UTC, datetime

import pytest

from danube_common.errors import InvalidArgument, TopicNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_sdk import StartPosition
from danube_sdk.cli.produce_consume import build_parser
from danube_sdk.errors import ClientClosed
from danube_sdk.options import ClientOptions, ConsumerOptions
from danube_sdk.receive_queue import ReceiveQueue
from danube_sdk.sync._runner import LoopThread, call
from danube_sdk.topic_consumer import TopicConsumer

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("earliest", StartPosition("earliest")),
        ("LATEST", StartPosition("latest")),
        (7, StartPosition("offset", 7)),
        (datetime(2026, 1, 1, tzinfo=UTC), StartPosition("timestamp", 1_767_225_600_000)),
        (StartPosition.timestamp(5), StartPosition("timestamp", 5)),
    ],
)
def test_start_position_of(given: object, expected: StartPosition) -> None:
    assert StartPosition.of(given) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", StartPosition.EARLIEST),
        ("latest", StartPosition.LATEST),
        ("42", StartPosition.offset(42)),
        ("@2026-01-01T00:00:00Z", StartPosition.timestamp(1_767_225_600_000)),
        ("@2026-01-01T01:00:00+01:00", StartPosition.timestamp(1_767_225_600_000)),
    ],
)
def test_start_position_parse(text: str, expected: StartPosition) -> None:
    assert StartPosition.parse(text) == expected


@pytest.mark.parametrize("bad", ["middle", "-3", "@yesterday", ""])
def test_bad_start_positions_say_what_is_allowed(bad: str) -> None:
    with pytest.raises(InvalidArgument, match=r"earliest|ISO"):
        StartPosition.parse(bad)
    with pytest.raises(InvalidArgument):
        StartPosition.of(True)  # type: ignore[arg-type]


def test_start_position_to_proto() -> None:
    assert StartPosition.EARLIEST.to_proto().WhichOneof("position") == "earliest"
    assert StartPosition.LATEST.to_proto().WhichOneof("position") == "latest"
    assert StartPosition.offset(3).to_proto().offset == 3
    assert StartPosition.timestamp(9).to_proto().publish_time_ms == 9


def parse(*argv: str) -> argparse.Namespace:
    return build_parser({}).parse_args(list(argv))


def test_cli_reader_arguments() -> None:
    args = parse("consume", "--reader", "--start", "@2026-01-01T00:00:00Z", "-n", "audit")
    assert args.reader and args.start == StartPosition.timestamp(1_767_225_600_000)
    assert args.subscription is None and args.consumer_name == "audit"
    assert parse("consume", "--reader").start is None  # latest


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["consume", "--reader", "-m", "s"], "not allowed with argument"),
        (["consume"], "one of the arguments -m/--subscription --reader is required"),
        (["consume", "-m", "s", "--start", "earliest"], "--start goes with --reader"),
        (["consume", "--reader", "--start", "soon"], "not a start position"),
        (["consume", "--reader", "--pattern", "/default/a.*"], "drop --topics/--pattern"),
    ],
)
def test_cli_reader_usage_errors(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    from danube_sdk.cli.produce_consume import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


async def test_a_reader_drops_what_it_already_received() -> None:
    queue = ReceiveQueue(100, partitions=1)
    part = TopicConsumer(
        None,  # type: ignore[arg-type]  # no calls are made
        topic="/default/t",
        name="r",
        subscription="r",
        opts=ConsumerOptions(),
        client_opts=ClientOptions(),
        queue=queue,
        reader=StartPosition.EARLIEST,
    )

    def frame(*offsets: int) -> pb.MessageBatch:
        return pb.MessageBatch(
            messages=[pb.StreamMessage(msg_id=pb.MsgID(topic_offset=o), payload=b"%d" % o) for o in offsets]
        )

    part.reader_next = 5  # as the broker answered: the reader starts at 5
    await part._on_frame(frame(5, 6, 7))
    await part._on_frame(frame(6, 7, 8, 9))  # a re-attach resent 6 and 7
    await part._on_frame(frame(4))
    assert [m.offset for m in queue.take(100)] == [5, 6, 7, 8, 9]
    assert part.reader_next == 10
    assert part._reader_start() == pb.ReaderStart(offset=10), "a re-attach asks for the next offset"


def test_the_loop_thread_starts_lazily_and_stops_with_its_last_user() -> None:
    lt = LoopThread("test-loop")
    assert not lt.running and lt.thread is None
    loop = lt.acquire()
    thread = lt.thread
    assert thread is not None and thread.daemon and thread.is_alive()
    assert lt.acquire() is loop
    lt.release()
    assert thread.is_alive()

    async def where() -> str:
        return threading.current_thread().name

    assert call(loop, where()) == "test-loop"

    async def fail() -> None:
        raise TopicNotFound("nope")

    with pytest.raises(TopicNotFound, match="nope"):  # the typed error, raised in this thread
        call(loop, fail())

    async def nested() -> None:
        call(loop, asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="own event loop thread"):
        call(loop, nested())
    lt.release()
    thread.join(5)
    assert not thread.is_alive() and not lt.running and loop.is_closed()
    with pytest.raises(ClientClosed):  # a wrapper kept after its client closed
        call(loop, where())
