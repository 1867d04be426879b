"""A local copy of every namespace's policies, fed by one etcd watch.

Brokers read topic limits from it on the hot path (no etcd read per request) and are told of
each change (``on_change``, called with the namespace names changed, once per applied event or
listing) so running topics pick a change up at once. Like every watch-fed cache it lists once,
then follows the watch from that listing's revision; after a compaction it lists again and
reports every namespace as changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from danube_common.keys import Keys
from danube_common.metadata.follow import WatchedCache
from danube_common.metadata.store import KeyValue, MetadataStore, WatchEvent
from danube_common.namespace_policies import NamespacePolicies

log = logging.getLogger(__name__)

_EMPTY = NamespacePolicies()


class NamespaceView(WatchedCache):
    def __init__(
        self,
        store: MetadataStore,
        keys: Keys,
        *,
        on_change: Callable[[set[str]], None] | None = None,
    ) -> None:
        super().__init__(store, keys.namespaces_prefix(), what="namespace policy view")
        self._prefix_len = len(keys.namespaces_prefix())
        self.policies: dict[str, NamespacePolicies] = {}
        self.on_change = on_change
        self._dirty: set[str] = set()

    def get(self, ns: str) -> NamespacePolicies:
        """The namespace's policies (empty when it has none, or is unknown)."""
        return self.policies.get(ns, _EMPTY)

    def _namespace(self, key: str) -> str | None:
        rest = key[self._prefix_len :]
        return rest if rest and "/" not in rest else None

    def _reset(self) -> None:
        self._dirty |= set(self.policies)
        self.policies = {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        ns = self._namespace(key)
        if ns is None:
            return
        value = item.json()
        stored = value.get("policies") if isinstance(value, dict) else None
        new = NamespacePolicies.from_json(stored if isinstance(stored, dict) else None)
        if self.policies.get(ns, _EMPTY) != new:
            self._dirty.add(ns)
        self.policies[ns] = new

    def _delete(self, key: str) -> None:
        ns = self._namespace(key)
        if ns is not None and self.policies.pop(ns, None) is not None:
            self._dirty.add(ns)

    def _changed(self) -> None:
        dirty, self._dirty = self._dirty, set()
        if dirty and self.on_change is not None:
            try:
                self.on_change(dirty)
            except Exception:  # a listener's bug must not stop the watch
                log.exception("applying namespace policy changes of %s failed", sorted(dirty))
