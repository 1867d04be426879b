"""Watch-fed caches: the follow loop, waiting for a condition on the cache, and their base class.

A cache lists its keys once, then follows a watch from the listing's revision + 1, so no change
is missed; after a compaction (or a failed watch) it lists again and resumes from there.
:func:`follow` is that loop; :class:`Waiters` lets readers wait until the cache satisfies a
predicate, woken on every applied change (no polling); :class:`WatchedCache` is a cache built
on both, which subclasses fill by saying what a key's value means (``_put``/``_delete``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence

from danube_common.aio import cancel_and_wait
from danube_common.errors import DanubeError
from danube_common.metadata.store import KeyValue, MetadataStore, WatchCompacted, WatchEvent

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


class WatchedCache:
    """A local copy of the keys under ``prefix``, fed by one watch.

    :meth:`start` lists the keys (under each of :meth:`_listed_prefixes`; the watch starts
    after the smallest listing revision, so a change between two listings is seen again,
    harmlessly: every entry is "the key's latest value"), then follows the watch from there;
    after a compaction it lists again. Subclasses keep their own dictionaries:

    - :meth:`_reset` empties them before a listing;
    - :meth:`_put` / :meth:`_delete` apply one key (``revision``: its mod revision, or the
      event's); a malformed value raises KeyError/ValueError/TypeError and is skipped, loudly;
    - :meth:`_changed` runs after each listing and each applied event (derived indexes).

    ``revision`` is the last revision applied: a writer that must read its own write waits for
    its revision (:meth:`wait_revision`).
    """

    def __init__(self, store: MetadataStore, prefix: str, *, what: str) -> None:
        self._store = store
        self._prefix = prefix
        self._what = what
        self.revision = 0
        self._waiters = Waiters()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ for subclasses
    def _listed_prefixes(self) -> Sequence[str]:
        """What :meth:`start` lists (default: the watched prefix)."""
        return (self._prefix,)

    def _reset(self) -> None:
        raise NotImplementedError

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        raise NotImplementedError

    def _delete(self, key: str) -> None:
        raise NotImplementedError

    def _changed(self) -> None:
        """After each listing and each applied event."""

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        rev = await self._load()
        self._task = asyncio.create_task(self._follow(rev + 1), name=self._what.replace(" ", "-"))

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The watch loop, for supervisors: it only ends by failing."""
        return self._task

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    # ------------------------------------------------------------------ listing and following
    async def _load(self) -> int:
        listings = [await self._store.get_prefix(prefix) for prefix in self._listed_prefixes()]
        self._reset()
        for kvs, _ in listings:
            for kv in kvs:
                self._safely(kv.key, functools.partial(self._put, kv.key, kv, kv.mod_revision))
        self.revision = min(rev for _, rev in listings)
        self._changed()
        self._waiters.wake()
        return self.revision

    async def _follow(self, start: int) -> None:
        await follow(self._store, self._prefix, start, apply=self._apply, reload=self._load, what=self._what)

    def _apply(self, ev: WatchEvent) -> None:
        if ev.kind == "put":
            self._safely(ev.key, functools.partial(self._put, ev.key, ev, ev.revision))
        else:
            self._safely(ev.key, functools.partial(self._delete, ev.key))
        self.revision = ev.revision
        self._changed()
        self._waiters.wake()

    def _safely(self, key: str, apply: Callable[[], None]) -> None:
        try:
            apply()
        except (KeyError, ValueError, TypeError) as exc:  # a malformed record: skip it, loudly
            log.error("%s: ignoring malformed %s (%s)", self._what, key, exc)

    # ------------------------------------------------------------------ readers
    async def wait_revision(self, revision: int, timeout_s: float = 5.0) -> bool:
        """Wait until the cache has applied every write up to ``revision``; False on timeout."""
        return await self._waiters.wait_for(lambda: self.revision >= revision, timeout_s)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds (now, or after some change); False on timeout."""
        return await self._waiters.wait_for(predicate, timeout_s)
