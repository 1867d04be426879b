"""Shared: round-robin, one message at a time, over the routable consumers.

A consumer whose queue is full is skipped (its turn goes to the next one); a message is left
over only when every consumer is full. When every consumer has room for its share of the
batch, the split is done with list slices (``batch[t::k]``) instead of a per-message loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from danube_broker.dispatch.base import Msg, Router, Routing, Target


class SharedRouter(Router):
    def __init__(self) -> None:
        self._consumers: list[Target] = []
        #: Index (in ``_consumers``) of the consumer whose turn is next.
        self._next = 0

    def set_consumers(self, consumers: Sequence[Target]) -> None:
        self._consumers = list(consumers)
        self._next = self._next % len(self._consumers) if self._consumers else 0

    def route(self, batch: list[Msg]) -> Routing:
        cs = self._consumers
        k = len(cs)
        n = len(batch)
        if k == 0:
            return Routing(unroutable=n)
        if n == 0:
            return Routing()
        start = self._next
        share = -(-n // k)  # the most any one consumer gets: ceil(n / k)
        if all(c.free >= share for c in cs):
            self._next = (start + n) % k
            if k == 1:
                return Routing(assignments=[(cs[0], batch)])
            return Routing(assignments=[(cs[(start + t) % k], batch[t::k]) for t in range(min(k, n))])
        return self._route_by_space(batch, start)

    def _route_by_space(self, batch: list[Msg], start: int) -> Routing:
        cs = self._consumers
        k = len(cs)
        free = [c.free for c in cs]
        buckets: list[list[Msg]] = [[] for _ in cs]
        turn = start
        overflow: list[Msg] = []
        for i, msg in enumerate(batch):
            for step in range(k):
                j = (turn + step) % k
                if free[j] > 0:
                    buckets[j].append(msg)
                    free[j] -= 1
                    turn = j + 1
                    break
            else:  # everyone is full: so is the rest of the batch
                overflow = batch[i:]
                break
        self._next = turn % k
        return Routing(
            assignments=[(c, b) for c, b in zip(cs, buckets, strict=True) if b],
            overflow=overflow,
        )
