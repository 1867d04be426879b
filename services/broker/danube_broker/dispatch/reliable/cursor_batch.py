"""Several topics' cursor writes in one etcd transaction: the pure part.

Each topic's writes carry the compare that fences them (its owner key at the epoch this broker
holds it at). A batch is one transaction whose compares are all of its topics' fences and whose
operations are all of their puts: it lands whole or not at all. etcd refuses a transaction with
more than ``--max-txn-ops`` (default 128) operations in a branch, or compares; batches stay
within ``max_ops`` (100 by default) of each. A topic whose writes alone exceed ``max_ops`` is a
batch by itself (its own store splits it, each part fenced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from danube_common.metadata.store import Compare, Op

#: Operations (and compares) per transaction: etcd's default --max-txn-ops is 128.
MAX_TXN_OPS = 100

T = TypeVar("T")


@dataclass(slots=True)
class CursorWrite(Generic[T]):
    """One topic's pending cursor writes: ``owner`` is the topic, ``changed`` what it writes."""

    owner: T
    fence: Compare
    ops: list[Op]
    #: What the owner writes per subscription (for a reliable topic: cursor and acked ranges).
    changed: dict[str, Any] = field(default_factory=dict)


def chunk_sizes(sizes: Sequence[int], max_ops: int = MAX_TXN_OPS) -> list[list[int]]:
    """Group indices of ``sizes`` (operations per topic, each >= 1), in order, so that each
    group's operations add up to at most ``max_ops``; an item larger than ``max_ops`` is a group
    of its own. Compares (one per item) never outnumber operations, so they fit too."""
    if max_ops < 1:
        raise ValueError(f"max_ops must be >= 1, got {max_ops}")
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if current and total + size > max_ops:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    return groups


def batches(writes: Sequence[CursorWrite[T]], max_ops: int = MAX_TXN_OPS) -> list[list[CursorWrite[T]]]:
    """``writes`` grouped into transactions (see :func:`chunk_sizes`)."""
    return [[writes[i] for i in group] for group in chunk_sizes([len(w.ops) for w in writes], max_ops)]


def combined(batch: Sequence[CursorWrite[T]]) -> tuple[list[Compare], list[Op]]:
    """The compares and operations of one transaction carrying ``batch``."""
    return [w.fence for w in batch], [op for w in batch for op in w.ops]
