"""danube_common.aio.cancel_and_wait: tasks end, outcomes are reported, the caller's own
cancellation is never swallowed (the SDK's supervisors hung on that: see the docstring)."""

from __future__ import annotations

import asyncio

import pytest

from danube_common.aio import cancel_and_wait
from danube_sdk.streams import race

pytestmark = pytest.mark.unit


async def slow_to_stop(release: asyncio.Event, stopping: asyncio.Event) -> None:
    """Ends only after ``release`` once cancelled (a task with clean-up of its own)."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        stopping.set()
        await release.wait()
        raise


async def test_tasks_end_and_the_first_error_is_returned_not_raised() -> None:
    async def boom() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(boom())
    await asyncio.sleep(0)
    sleeper = asyncio.create_task(asyncio.sleep(3600))
    exc = await cancel_and_wait(sleeper, None, failed)
    assert isinstance(exc, ValueError) and sleeper.cancelled()
    assert await cancel_and_wait() is None
    assert await cancel_and_wait(sleeper) is None  # already ended: nothing to do


async def test_the_callers_cancellation_while_it_waits_is_raised() -> None:
    release, stopping = asyncio.Event(), asyncio.Event()
    child = asyncio.create_task(slow_to_stop(release, stopping))
    await asyncio.sleep(0)
    went_on = False

    async def cleanup() -> None:
        nonlocal went_on
        await cancel_and_wait(child)
        went_on = True  # what `with suppress(CancelledError): await child` would get to

    outer = asyncio.create_task(cleanup())
    await stopping.wait()  # the child is cancelled and busy stopping; the caller waits for it
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert not went_on and not child.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await child


async def test_a_race_cancelled_while_it_cleans_up_does_not_start_over() -> None:
    """A supervisor loop around race(): closing it (cancelling its task) while the race stops
    its coroutines must end the loop, not let it start another race (which then runs forever)."""
    release, stopping = asyncio.Event(), asyncio.Event()
    races = 0

    async def fails() -> None:
        raise ConnectionError("the stream broke")

    async def supervisor() -> None:
        nonlocal races
        while True:
            races += 1
            try:
                await race({"reader": fails(), "writer": slow_to_stop(release, stopping)}, {})
            except ConnectionError:
                await asyncio.sleep(0)  # reconnect

    task = asyncio.create_task(supervisor())
    await stopping.wait()  # the reader failed; the race is cancelling the writer
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert races == 1
