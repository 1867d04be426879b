"""Watch-fed caches: the follow loop, and waiting for a condition on the cache.

A cache lists its keys once, then follows a watch from the listing's revision + 1, so no change
is missed; after a compaction (or a failed watch) it lists again and resumes from there.
:func:`follow` is that loop; :class:`Waiters` lets readers wait until the cache satisfies a
predicate, woken on every applied change (no polling).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from danube_common.errors import DanubeError
from danube_common.metadata.store import MetadataStore, WatchCompacted, WatchEvent

log = logging.getLogger(__name__)


async def follow(
    store: MetadataStore,
    prefix: str,
    start: int,
    *,
    apply: Callable[[WatchEvent], None],
    reload: Callable[[], Awaitable[int]],
    what: str,
    max_backoff_s: float = 5.0,
) -> None:
    """Apply every event under ``prefix`` from revision ``start`` on, forever.

    ``reload()`` re-lists and returns the listing's revision (after a compaction or a failed
    watch). Returns only when the store's watch ends normally (the store was closed).
    """
    backoff_s = 0.1
    while True:
        try:
            async for ev in store.watch_prefix(prefix, start_revision=start):
                apply(ev)
                start = ev.revision + 1
                backoff_s = 0.1
            return
        except WatchCompacted:
            log.warning("%s: watch compacted; re-reading", what)
        except DanubeError as exc:
            log.warning("%s: watch failed (%s); retrying in %.1fs", what, exc, backoff_s)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, max_backoff_s)
        try:
            start = await reload() + 1
        except DanubeError as exc:
            log.warning("%s: could not re-read (%s); retrying", what, exc)


class Waiters:
    """Readers waiting for the cache to change."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def wake(self) -> None:
        """Call after every change applied to the cache."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds (checked now and after each change); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return predicate()
        return True
