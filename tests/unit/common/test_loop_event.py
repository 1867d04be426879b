"""danube_common.aio.LoopEvent: asyncio.Event's behaviour (the SDK's hot paths use it), a wait
with a deadline, and the running loop looked up once, not on every wait."""

from __future__ import annotations

import asyncio

import pytest

from danube_common import aio
from danube_common.aio import LoopEvent

pytestmark = pytest.mark.unit


async def test_set_wakes_every_waiter_and_a_set_event_does_not_block() -> None:
    ev = LoopEvent()
    waiters = [asyncio.create_task(ev.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters), "not set: they wait"
    ev.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert ev.is_set() and await ev.wait() is True, "set: returns at once"
    ev.clear()
    late = asyncio.create_task(ev.wait())
    await asyncio.sleep(0)
    assert not late.done() and not ev.is_set(), "cleared: blocks again"
    ev.set()
    assert await late is True


async def test_a_set_then_clear_before_the_waiter_runs_still_wakes_it() -> None:
    """As asyncio.Event: the waiter was woken by the set; a clear after it does not undo that."""
    ev = LoopEvent()
    waiter = asyncio.create_task(ev.wait())
    await asyncio.sleep(0)
    ev.set()
    ev.clear()
    assert await asyncio.wait_for(waiter, 5) is True


async def test_wait_until_returns_false_at_the_deadline_and_true_when_set() -> None:
    loop = asyncio.get_running_loop()
    ev = LoopEvent()
    t0 = loop.time()
    assert await ev.wait_until(t0 + 0.05) is False
    assert loop.time() - t0 >= 0.045
    waiter = asyncio.create_task(ev.wait_until(loop.time() + 60))
    await asyncio.sleep(0)
    ev.set()
    assert await asyncio.wait_for(waiter, 5) is True
    assert await ev.wait_until(loop.time() - 1) is True, "already set: True even past the deadline"
    assert ev._waiters == []


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    ev = LoopEvent()
    loop = asyncio.get_running_loop()
    for waiting in (ev.wait(), ev.wait_until(loop.time() + 60)):
        task = asyncio.create_task(waiting)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ev._waiters == []
    ev.set()  # nothing left to wake
    assert ev.is_set()


async def test_the_running_loop_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio.Event asks for the running loop on every wait (a getpid() system call on
    CPython 3.11); LoopEvent asks at its first wait only."""
    calls = []
    real = asyncio.get_running_loop

    def counting() -> asyncio.AbstractEventLoop:
        calls.append(1)
        return real()

    monkeypatch.setattr(aio.asyncio, "get_running_loop", counting)
    ev = LoopEvent()
    for _ in range(5):
        waiter = asyncio.create_task(ev.wait())
        await asyncio.sleep(0)
        ev.set()
        await waiter
        ev.clear()
    assert len(calls) == 1
