"""The registry's background work on topics, and the crash flag of topics' internal tasks.

- **Opening**: a reliable topic the assignment watch loads is opened at once (log recovered,
  subscriptions restored) by a task started here, so it is ready before its clients return.
- **Closing**: an unloaded topic writes its cursors and closes its log in a task started here;
  opening the same topic again waits for that close first, so one log directory is never open
  twice in this process.
- **Crashes**: a reliable topic's dispatcher, cursor flusher or policy watch that crashes calls
  :meth:`TopicTasks.report_failure`; ``failed`` is then set and the broker stops, loudly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from danube_broker.topic import Topic

log = logging.getLogger(__name__)

_OPEN_PREFIX = "open-"


class TopicTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing: dict[str, asyncio.Task[None]] = {}
        #: Set when an internal task of a topic crashed; ``failure`` says which and why.
        self.failed = asyncio.Event()
        self.failure: BaseException | None = None

    def report_failure(self, what: str, exc: BaseException) -> None:
        log.error("%s crashed: stopping the broker", what, exc_info=exc)
        if self.failure is None:
            self.failure = RuntimeError(f"{what} crashed: {exc!r}")
            self.failure.__cause__ = exc
        self.failed.set()

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def open(self, topic: Topic, opening: Awaitable[None]) -> None:
        """Run ``opening`` (of a topic the watch loaded) in the background."""
        self._spawn(opening, f"{_OPEN_PREFIX}{topic.name}")

    def close(self, topic: Topic) -> None:
        """Finish closing ``topic`` (already out of service) in the background."""
        previous = self._closing.get(topic.name)
        self._closing[topic.name] = self._spawn(self._aclose(topic, previous), f"close-{topic.name}")

    async def _aclose(self, topic: Topic, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.shield(previous)
        try:
            await topic.aclose()
        except Exception:
            log.exception("topic %s: closing it failed", topic.name)
        finally:
            if self._closing.get(topic.name) is asyncio.current_task():
                del self._closing[topic.name]

    async def before_open(self, name: str) -> None:
        """Wait until an earlier instance of topic ``name`` is closed."""
        previous = self._closing.get(name)
        if previous is not None:
            await asyncio.shield(previous)

    async def wait(self) -> None:
        """Cancel openings in progress, and wait for every close to finish."""
        for task in list(self._tasks):
            if task.get_name().startswith(_OPEN_PREFIX):
                task.cancel()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
