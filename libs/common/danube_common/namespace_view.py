"""A local copy of every namespace's policies, and of the topics' own limits over them, fed by
one etcd watch (topics' own limits live under their namespace: ``Keys.topic_policies``).

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
#: Between a namespace and a topic's local name in a topic policies key.
_TOPIC_POLICIES = "/topic_policies/"


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
        #: Topic name -> the limits it sets over its namespace's (topics that set some).
        self.topic_policies: dict[str, NamespacePolicies] = {}
        self.on_change = on_change
        self._dirty: set[str] = set()

    def get(self, ns: str) -> NamespacePolicies:
        """The namespace's policies (empty when it has none, or is unknown)."""
        return self.policies.get(ns, _EMPTY)

    def of_topic(self, topic: str) -> NamespacePolicies | None:
        """The limits ``topic`` (its full name) sets over its namespace's; None: none."""
        return self.topic_policies.get(topic)

    def _namespace(self, key: str) -> str | None:
        rest = key[self._prefix_len :]
        return rest if rest and "/" not in rest else None

    def _topic(self, key: str) -> tuple[str, str] | None:
        """(namespace, topic name) of a topic policies key; None for other keys."""
        ns, sep, local = key[self._prefix_len :].partition(_TOPIC_POLICIES)
        return (ns, f"/{ns}/{local}") if sep and ns and local and "/" not in ns else None

    def _reset(self) -> None:
        self._dirty |= set(self.policies) | {t.split("/")[1] for t in self.topic_policies}
        self.policies = {}
        self.topic_policies = {}

    def _put(self, key: str, item: KeyValue | WatchEvent, revision: int) -> None:
        ns = self._namespace(key)
        if ns is None:
            self._put_topic(key, item)
            return
        value = item.json()
        stored = value.get("policies") if isinstance(value, dict) else None
        new = NamespacePolicies.from_json(stored if isinstance(stored, dict) else None)
        if self.policies.get(ns, _EMPTY) != new:
            self._dirty.add(ns)
        self.policies[ns] = new

    def _put_topic(self, key: str, item: KeyValue | WatchEvent) -> None:
        found = self._topic(key)
        if found is None:
            return
        ns, topic = found
        value = item.json()
        try:
            new = NamespacePolicies.from_json(value if isinstance(value, dict) else None)
        except TypeError:  # not a policies document: ignored, as a newer writer's might be
            log.warning("ignoring the unreadable topic policies at %s", key)
            return
        if self.topic_policies.get(topic) != new:
            self._dirty.add(ns)
        self.topic_policies[topic] = new

    def _delete(self, key: str) -> None:
        ns = self._namespace(key)
        if ns is not None and self.policies.pop(ns, None) is not None:
            self._dirty.add(ns)
        found = self._topic(key) if ns is None else None
        if found is not None and self.topic_policies.pop(found[1], None) is not None:
            self._dirty.add(found[0])

    def _changed(self) -> None:
        dirty, self._dirty = self._dirty, set()
        if dirty and self.on_change is not None:
            try:
                self.on_change(dirty)
            except Exception:  # a listener's bug must not stop the watch
                log.exception("applying namespace policy changes of %s failed", sorted(dirty))
