"""KeyShared: every key goes to one consumer, chosen on a consistent-hash ring.

Each routable consumer owns ``virtual_nodes`` points on a 64-bit ring (hash of
``"{consumer name}#{i}"``, so a reconnecting consumer gets its keys back). A key is hashed onto
the ring and walks clockwise to the first point whose consumer accepts it: a consumer with
key filters (glob patterns) accepts only matching keys, one without filters accepts all. A key
no consumer accepts is unroutable (dropped). The key is the message's ``routing_key``, or its
``producer_name`` when it has none. Key -> consumer answers are cached until the ring changes.
"""

from __future__ import annotations

import bisect
import fnmatch
import hashlib
import re
from collections.abc import Iterable, Sequence

from danube_broker.dispatch.base import Msg, Router, Routing, Target

DEFAULT_VIRTUAL_NODES = 64
#: Cached key decisions kept before the cache is reset (bounds memory on high-cardinality keys).
_CACHE_MAX_KEYS = 65_536


def ring_hash(text: str) -> int:
    """A stable 64-bit hash (the same in every process, unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def compile_key_filters(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One regex matching any of the glob ``patterns`` (fnmatch syntax); None if there are none."""
    pats = [p for p in patterns if p]
    if not pats:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in pats))


def message_key(msg: Msg) -> str:
    return msg.routing_key or msg.producer_name


class KeySharedRouter(Router):
    def __init__(self, *, virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be at least 1, got {virtual_nodes}")
        self._vnodes = virtual_nodes
        self._points: list[int] = []
        self._owners: list[Target] = []
        self._cache: dict[str, Target | None] = {}

    def set_consumers(self, consumers: Sequence[Target]) -> None:
        ring = sorted((ring_hash(f"{c.name}#{i}"), c.name, c) for c in consumers for i in range(self._vnodes))
        self._points = [h for h, _, _ in ring]
        self._owners = [c for _, _, c in ring]
        self._cache.clear()

    def owner_of(self, key: str) -> Target | None:
        """The consumer that gets ``key`` now; None if no consumer accepts it."""
        cache = self._cache
        if key in cache:
            return cache[key]
        owner: Target | None = None
        points = self._points
        if points:
            size = len(points)
            i = bisect.bisect_left(points, ring_hash(key))
            seen: set[int] = set()
            for step in range(size):
                c = self._owners[(i + step) % size]
                if id(c) in seen:
                    continue
                if c.accepts(key):
                    owner = c
                    break
                seen.add(id(c))
        if len(cache) >= _CACHE_MAX_KEYS:
            cache.clear()
        cache[key] = owner
        return owner

    def route(self, batch: list[Msg]) -> Routing:
        if not self._points:
            return Routing(unroutable=len(batch))
        owner_of = self.owner_of
        groups: dict[int, tuple[Target, list[Msg]]] = {}
        unroutable = 0
        for msg in batch:
            c = owner_of(msg.routing_key or msg.producer_name)
            if c is None:
                unroutable += 1
                continue
            entry = groups.get(id(c))
            if entry is None:
                groups[id(c)] = (c, [msg])
            else:
                entry[1].append(msg)
        return Routing(assignments=list(groups.values()), unroutable=unroutable)
