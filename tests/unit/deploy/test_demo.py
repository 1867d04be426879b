"""The demo against a fake in-memory SDK: order of calls, counting, and the failure paths."""

from __future__ import annotations

import asyncio
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from danube_local import demo

pytestmark = pytest.mark.unit


@dataclass
class Msg:
    payload: bytes
    properties: dict[str, str]
    message_id: Any


@dataclass
class Broker:
    """Everything produced goes to every consumer subscribed at the time (like a real topic)."""

    queues: list[asyncio.Queue[Msg]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    drop_every: int = 0
    stale: list[Msg] = field(default_factory=list)
    offset: int = 0
    raise_on_timeout: Exception | None = None


def fake_sdk(broker: Broker) -> types.ModuleType:
    class SubType:
        EXCLUSIVE = "exclusive"

    class Producer:
        async def send(self, payload: bytes, properties: dict[str, str] | None = None) -> Any:
            broker.calls.append("send")
            mid = types.SimpleNamespace(offset=broker.offset)
            broker.offset += 1
            if broker.drop_every and broker.offset % broker.drop_every == 0:
                return mid
            for q in broker.queues:
                q.put_nowait(Msg(payload, dict(properties or {}), mid))
            return mid

        async def close(self) -> None:
            broker.calls.append("producer.close")

    class Consumer:
        def __init__(self) -> None:
            self.q: asyncio.Queue[Msg] = asyncio.Queue()
            for m in broker.stale:
                self.q.put_nowait(m)
            broker.queues.append(self.q)

        async def receive(self, timeout_s: float) -> Msg | None:
            if self.q.empty() and broker.raise_on_timeout:
                raise broker.raise_on_timeout
            try:
                return await asyncio.wait_for(self.q.get(), timeout=0.05)  # keep the failing case fast
            except TimeoutError:
                return None

        async def ack(self, msg: Msg) -> None:
            broker.acked.append(msg.message_id.offset)

        async def close(self) -> None:
            broker.calls.append("consumer.close")

    class DanubeClient:
        def __init__(self, url: str) -> None:
            broker.calls.append(f"client {url}")

        async def subscribe(self, topic: str, *, subscription: str, sub_type: str) -> Consumer:
            broker.calls.append(f"subscribe {topic} {subscription} {sub_type}")
            return Consumer()

        async def create_producer(self, topic: str) -> Producer:
            broker.calls.append(f"create_producer {topic}")
            return Producer()

        async def close(self) -> None:
            broker.calls.append("client.close")

    mod = types.ModuleType("danube_sdk")
    mod.DanubeClient = DanubeClient  # type: ignore[attr-defined]
    mod.SubType = SubType  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    b = Broker()
    monkeypatch.setitem(sys.modules, "danube_sdk", fake_sdk(b))
    return b


async def test_demo_round_trip(broker: Broker) -> None:
    out: list[str] = []
    result = await demo.run_demo("http://127.0.0.1:6650", out=out.append, count=5)
    assert result.ok and (result.produced, result.consumed) == (5, 5)
    assert broker.calls[:3] == [
        "client http://127.0.0.1:6650",
        "create_producer /default/demo",
        "subscribe /default/demo demo-sub exclusive",
    ], "the producer creates the topic; the subscription exists before the first send"
    assert broker.calls.index("send") > broker.calls.index("subscribe /default/demo demo-sub exclusive")
    assert broker.calls[-3:] == ["producer.close", "consumer.close", "client.close"]
    assert broker.acked == [0, 1, 2, 3, 4]
    assert sum(line.startswith("  produced #") for line in out) == 5
    assert sum(line.startswith("  consumed offset=") for line in out) == 5
    assert result.summary().startswith("demo: produced 5, consumed 5 in ")


async def test_messages_of_earlier_runs_are_skipped(broker: Broker) -> None:
    broker.stale = [Msg(b"old", {"demo-run": "earlier"}, types.SimpleNamespace(offset=99))]
    out: list[str] = []
    result = await demo.run_demo("u", out=out.append, count=3)
    assert result.ok and result.consumed == 3
    assert any("earlier run" in line for line in out)


async def test_lost_message_fails_the_demo(broker: Broker) -> None:
    broker.drop_every = 3
    result = await demo.run_demo("u", out=lambda _: None, count=5, receive_timeout_s=0.05)
    assert not result.ok
    assert result.produced == 5 and result.consumed == 4
    assert result.problems[0].startswith("received 4 of 5 messages (nothing more within")


async def test_receive_error_ends_the_demo_with_a_reason(broker: Broker) -> None:
    class Timeout(Exception):
        pass

    broker.drop_every = 2
    broker.raise_on_timeout = Timeout("no message within 10 s")
    result = await demo.run_demo("u", out=lambda _: None, count=4)
    assert not result.ok and result.consumed == 2
    assert result.problems == ["received 2 of 4 messages (Timeout: no message within 10 s)"]


def test_sync_wrapper_prints_summary(broker: Broker) -> None:
    out: list[str] = []
    assert demo.run_demo_sync("u", out=out.append, count=2) is True
    assert out[-1].startswith("demo: produced 2, consumed 2 in ")


def test_missing_sdk_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "danube_sdk", None)
    with pytest.raises(demo.DemoError, match="danube_sdk"):
        demo.load_sdk()
    out: list[str] = []
    assert demo.run_demo_sync("u", out=out.append) is False
    assert out[-1].startswith("demo FAILED:") and "quickstart" in out[-1]


def test_incomplete_sdk_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "danube_sdk", types.ModuleType("danube_sdk"))
    with pytest.raises(demo.DemoError, match="DanubeClient"):
        demo.load_sdk()


@pytest.mark.parametrize(
    ("received", "problem"),
    [
        ([b"a", b"b", b"c"], None),
        ([b"a", b"c"], None),  # a loss is reported by the receive loop, not here
        ([b"b", b"a"], "out of order"),
        ([b"a", b"a"], "more than once"),
        ([b"a", b"x"], "never sent"),
    ],
)
def test_check_delivery(received: list[bytes], problem: str | None) -> None:
    problems = demo.check_delivery([b"a", b"b", b"c"], received)
    assert (problems == []) if problem is None else (problem in problems[0])
