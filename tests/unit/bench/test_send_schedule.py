"""The harness's fixed-rate send schedule: producers of one process are spread over the
interval (``phase``), as OMB's per-worker rate limiter spreads its producers' sends, instead of
all sending at the same instants."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.drivers.base import ProducerHandle
from bench.harness.clients import _Meter, _produce

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


class Recorder(ProducerHandle):
    """Keeps the intended send time each payload is stamped with."""

    def __init__(self) -> None:
        self.stamps: list[int] = []

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        self.stamps.append(int.from_bytes(payload[:8], "little"))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_producers_are_spread_over_the_interval() -> None:
    rate, n = 20.0, 4  # 50 ms apart per producer; 4 producers: 12.5 ms apart from each other
    interval_ns = 1e9 / rate
    producers = [Recorder() for _ in range(n)]
    stop = asyncio.Event()
    meter = _Meter()
    runs = [
        _produce(p, meter, rate=rate, size=16, max_outstanding=10, limit=3, stop=stop, phase=i / n)
        for i, p in enumerate(producers)
    ]
    await asyncio.gather(*runs)
    assert all(len(p.stamps) == 3 for p in producers)
    for p in producers:  # each producer keeps its own rate
        assert all(abs((b - a) - interval_ns) <= 1 for a, b in itertools.pairwise(p.stamps))
    firsts = [p.stamps[0] for p in producers]
    gaps = [(b - a) / interval_ns for a, b in itertools.pairwise(firsts)]
    assert all(0.15 < g < 0.35 for g in gaps), gaps  # a quarter of the interval apart, not together
