"""The service's wait loop: a dead cluster-view loop must stop the process, loudly."""

from __future__ import annotations

import asyncio

import pytest

from danube_lookup.app import _wait_for_stop

pytestmark = pytest.mark.unit


async def test_stop_event_ends_the_wait() -> None:
    stop = asyncio.Event()
    loop_task = asyncio.create_task(asyncio.Event().wait())
    waiter = asyncio.create_task(_wait_for_stop(stop, loop_task))
    stop.set()
    await asyncio.wait_for(waiter, timeout=5)
    assert not loop_task.done()
    loop_task.cancel()


async def test_a_dead_watch_loop_is_fatal() -> None:
    async def crash() -> None:
        raise OSError("watch broke")

    loop_task = asyncio.create_task(crash())
    with pytest.raises(RuntimeError, match="watch loop ended unexpectedly") as info:
        await asyncio.wait_for(_wait_for_stop(asyncio.Event(), loop_task), timeout=5)
    assert isinstance(info.value.__cause__, OSError)
