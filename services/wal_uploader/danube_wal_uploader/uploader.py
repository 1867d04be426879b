"""The uploader of one broker's data directory: topics, the background loop, Flush, broker death.

- **Background loop** (:meth:`Uploader.run`): every ``scan_interval_s`` (or at once when woken)
  the data directory is listed and each topic with a sealed segment past its checkpoint gets a
  pass (one task per topic, never two at once; ``max_concurrent_uploads`` objects in flight
  across topics). A topic whose step failed waits its backoff.
- **Flush** (:meth:`Uploader.flush`): uploads now, including the open segment up to the offset
  the broker says is durable, and returns the checkpoint.
- **Broker death** (:class:`BrokerWatch` on ``/{cluster}/brokers/{broker_id}``): while the key is
  absent, each topic whose log record still names the broker as its writer gets its log end
  recorded (the intact end of the local log: the new owner waits for exactly this), then every
  intact frame up to there is uploaded. When the key comes back, normal mode resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from danube_common.errors import DanubeError, FailedPrecondition
from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore, WatchCompacted
from danube_common.objstore import ObjectStore
from danube_common.topic_name import TopicName
from danube_common.wal.journal import replay_unless_locked
from danube_wal_uploader.config import WalUploaderConfig
from danube_wal_uploader.disk import discover_topics
from danube_wal_uploader.metrics import TopicProgress, Totals, format_line, totals_log_values
from danube_wal_uploader.topic import Context, RetryPolicy, TopicUploader, _checkpoint_of

log = logging.getLogger(__name__)


class BrokerWatch:
    """Follows the broker's registration key: ``alive`` while it exists."""

    def __init__(self, store: MetadataStore, key: str, on_change: Callable[[bool], None]) -> None:
        self._store = store
        self._key = key
        self._on_change = on_change
        self._revision = 0
        self.alive: bool | None = None

    async def read(self) -> bool:
        kvs, revision = await self._store.get_prefix(self._key)
        self._revision = revision
        self._set(any(kv.key == self._key for kv in kvs))
        assert self.alive is not None
        return self.alive

    def _set(self, alive: bool) -> None:
        if alive != self.alive:
            self.alive = alive
            self._on_change(alive)

    async def run(self) -> None:
        """Follow the key forever (re-reading it after a compaction)."""
        if self.alive is None:
            await self.read()
        while True:
            try:
                async for ev in self._store.watch_prefix(self._key, start_revision=self._revision + 1):
                    self._revision = ev.revision
                    if ev.key == self._key:
                        self._set(ev.kind == "put")
            except WatchCompacted:
                log.warning("the watch on %s fell behind a compaction: reading it again", self._key)
                await self.read()


