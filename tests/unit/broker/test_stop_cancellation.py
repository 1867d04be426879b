"""Stopping a worker while the stopper itself is cancelled: the stopper's cancellation wins.

The dead-letter worker stands for every ``aclose`` that stops a task of its own (they all use
``danube_common.aio.cancel_and_wait``; tests/unit/common/test_cancel_hygiene.py keeps it so):
with ``task.cancel(); with suppress(CancelledError): await task`` the stopper's own cancellation,
arriving while the task winds down, was swallowed and the stopper went on as if not cancelled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from danube_broker.dispatch.reliable.dead_letter import DeadLetterWorker
from danube_common.pb import DanubeApi_pb2 as pb

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


class _SlowToStopSink:
    """A publish that, once cancelled, takes until ``release`` to end."""

    def __init__(self) -> None:
        self.publishing = asyncio.Event()
        self.release = asyncio.Event()

    async def publish(self, topic: str, msg: pb.StreamMessage) -> None:
        self.publishing.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.release.wait()
            raise


def _engine() -> SimpleNamespace:
    pending = SimpleNamespace(msg=pb.StreamMessage(payload=b"poison"), deliveries=3, reason="nack")
    return SimpleNamespace(
        sub=SimpleNamespace(topic_name="/default/t"),
        name="sub",
        policy=SimpleNamespace(dead_letter_topic="/default/t-dlq"),
        dead_lettering=lambda offset: pending,
    )


async def test_a_cancelled_stopper_ends_cancelled_and_the_worker_still_stops() -> None:
    sink = _SlowToStopSink()
    worker = DeadLetterWorker(_engine(), sink)  # type: ignore[arg-type]
    worker.submit(SimpleNamespace(offset=7))  # type: ignore[arg-type]
    await asyncio.wait_for(sink.publishing.wait(), 5)
    inner = worker._task
    assert inner is not None

    after_stop: list[str] = []

    async def stopper() -> None:
        await worker.aclose()
        after_stop.append("went on")  # what a swallowed cancellation lets happen

    stopping = asyncio.create_task(stopper())
    await asyncio.sleep(0)  # the stopper waits on the worker's task now
    await asyncio.sleep(0)
    stopping.cancel()
    await asyncio.wait({stopping}, timeout=5)
    assert stopping.cancelled()
    assert after_stop == []
    sink.release.set()  # the worker's task ends on its own
    await asyncio.wait({inner}, timeout=5)
    assert inner.cancelled()
