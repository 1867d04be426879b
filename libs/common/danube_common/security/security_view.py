"""A local copy of RBAC roles and bindings, fed by one watch: the policy every check reads.

Lists ``/{cluster}/auth/`` once, then follows the watch from that revision (re-listing after a
compaction), so a revoked binding stops granting as soon as its delete event arrives: within the
watch latency on every service. Reads are synchronous dictionary lookups (the interceptor calls
them on every RPC). A writer that must see its own write waits for the write's revision
(:meth:`SecurityView.wait_revision`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from danube_common.keys import Keys
from danube_common.metadata.follow import Waiters, follow
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.security.rbac import BUILTIN_ROLES, Binding, Role

log = logging.getLogger(__name__)


class SecurityView:
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        self._store = store
        self._keys = keys
        self.roles: dict[str, Role] = {}
        self.bindings: dict[str, Binding] = {}
        #: principal -> its bindings (rebuilt on each binding change).
        self._by_principal: dict[str, list[Binding]] = {}
        self.revision = 0
        self._waiters = Waiters()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        rev = await self._load()
        self._task = asyncio.create_task(self._follow(rev + 1), name="security-view")

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The watch loop, for supervisors: it only ends by failing."""
        return self._task

    async def _load(self) -> int:
        kvs, rev = await self._store.get_prefix(self._keys.auth_prefix())
        self.roles, self.bindings = {}, {}
        for kv in kvs:
            self._put(kv.key, kv)
        self._index()
        self.revision = rev
        self._waiters.wake()
        return rev

    async def _follow(self, start: int) -> None:
        await follow(
            self._store,
            self._keys.auth_prefix(),
            start,
            apply=self._apply,
            reload=self._load,
            what="security view",
        )

    def _apply(self, ev: WatchEvent) -> None:
        try:
            if ev.kind == "put":
                self._put(ev.key, ev)
            else:
                self._delete(ev.key)
        except (KeyError, ValueError, TypeError) as exc:  # a malformed record: skip it, loudly
            log.error("security view: ignoring malformed %s (%s)", ev.key, exc)
        self._index()
        self.revision = ev.revision
        self._waiters.wake()

    def _put(self, key: str, kv: KeyValue | WatchEvent) -> None:
        parsed = self._keys.parse_auth_key(key)
        if parsed is None:
            return
        kind, name = parsed
        if kind == "role":
            self.roles[name] = Role.from_json(name, kv.json())
        else:
            self.bindings[name] = Binding.from_json(name, kv.json())

    def _delete(self, key: str) -> None:
        parsed = self._keys.parse_auth_key(key)
        if parsed is None:
            return
        kind, name = parsed
        (self.roles if kind == "role" else self.bindings).pop(name, None)

    def _index(self) -> None:
        by: dict[str, list[Binding]] = {}
        for b in self.bindings.values():
            by.setdefault(b.principal, []).append(b)
        self._by_principal = by

    # ------------------------------------------------------------------ PolicySource
    def role(self, name: str) -> Role | None:
        return BUILTIN_ROLES.get(name) or self.roles.get(name)

    def bindings_for(self, principal: str) -> Sequence[Binding]:
        return self._by_principal.get(principal, ())

    async def wait_revision(self, revision: int, timeout_s: float = 5.0) -> bool:
        """Wait until the cache has applied every write up to ``revision``; False on timeout."""
        return await self._waiters.wait_for(lambda: self.revision >= revision, timeout_s)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