class Uploader:
    def __init__(
        self, cfg: WalUploaderConfig, store: MetadataStore, objects: ObjectStore, keys: Keys
    ) -> None:
        self.cfg = cfg
        self.keys = keys
        self.data_path = cfg.data_path
        self.totals = Totals()
        self.ctx = Context(
            store=store,
            keys=keys,
            objects=objects,
            broker_id=cfg.broker_id,
            uploads=asyncio.Semaphore(cfg.max_concurrent_uploads),
            totals=self.totals,
            retry=RetryPolicy(cfg.retry_initial_s, cfg.retry_max_s),
        )
        self.topics: dict[TopicName, TopicUploader] = {}
        self.broker_alive = True
        #: Incremented each time the broker dies: final states are written once per death.
        self.death_epoch = 0
        #: Whether the broker was ever seen registered by this process (for the log wording).
        self._seen_alive = False
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ broker liveness

    def set_broker_alive(self, alive: bool) -> None:
        if alive == self.broker_alive:
            self._seen_alive = self._seen_alive or alive
            return
        self.broker_alive = alive
        if alive:
            again = " again" if self._seen_alive else ""
            self._seen_alive = True
            log.info("broker %s is registered%s: uploading sealed segments only", self.cfg.broker_id, again)
            for t in self.topics.values():
                t.progress.final = False
        else:
            self.death_epoch += 1
            if self._seen_alive:
                log.warning(
                    "broker %s is gone (its registration lease ended): uploading every topic's remaining "
                    "data, the open segments included, then recording where each log ends",
                    self.cfg.broker_id,
                )
            else:
                log.info(
                    "broker %s is not registered (not started yet, or gone): a log whose broker lock is "
                    "free is uploaded to its end, as after the broker's death",
                    self.cfg.broker_id,
                )
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ topics

    async def discover(self) -> None:
        found = await asyncio.to_thread(discover_topics, self.data_path)
        for name, path in found.items():
            if name not in self.topics:
                self.topics[name] = TopicUploader(name, path, self.ctx)
        for name in [
            n for n, t in self.topics.items() if n not in found and not t.scheduled and not t.lock.locked()
        ]:
            del self.topics[name]

    def _topic(self, name: TopicName) -> TopicUploader | None:
        t = self.topics.get(name)
        if t is None:
            path = self.data_path / name.namespace / name.local
            if path.is_dir():
                t = self.topics[name] = TopicUploader(name, path, self.ctx)
        return t

    # ------------------------------------------------------------------ the background loop

    async def run(self) -> None:
        """Passes until cancelled. An unexpected error in a pass ends the loop (and the process)."""
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._log_status(), name="uploader-status-log")
            while True:
                self._wake.clear()
                await self.discover()
                dead, epoch = not self.broker_alive, self.death_epoch
                # A broker with a commit journal (wal.commit_sync: journal) that died with its
                # machine left acknowledged frames only there: put them back first.
                replayed = not dead or await self._replay_journal()
                now = loop.time()
                for t in self.topics.values():
                    if not replayed or t.scheduled or t.retry_at > now:
                        continue
                    t.scheduled = True
                    tg.create_task(t.run_pass(dead=dead, death_epoch=epoch), name=f"upload:{t.name}")
                interval = self.cfg.scan_interval_s
                if dead:
                    interval = min(interval, self.cfg.final_state_poll_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), interval)

    async def _replay_journal(self) -> bool:
        """Apply a dead broker's commit journal to its segments before any of them is read
        (a live broker process holds the journal's lock: it replayed it when it started).
        False (logged; retried at the next pass) when that failed: nothing is read meanwhile."""
        try:
            await asyncio.to_thread(replay_unless_locked, self.data_path)
        except OSError as exc:
            log.error(
                "replaying the broker's commit journal in %s failed (%s): its logs are not read until it "
                "succeeds; check the disk",
                self.data_path,
                exc,
            )
            return False
        return True

    async def _log_status(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.status_log_interval_s)
            lagging = [t.progress for t in self.topics.values() if t.progress.lag_bytes > 0]
            if not lagging:
                continue
            progress = [t.progress for t in self.topics.values()]
            log.info(
                "%s",
                format_line(totals_log_values(self.totals, broker_alive=self.broker_alive, topics=progress)),
            )
            for p in sorted(lagging, key=lambda p: -p.lag_bytes)[:10]:
                log.info("%s last_error=%r", format_line(p.log_values(), topic=p.topic), p.last_error)

    # ------------------------------------------------------------------ Flush and Status

    async def flush(self, name: TopicName, up_to: int | None, *, timeout_s: float) -> TopicProgress:
        """Upload ``name`` up to ``up_to`` (see :meth:`TopicUploader.flush`); its progress after."""
        deadline = asyncio.get_running_loop().time() + min(timeout_s, self.cfg.flush_timeout_s)
        t = self._topic(name)
        if t is None:
            checkpoint = _checkpoint_of(await self.ctx.store.get(self.keys.upload_checkpoint(name)))
            if up_to and (checkpoint or 0) < up_to:
                raise FailedPrecondition(
                    f"topic {name} has no data in {self.data_path} and its checkpoint is {checkpoint}: "
                    f"offsets up to {up_to} cannot be uploaded from here"
                )
            return TopicProgress(str(name), uploaded_next_offset=checkpoint or 0)
        await t.flush(up_to, dead=not self.broker_alive, deadline=deadline)
        return t.progress

    async def flush_all(self, *, timeout_s: float) -> list[TopicProgress]:
        """Upload what is durable for every topic; errors are reported per topic, not raised."""
        await self.discover()

        async def one(t: TopicUploader) -> None:
            with contextlib.suppress(DanubeError):  # kept in the topic's progress (last_error)
                await self.flush(t.name, None, timeout_s=timeout_s)

        await asyncio.gather(*(one(t) for t in list(self.topics.values())))
        return self.status()

    def figures(self) -> tuple[Totals, bool, list[TopicProgress]]:
        """Totals, whether the broker is alive, and every topic's progress (for metrics)."""
        return self.totals, self.broker_alive, [t.progress for t in self.topics.values()]

    def status(self, name: TopicName | None = None) -> list[TopicProgress]:
        if name is not None:
            t = self.topics.get(name)
            return [t.progress] if t is not None else []
        return [t.progress for _, t in sorted(self.topics.items(), key=lambda kv: str(kv[0]))]
