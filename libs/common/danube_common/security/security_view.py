"""A local copy of RBAC roles and bindings, fed by one watch: the policy every check reads.

Lists ``/{cluster}/auth/`` once, then follows the watch from that revision (re-listing after a
compaction), so a revoked binding stops granting as soon as its delete event arrives: within the
watch latency on every service. Reads are synchronous dictionary lookups (the interceptor calls
them on every RPC). A writer that must see its own write waits for the write's revision
(:meth:`SecurityView.wait_revision`).
"""

from __future__ import annotations

from collections.abc import Sequence

from danube_common.keys import Keys
from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.security.rbac import BUILTIN_ROLES, Binding, Role


class SecurityView(WatchedCache):
    def __init__(self, store: MetadataStore, keys: Keys) -> None:
        super().__init__(store, keys.auth_prefix(), what="security view")
        self._keys = keys
        self.roles: dict[str, Role] = {}
        self.bindings: dict[str, Binding] = {}
        #: principal -> its bindings (rebuilt on each change).
        self._by_principal: dict[str, list[Binding]] = {}

    def _reset(self) -> None:
        self.roles, self.bindings = {}, {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        parsed = self._keys.parse_auth_key(key)
        if parsed is None:
            return
        kind, name = parsed
        if kind == "role":
            self.roles[name] = Role.from_json(name, item.json())
        else:
            self.bindings[name] = Binding.from_json(name, item.json())

    def _delete(self, key: str) -> None:
        parsed = self._keys.parse_auth_key(key)
        if parsed is None:
            return
        kind, name = parsed
        (self.roles if kind == "role" else self.bindings).pop(name, None)

    def _changed(self) -> None:
        by: dict[str, list[Binding]] = {}
        for b in self.bindings.values():
            by.setdefault(b.principal, []).append(b)
        self._by_principal = by

    # ------------------------------------------------------------------ PolicySource
    def role(self, name: str) -> Role | None:
        return BUILTIN_ROLES.get(name) or self.roles.get(name)

    def bindings_for(self, principal: str) -> Sequence[Binding]:
        return self._by_principal.get(principal, ())
