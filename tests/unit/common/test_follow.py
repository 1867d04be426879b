"""Waiting on a watch-fed cache: woken by changes, bounded by a timeout, no polling."""

from __future__ import annotations

import asyncio

import pytest

from danube_common.metadata.follow import Waiters

pytestmark = pytest.mark.unit


async def test_wait_for_is_woken_by_the_change_that_makes_it_true() -> None:
    w = Waiters()
    state = {"n": 0}
    waiter = asyncio.create_task(w.wait_for(lambda: state["n"] >= 2, timeout_s=5))
    await asyncio.sleep(0)
    state["n"] = 1
    w.wake()
    await asyncio.sleep(0)
    assert not waiter.done()  # woken, re-checked, still false: waits again
    state["n"] = 2
    w.wake()
    assert await waiter is True


async def test_wait_for_returns_at_once_when_already_true_and_false_on_timeout() -> None:
    w = Waiters()
    assert await w.wait_for(lambda: True, timeout_s=0) is True
    assert await w.wait_for(lambda: False, timeout_s=0.01) is False
