"""Builders shared by the broker unit tests: messages, configs, a settable clock, stub consumers."""

from __future__ import annotations

from typing import Any

from danube_broker.config import BrokerConfig
from danube_broker.dispatch.key_shared import compile_key_filters
from danube_common.pb import DanubeApi_pb2 as pb

BROKER_URL = "http://127.0.0.1:6651"


def msgs(n: int, *, start: int = 0, key: str | None = None, producer: str = "p", size: int = 1) -> list[Any]:
    out = []
    for i in range(start, start + n):
        m = pb.StreamMessage(payload=bytes([i % 256]) * size, producer_name=producer, publish_time=1)
        m.attributes["i"] = str(i)
        if key is not None:
            m.routing_key = key
        out.append(m)
    return out


def index(m: Any) -> int:
    return int(m.attributes["i"])


def config(**overrides: Any) -> BrokerConfig:
    base: dict[str, Any] = {"broker_id": "b1", "etcd": {"cluster": "unit"}}
    base.update(overrides)
    return BrokerConfig.model_validate(base)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class StubConsumer:
    """What routers see of a consumer: a name, free queue space and key filters."""

    def __init__(self, name: str, *, free: int = 1_000_000, filters: tuple[str, ...] = ()) -> None:
        self.name = name
        self.free = free
        self._re = compile_key_filters(filters)

    def accepts(self, key: str) -> bool:
        return self._re is None or self._re.match(key) is not None

    def __repr__(self) -> str:
        return f"StubConsumer({self.name})"
