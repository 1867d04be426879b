"""Partition routing: pure functions, no I/O.

Keys are hashed with FNV-1a 64 over their UTF-8 bytes, the function Danube's own clients
use, so a key lands on the same partition whichever client produced it.
"""

from __future__ import annotations

import random

from danube_sdk.types import RoutingMode

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64 bit."""
    h = FNV64_OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


def partition_for_key(key: str, partitions: int) -> int:
    return fnv1a64(key.encode("utf-8")) % partitions


class PartitionRouter:
    """Chooses the partition index of each message of one producer."""

    __slots__ = ("_fixed", "_mode", "_n", "_next")

    def __init__(self, partitions: int, mode: RoutingMode, *, rng: random.Random | None = None) -> None:
        if partitions < 1:
            raise ValueError("a topic has at least one partition")
        self._n = partitions
        self._mode = mode
        self._next = 0
        self._fixed = (rng or random.Random()).randrange(partitions)

    def choose(self, key: str | None) -> int:
        if self._n == 1:
            return 0
        if key is not None:
            return partition_for_key(key, self._n)
        if self._mode is RoutingMode.SINGLE_PARTITION:
            return self._fixed
        i = self._next
        self._next = (i + 1) % self._n
        return i
