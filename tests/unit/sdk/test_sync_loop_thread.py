"""The blocking producer refuses, instead of hanging, the calls that would wait for the SDK's
loop while running on that loop's own thread (a callback of the asyncio API, say): `send`,
`send_many`, `flush`, and `send_async` once its queue is full. Against the fake cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

import pytest

from danube_sdk.sync import DanubeClient as SyncClient
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

T = "/default/sync-loop"


def on_sdk_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the SDK's loop thread; its result, or its exception raised here."""

    async def run() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=5)


async def test_blocking_sends_on_the_loop_thread_raise(cluster: FakeCluster) -> None:
    cluster.create_topic(T)

    def work() -> list[str]:
        refused: list[str] = []
        with SyncClient(cluster.service_url, health_check_interval_s=0, rpc_timeout_s=5) as c:
            producer = c.create_producer(T, max_queued=2)
            loop = c._loop
            for name, call in [
                ("send", lambda: producer.send(b"x")),
                ("send_many", lambda: producer.send_many([b"x"])),
                ("flush", producer.flush),
            ]:
                with pytest.raises(RuntimeError, match="own event loop thread"):
                    on_sdk_loop(loop, call)
                refused.append(name)
            # send_async is fine there while the queue has room (the pump runs after this
            # callback returns), and refused once waiting for room would block the loop.
            futs: list[concurrent.futures.Future[Any]] = on_sdk_loop(
                loop, lambda: [producer.send_async(b"a"), producer.send_async(b"b")]
            )
            with pytest.raises(RuntimeError, match="own event loop thread"):
                on_sdk_loop(loop, lambda: [producer.send_async(b"c") for _ in range(5)])
            refused.append("send_async when full")
            assert all(f.result(timeout=5) for f in futs)  # the two queued ones were sent
            assert producer.send(b"from a thread of its own").offset >= 0
        return refused

    refused = await asyncio.to_thread(work)
    assert refused == ["send", "send_many", "flush", "send_async when full"]
