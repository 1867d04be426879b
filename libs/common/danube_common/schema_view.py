"""A local copy of the schema registry (subjects, versions, ids, topic schemas), fed by one watch.

The lookup service answers registry reads from it and the brokers validate publishes with it.
Like every watch-fed cache it lists once, then follows the watch from that listing's revision, so
it never misses a change. A writer that must read its own write waits for the write's revision
(:meth:`CompileCache.wait_revision`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from danube_common.keys import Keys
from danube_common.metadata.follow import Waiters, follow
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.schema_store import SubjectRecord, TopicSchemaConfig, VersionRecord

log = logging.getLogger(__name__)


class SchemaView:
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self._store = store
        self._keys = keys
        self.subjects: dict[str, SubjectRecord] = {}
        #: subject -> version -> record.
        self.versions: dict[str, dict[int, VersionRecord]] = {}
        self.topics: dict[str, TopicSchemaConfig] = {}
        self.revision = 0
        self._waiters = Waiters()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        rev = await self._load()
        self._task = asyncio.create_task(self._follow(rev + 1), name="schema-view")

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The watch loop, for supervisors: it only ends by failing."""
        return self._task

    async def _load(self) -> int:
        kvs, rev = await self._store.get_prefix(self._keys.schemas_prefix())
        self.subjects, self.versions, self.topics = {}, {}, {}
        for kv in kvs:
            self._put(kv.key, kv)
        self.revision = rev
        self._waiters.wake()
        return rev

    async def _follow(self, start: int) -> None:
        await follow(
            self._store,
            self._keys.schemas_prefix(),
            start,
            apply=self._apply,
            reload=self._load,
            what="schema view",
        )

    def _apply(self, ev: WatchEvent) -> None:
        try:
            if ev.kind == "put":
                self._put(ev.key, ev)
            else:
                self._delete(ev.key)
        except (KeyError, ValueError, TypeError) as exc:  # a malformed record: skip it, loudly
            log.error("schema view: ignoring malformed %s (%s)", ev.key, exc)
        self.revision = ev.revision
        self._waiters.wake()

    def _put(self, key: str, kv: KeyValue | WatchEvent) -> None:
        parsed = self._keys.parse_schema_key(key)
        if parsed is not None:
            subject, version = parsed
            if version is None:
                self.subjects[subject] = SubjectRecord.from_json(subject, kv.json())
            else:
                self.versions.setdefault(subject, {})[version] = VersionRecord.from_json(
                    subject, version, kv.json()
                )
            return
        topic = self._keys.parse_topic_schema(key)
        if topic is not None:
            self.topics[str(topic)] = TopicSchemaConfig.from_json(kv.json())

    def _delete(self, key: str) -> None:
        parsed = self._keys.parse_schema_key(key)
        if parsed is not None:
            subject, version = parsed
            if version is None:
                self.subjects.pop(subject, None)
                self.versions.pop(subject, None)
            else:
                self.versions.get(subject, {}).pop(version, None)
            return
        topic = self._keys.parse_topic_schema(key)
        if topic is not None:
            self.topics.pop(str(topic), None)

    # ------------------------------------------------------------------ reads
    def subject_by_id(self, schema_id: int) -> SubjectRecord | None:
        return next((s for s in self.subjects.values() if s.schema_id == schema_id), None)

    def latest(self, subject: str) -> VersionRecord | None:
        versions = self.versions.get(subject)
        return versions[max(versions)] if versions else None

    def version(self, subject: str, version: int) -> VersionRecord | None:
        return self.versions.get(subject, {}).get(version)

    def all_versions(self, subject: str) -> list[VersionRecord]:
        return [v for _, v in sorted(self.versions.get(subject, {}).items())]

    def topic(self, topic: str) -> TopicSchemaConfig | None:
        return self.topics.get(topic)

    async def wait_revision(self, revision: int, timeout_s: float = 5.0) -> bool:
        """Wait until the cache has applied every write up to ``revision``; False on timeout."""
        return await self._waiters.wait_for(lambda: self.revision >= revision, timeout_s)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
