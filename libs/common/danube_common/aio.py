"""asyncio helpers shared by the services and the SDK."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> BaseException | None:
    """Cancel ``tasks`` (None entries are skipped) and wait until every one has ended. Returns
    the first exception one of them ended with other than its cancellation (not raised: the
    caller decides; every outcome is marked as seen), None if none did.

    Use it instead of ``task.cancel(); with suppress(CancelledError): await task``: that also
    swallows a cancellation of the *caller* arriving while it waits, so a task cancelled in the
    middle of such a clean-up goes on running (a supervisor loop would then start over, and
    whoever cancelled it waits forever). Here the caller's cancellation is raised, and the
    cancelled tasks end on their own."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    pending = {t for t in live if not t.done()}
    if pending:
        await asyncio.wait(pending)
    first: BaseException | None = None
    for t in live:
        if t.cancelled():
            continue
        exc = t.exception()
        if exc is not None and first is None:
            first = exc
    return first


class LoopEvent:
    """An ``asyncio.Event`` for hot paths: the loop is looked up once, at the first wait, and
    kept (``asyncio.Event`` asks for the running loop on every wait, which on CPython 3.11
    costs a ``getpid()`` system call). Also waits with a deadline without ``asyncio.timeout``
    (:meth:`wait_until`). Bound to the loop of its first wait and used from that loop's thread
    only; unlike ``asyncio.Event`` a wait from another loop is not detected (it would never
    wake), so an event belongs to objects that live on one loop."""

    __slots__ = ("_loop", "_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[bool]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(True)

    def clear(self) -> None:
        self._set = False

    def _future(self) -> asyncio.Future[bool]:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(fut)
        return fut

    async def wait(self) -> bool:
        """Until set (at once if it is); True."""
        if self._set:
            return True
        fut = self._future()
        try:
            return await fut
        finally:
            self._waiters.remove(fut)

    async def wait_until(self, deadline: float) -> bool:
        """Until set or the loop's clock reaches ``deadline``: whether it was set."""
        if self._set:
            return True
        fut = self._future()
        assert self._loop is not None
        timer = self._loop.call_at(deadline, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            self._waiters.remove(fut)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
