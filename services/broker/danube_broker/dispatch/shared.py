"""Shared: round-robin, one message at a time, over the routable consumers.

A consumer whose queue is full is skipped (its turn goes to the next one); a message is left
over only when every consumer is full. When every consumer has room for its share of the
batch, the split is done with list slices (``batch[t::k]``) instead of a per-message loop.

**Chunks of a large message stay together**: the consumer that got a message's first chunk
(``StreamMessage.chunk``, see the SDK's chunking) gets all its later chunks, as only one consumer
can reassemble it; while that consumer is full, the chunk and what follows it wait (overflow).
A chunk whose first chunk was routed before this router existed (a restart) starts a new
owner. With more than one consumer, a batch is scanned for chunks (one field presence test per
message) before the sliced split is taken.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from danube_broker.dispatch.base import Msg, Router, Routing, Target

#: Most chunked messages in flight whose owner a router remembers (the oldest is forgotten).
MAX_CHUNK_OWNERS = 4096


class SharedRouter(Router):
    def __init__(self) -> None:
        self._consumers: list[Target] = []
        #: Index (in ``_consumers``) of the consumer whose turn is next.
        self._next = 0
        #: Message uuid -> the consumer that got its chunks so far (until its last chunk).
        self._chunk_owners: OrderedDict[str, Target] = OrderedDict()

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
        if k > 1 and any(m.HasField("chunk") for m in batch):
            return self._route_by_space(batch, start)
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
        owners = self._chunk_owners
        for i, msg in enumerate(batch):
            chunk = msg.chunk if msg.HasField("chunk") else None
            if chunk is not None and chunk.index > 0:
                owner = owners.get(chunk.message_uuid)
                j = _position(cs, owner) if owner is not None else -1
                if j >= 0:
                    if free[j] <= 0:  # its reassembling consumer is full: wait for it
                        overflow = batch[i:]
                        break
                    buckets[j].append(msg)
                    free[j] -= 1
                    if chunk.index + 1 >= chunk.count:
                        del owners[chunk.message_uuid]
                    continue
            for step in range(k):
                j = (turn + step) % k
                if free[j] > 0:
                    buckets[j].append(msg)
                    free[j] -= 1
                    turn = j + 1
                    if chunk is not None and chunk.index + 1 < chunk.count:
                        self._own(chunk.message_uuid, cs[j])
                    break
            else:  # everyone is full: so is the rest of the batch
                overflow = batch[i:]
                break
        self._next = turn % k
        return Routing(
            assignments=[(c, b) for c, b in zip(cs, buckets, strict=True) if b],
            overflow=overflow,
        )

    def _own(self, message_uuid: str, consumer: Target) -> None:
        owners = self._chunk_owners
        owners[message_uuid] = consumer
        owners.move_to_end(message_uuid)
        while len(owners) > MAX_CHUNK_OWNERS:
            owners.popitem(last=False)


def _position(consumers: list[Target], target: Target) -> int:
    """Index of ``target`` among the routable consumers (-1: it left)."""
    for j, c in enumerate(consumers):
        if c is target:
            return j
    return -1
